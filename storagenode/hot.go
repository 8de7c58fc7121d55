package storagenode

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/netdir/netdir/wire"
)

func beUint64(b []byte) uint64                  { return binary.BigEndian.Uint64(b) }
func cmpU64(a, b uint64) int                    { return cmp.Compare(a, b) }
func sortFunc[T any](s []T, f func(a, b T) int) { slices.SortFunc(s, f) }

// promote: the controller tells the head that a key is hot. The head
// persists the promotion (so that after a restart it still refuses
// unstamped writes), answers with its latest version (clean or dirty), which
// the controller seeds the data planes' slot with, and copies the clean
// version to the extras now if the key has no write in flight, else when the
// tail's ack comes back.
func (s *shard) promote(p *wire.NodePacket, from netip.AddrPort) {
	n := s.n
	if p.Node != 0 {
		return // not from a controller: a reply, never answered
	}
	part, ch, pos := n.where(p.KeyHash)
	if pos != 0 {
		s.send(from, n.replyPacket(&p.Header, wire.OpPromote, wire.CodeWrongNode, 0, nil))
		return
	}
	ids, err := wire.ParseNodeIDs(p.Value)
	// No extras is a promotion too: the key's writes are stamped by a data
	// plane, and the answer's version seeds its slot.
	valid := err == nil && len(ids) <= 32
	for _, id := range ids {
		if _, known := n.peers[id]; !known || slices.Contains(ch, id) {
			valid = false
		}
	}
	if !valid {
		s.send(from, n.replyPacket(&p.Header, wire.OpPromote, wire.CodeMalformed, 0, nil))
		return
	}
	noStamp := p.Flags&wire.FlagPromoteNoStamp != 0
	persisted := wire.AppendNodeIDs(nil, ids)
	if noStamp {
		persisted = append(persisted, promoNoStampMark)
	}
	t := n.trees[0]
	rec, err := t.getRecord(part, p.Key)
	if err == nil {
		err = t.db.Set(promoKey(p.Key), persisted, pebble.Sync)
	}
	if err != nil {
		s.send(from, n.replyPacket(&p.Header, wire.OpPromote, wire.CodeInternal, 0, nil))
		return
	}
	n.promoMu.Lock()
	old := n.promo[p.KeyHash]
	n.promo[p.KeyHash] = ids
	if noStamp {
		n.noStamp[p.KeyHash] = true
	} else {
		delete(n.noStamp, p.KeyHash)
	}
	n.promoMu.Unlock()
	// Extras dropped from the list drop their copy.
	for _, id := range old {
		if !slices.Contains(ids, id) {
			d := wire.Header{Op: wire.OpDemote, KeyHash: p.KeyHash, Node: n.id, Epoch: n.lay.Epoch()}
			s.send(n.peers[id], wire.AppendNodeOp(nil, &d, p.Key, nil, nil))
		}
	}
	s.send(from, n.replyPacket(&p.Header, wire.OpPromote, wire.CodeOK, rec.Latest().Ver, nil))
	if len(rec.Dirty) == 0 {
		for _, id := range ids {
			s.send(n.peers[id], n.copyPacket(p.KeyHash, p.Key, &rec.Clean))
		}
	}
}

// demote: at the head, forget the promotion and tell the extras to drop
// their copies; at an extra, drop the copy, keeping its version as a
// tombstone.
func (s *shard) demote(p *wire.NodePacket, from netip.AddrPort) {
	n := s.n
	_, _, pos := n.where(p.KeyHash)
	if pos < 0 {
		n.extraMu.Lock()
		if c := n.extras[p.KeyHash]; c.held(p.Key) {
			c.v.Val = nil
			c.dropped = time.Now()
		}
		n.extraMu.Unlock()
		if p.Node == 0 {
			s.send(from, n.replyPacket(&p.Header, wire.OpDemote, wire.CodeOK, 0, nil))
		}
		return
	}
	if p.Node != 0 {
		return // a node's push or a reply: only a controller (node 0) demotes at the head
	}
	if pos != 0 {
		s.send(from, n.replyPacket(&p.Header, wire.OpDemote, wire.CodeWrongNode, 0, nil))
		return
	}
	if err := n.trees[0].db.Delete(promoKey(p.Key), pebble.Sync); err != nil {
		s.send(from, n.replyPacket(&p.Header, wire.OpDemote, wire.CodeInternal, 0, nil))
		return
	}
	n.promoMu.Lock()
	ids := n.promo[p.KeyHash]
	delete(n.promo, p.KeyHash)
	delete(n.noStamp, p.KeyHash)
	n.promoMu.Unlock()
	for _, id := range ids {
		d := wire.Header{Op: wire.OpDemote, KeyHash: p.KeyHash, Node: n.id, Epoch: n.lay.Epoch()}
		s.send(n.peers[id], wire.AppendNodeOp(nil, &d, p.Key, nil, nil))
	}
	s.send(from, n.replyPacket(&p.Header, wire.OpDemote, wire.CodeOK, 0, nil))
}

