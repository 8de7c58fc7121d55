package storagenode

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/netdir/netdir/wire"
)

// copies is the hot-key role. At a head: the promoted keys, their extras,
// and those no data plane stamps. At an extra: the copies it holds, and
// the tombstones of dropped ones. Its methods only touch this state, under
// its lock; the shard's handlers send the copies and VSBs.
type copies struct {
	mu      sync.RWMutex
	promo   map[wire.KeyHash][]wire.NodeID // promoted keys at this head → extras
	noStamp map[wire.KeyHash]bool          // promoted keys no data plane stamps (promoteNoStamp)
	// inc is a promoted key's incarnation (wire.StampIncarnation): a
	// stamped write of an older one was stamped by a data plane that has
	// since lost its state (spec/README.md, flaw G). Absent: 0.
	inc    map[wire.KeyHash]uint16
	extras map[wire.KeyHash]*extraCopy
}

// extraCopy is a copy an extra holds, or the tombstone of a dropped one.
type extraCopy struct {
	key []byte
	v   version
	// dropped is when a demote dropped the copy (zero while it is held).
	// The entry stays as a tombstone keeping v.Ver, so that a copy older
	// than it, still in flight from an earlier promotion, is refused rather
	// than served (spec/README.md, flaw C); tombstones expire after
	// tombstoneTTL.
	dropped time.Time
}

// tombstoneTTL bounds how long a dropped copy's version is remembered: far
// longer than any packet stays in flight between two nodes of a rack.
const tombstoneTTL = time.Minute

// held reports whether c is a copy of key that can be served.
func (c *extraCopy) held(key []byte) bool {
	return c != nil && c.dropped.IsZero() && string(c.key) == string(key)
}

// load makes the maps and reads the promoted keys this node heads from
// its tree 0.
func (c *copies) load(t *tree) error {
	c.promo = make(map[wire.KeyHash][]wire.NodeID)
	c.noStamp = make(map[wire.KeyHash]bool)
	c.inc = make(map[wire.KeyHash]uint16)
	c.extras = make(map[wire.KeyHash]*extraCopy)
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindPromo}, UpperBound: []byte{kindPromo + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		h := wire.HashKey(it.Key()[1:])
		ids, noStamp, inc, err := parsePromo(it.Value())
		if err != nil {
			continue
		}
		c.promo[h] = ids
		if noStamp {
			c.noStamp[h] = true
		}
		if inc != 0 {
			c.inc[h] = inc
		}
	}
	return it.Error()
}

func (c *copies) promoted(h wire.KeyHash) ([]wire.NodeID, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ids, ok := c.promo[h]
	return ids, ok
}

// unstampedOK reports whether a promoted key's writes may be unstamped:
// no data plane stamps them (promoteNoStamp).
func (c *copies) unstampedOK(h wire.KeyHash) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.noStamp[h]
}

// holds reports whether h is promoted here with exactly this promotion:
// every field the promotion persists (promoKey's value) must be compared,
// the incarnation included, since a promotion that holds is not written
// again.
func (c *copies) holds(h wire.KeyHash, ids []wire.NodeID, noStamp bool, inc uint16) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	prev, ok := c.promo[h]
	return ok && slices.Equal(prev, ids) && c.noStamp[h] == noStamp && c.inc[h] == inc
}

// staleIncarnation reports whether a stamp of incarnation inc is older
// than h's promotion's: stamped by a data plane before it lost its state,
// and in flight across the controller's re-sync (spec/README.md, flaw G).
// A key not promoted here has no incarnation to compare with.
func (c *copies) staleIncarnation(h wire.KeyHash, inc uint16) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.promo[h]
	return ok && wire.IncarnationBefore(inc, c.inc[h])
}

// promote records h's extras and incarnation at this head and returns the
// previous extras.
func (c *copies) promote(h wire.KeyHash, ids []wire.NodeID, noStamp bool, inc uint16) []wire.NodeID {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.promo[h]
	c.promo[h] = ids
	if noStamp {
		c.noStamp[h] = true
	} else {
		delete(c.noStamp, h)
	}
	if inc != 0 {
		c.inc[h] = inc
	} else {
		delete(c.inc, h)
	}
	return old
}

// demote forgets h's promotion at this head and returns its extras.
func (c *copies) demote(h wire.KeyHash) []wire.NodeID {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.promo[h]
	delete(c.promo, h)
	delete(c.noStamp, h)
	delete(c.inc, h)
	return ids
}

// held returns the version of key's copy, if this extra holds it.
func (c *copies) held(h wire.KeyHash, key []byte) (version, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	x := c.extras[h]
	if !x.held(key) {
		return version{}, false
	}
	return x.v, true
}

// drop drops key's copy, keeping its version as a tombstone.
func (c *copies) drop(h wire.KeyHash, key []byte, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if x := c.extras[h]; x.held(key) {
		x.v.Val = nil
		x.dropped = now
	}
}

// store keeps a pushed version of key if it is newer than the copy held,
// or the copy was dropped and v is not older than its tombstone, and returns
// the version held then; false if v is from before a demote.
func (c *copies) store(h wire.KeyHash, key []byte, v version) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.extras[h]
	switch {
	case x == nil || string(x.key) != string(key):
		x = &extraCopy{key: slices.Clone(key), v: v}
		c.extras[h] = x
	case !x.dropped.IsZero() && v.Ver < x.v.Ver:
		return 0, false // from before the demote: the tombstone is newer
	case !x.dropped.IsZero() || v.Ver > x.v.Ver:
		x.v, x.dropped = v, time.Time{}
	}
	return x.v.Ver, true
}

// heldCopy is a copy's KeyHash and version, for its VSB.
type heldCopy struct {
	h wire.KeyHash
	v uint64
}

// sweep expires tombstones older than tombstoneTTL at now and returns up
// to max copies held.
func (c *copies) sweep(now time.Time, max int) []heldCopy {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []heldCopy
	for h, x := range c.extras {
		if !x.dropped.IsZero() {
			if now.Sub(x.dropped) > tombstoneTTL {
				delete(c.extras, h)
			}
			continue
		}
		if len(all) < max {
			all = append(all, heldCopy{h, x.v.Ver})
		}
	}
	return all
}

// versions lists the copies held: KeyHash → version.
func (c *copies) versions() map[wire.KeyHash]uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m := make(map[wire.KeyHash]uint64, len(c.extras))
	for h, x := range c.extras {
		if x.dropped.IsZero() {
			m[h] = x.v.Ver
		}
	}
	return m
}

// promotions lists the promoted keys: KeyHash → extras.
func (c *copies) promotions() map[wire.KeyHash][]wire.NodeID {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m := make(map[wire.KeyHash][]wire.NodeID, len(c.promo))
	for h, ids := range c.promo {
		m[h] = slices.Clone(ids)
	}
	return m
}