// copyIn: an extra stores a pushed version (newer only), acks, and
// announces it by VSB. What it holds never goes back: a copy older than the
// version it holds, or held before a demote, is ignored.
func (s *shard) copyIn(p *wire.NodePacket, from netip.AddrPort) {
	n := s.n
	if _, _, pos := n.where(p.KeyHash); pos >= 0 || len(p.Value) > wire.MaxValue {
		return
	}
	v := version{Ver: p.Stamp, Del: p.Code == wire.CodeNotFound}
	if !v.Del {
		v.Val = slices.Clone(p.Value)
	}
	n.extraMu.Lock()
	c := n.extras[p.KeyHash]
	switch {
	case c == nil || string(c.key) != string(p.Key):
		c = &extraCopy{key: slices.Clone(p.Key), v: v}
		n.extras[p.KeyHash] = c
	case !c.dropped.IsZero() && v.Ver < c.v.Ver:
		n.extraMu.Unlock()
		return // from before the demote: the tombstone is newer
	case !c.dropped.IsZero() || v.Ver > c.v.Ver:
		c.v, c.dropped = v, time.Time{}
	}
	held := c.v.Ver
	n.extraMu.Unlock()
	ack := wire.Header{Op: wire.OpCopyAck, KeyHash: p.KeyHash, Stamp: held, Node: n.id, Epoch: n.lay.Epoch()}
	s.send(from, wire.AppendNodeOp(nil, &ack, p.Key, nil, nil))
	s.vsb(p.KeyHash, held)
}

func (s *shard) vsb(h wire.KeyHash, v uint64) {
	n := s.n
	if !n.dp.IsValid() {
		return
	}
	x := wire.Header{Op: wire.OpVSB, KeyHash: h, Stamp: v, Node: n.id, Load: n.load(), Epoch: n.lay.Epoch()}
	s.send(n.dp, wire.AppendNodeOp(nil, &x, nil, nil, nil))
}

// reannounce re-sends each held copy's VSB, so that one refused while a
// write was pending is accepted once the data plane has seen it complete.
func (n *Node) reannounce() {
	defer n.wg.Done()
	if !n.dp.IsValid() {
		return
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
		n.extraMu.Lock()
		type hv struct {
			h wire.KeyHash
			v uint64
		}
		var all []hv
		now := time.Now()
		for h, c := range n.extras {
			if !c.dropped.IsZero() {
				if now.Sub(c.dropped) > tombstoneTTL {
					delete(n.extras, h)
				}
				continue
			}
			if len(all) < 4096 {
				all = append(all, hv{h, c.v.Ver})
			}
		}
		n.extraMu.Unlock()
		for _, x := range all {
			vsb := wire.Header{Op: wire.OpVSB, KeyHash: x.h, Stamp: x.v, Node: n.id, Load: n.load(), Epoch: n.lay.Epoch()}
			n.sendNow(n.dp, wire.AppendNodeOp(nil, &vsb, nil, nil, nil))
		}
	}
}

// Copies lists the extra copies this node holds: KeyHash → version.
func (n *Node) Copies() map[wire.KeyHash]uint64 {
	n.extraMu.RLock()
	defer n.extraMu.RUnlock()
	m := make(map[wire.KeyHash]uint64, len(n.extras))
	for h, c := range n.extras {
		if c.dropped.IsZero() {
			m[h] = c.v.Ver
		}
	}
	return m
}

// Promoted lists the promoted keys this node heads: KeyHash → extras.
func (n *Node) Promoted() map[wire.KeyHash][]wire.NodeID {
	n.promoMu.RLock()
	defer n.promoMu.RUnlock()
	m := make(map[wire.KeyHash][]wire.NodeID, len(n.promo))
	for h, ids := range n.promo {
		m[h] = slices.Clone(ids)
	}
	return m
}