// counts returns the number of promoted keys and of copies held.
func (c *copies) counts() (promoted, held int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, x := range c.extras {
		if x.dropped.IsZero() {
			held++
		}
	}
	return len(c.promo), held
}

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
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpPromote, wire.CodeWrongNode, 0, nil))
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
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpPromote, wire.CodeMalformed, 0, nil))
		return
	}
	noStamp := p.Flags&wire.FlagPromoteNoStamp != 0
	// The incarnation the data planes stamp this key's writes in from now
	// on (wire.StampIncarnation): older stamps are refused (flaw G).
	inc := wire.StampIncarnation(p.Stamp)
	persisted := appendPromo(ids, noStamp, inc)
	rec, err := n.treeOf(part).getRecord(part, p.Key)
	// A promotion the head holds already, exactly as persisted, is on disk
	// as it is (a controller's re-sync after a switch restart asks every
	// head again): no synced write. Otherwise the write joins the shard's
	// group commit: the answer leaves after its sync (shard.flush), and a
	// re-sync's promotions, each a new incarnation, share fsyncs.
	if err == nil && !n.copies.holds(p.KeyHash, ids, noStamp, inc) {
		b := n.trees[0].db.NewBatch()
		b.Set(promoKey(p.Key), persisted, nil)
		err = s.commit.apply(n.trees[0].db, b)
	}
	if err != nil {
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpPromote, wire.CodeInternal, 0, nil))
		return
	}
	old := n.copies.promote(p.KeyHash, ids, noStamp, inc)
	// Extras dropped from the list drop their copy.
	for _, id := range old {
		if !slices.Contains(ids, id) {
			d := wire.Header{Op: wire.OpDemote, KeyHash: p.KeyHash, Node: n.id, Epoch: n.layout().Epoch()}
			s.send(n.peers[id], wire.AppendNodeOp(s.pkt(), &d, p.Key, nil, nil))
		}
	}
	s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpPromote, wire.CodeOK, rec.Latest().Ver, nil))
	if len(rec.Dirty) == 0 {
		for _, id := range ids {
			s.send(n.peers[id], n.copyPacket(s.pkt(), p.KeyHash, p.Key, &rec.Clean))
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
		n.copies.drop(p.KeyHash, p.Key, time.Now())
		if p.Node == 0 {
			s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpDemote, wire.CodeOK, 0, nil))
		}
		return
	}
	if p.Node != 0 {
		return // a node's push or a reply: only a controller (node 0) demotes at the head
	}
	if pos != 0 {
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpDemote, wire.CodeWrongNode, 0, nil))
		return
	}
	if err := n.trees[0].db.Delete(promoKey(p.Key), pebble.Sync); err != nil {
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpDemote, wire.CodeInternal, 0, nil))
		return
	}
	ids := n.copies.demote(p.KeyHash)
	for _, id := range ids {
		d := wire.Header{Op: wire.OpDemote, KeyHash: p.KeyHash, Node: n.id, Epoch: n.layout().Epoch()}
		s.send(n.peers[id], wire.AppendNodeOp(s.pkt(), &d, p.Key, nil, nil))
	}
	s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpDemote, wire.CodeOK, 0, nil))
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
	held, ok := n.copies.store(p.KeyHash, p.Key, v)
	if !ok {
		return
	}
	ack := wire.Header{Op: wire.OpCopyAck, KeyHash: p.KeyHash, Stamp: held, Node: n.id, Epoch: n.layout().Epoch()}
	s.send(from, wire.AppendNodeOp(s.pkt(), &ack, p.Key, nil, nil))
	s.vsb(p.KeyHash, held)
}

func (s *shard) vsb(h wire.KeyHash, v uint64) {
	n := s.n
	if !n.dp.IsValid() {
		return
	}
	x := wire.Header{Op: wire.OpVSB, KeyHash: h, Stamp: v, Node: n.id, Load: n.load(), Epoch: n.layout().Epoch()}
	s.send(n.dp, wire.AppendNodeOp(s.pkt(), &x, nil, nil, nil))
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
		for _, x := range n.copies.sweep(time.Now(), 4096) {
			vsb := wire.Header{Op: wire.OpVSB, KeyHash: x.h, Stamp: x.v, Node: n.id, Load: n.load(), Epoch: n.layout().Epoch()}
			n.sendNow(n.dp, wire.AppendNodeOp(nil, &vsb, nil, nil, nil))
		}
	}
}

// Copies lists the extra copies this node holds: KeyHash → version.
func (n *Node) Copies() map[wire.KeyHash]uint64 { return n.copies.versions() }

// Promoted lists the promoted keys this node heads: KeyHash → extras.
func (n *Node) Promoted() map[wire.KeyHash][]wire.NodeID { return n.copies.promotions() }
