package storagenode

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// Reconfiguration (CRAQ): the controller splices a failed member out of its
// chains, or a caught-up one back in as tail, with a new epoch (package
// layout), and every node takes the new layout with SetLayout. From then on
// the node refuses requests of another epoch (ERR stale-epoch, so senders
// refresh), and every write it holds uncommitted goes down the new chain:
// a head re-sends its pending writes to its new successor at once, a new
// head adopts the dirty versions it stored as a middle member and re-sends
// them, and a node left alone in a chain commits them itself. The new tail
// commits what it receives, replies to the requester and acks up the
// chain, so no acknowledged write is lost, and none is lost that a client
// still retries. A node keeps a partition in the tree of its slot in the
// placement (layout.Map.Slot), so no data moves between its trees.

// layout is the newest layout the node took.
func (n *Node) layout() *layout.Map { return n.lay.Load() }

// Layout is the newest layout the node took.
func (n *Node) Layout() *layout.Map { return n.layout() }

// treeOf is the tree that keeps partition part, nil if the node holds no
// slot in its placement.
func (n *Node) treeOf(part uint32) *tree {
	if j := n.layout().Slot(part, n.id); j >= 0 {
		return n.trees[j]
	}
	return nil
}

// SetLayout takes m if its epoch is newer than the node's, and re-sends the
// writes the node holds uncommitted down the new chains. It reports whether
// m was taken.
func (n *Node) SetLayout(m *layout.Map) bool {
	var cur *layout.Map
	var joined map[uint32]bool
	for {
		cur = n.layout()
		if m.Epoch() <= cur.Epoch() {
			return false
		}
		// In chains as their tail (back, or a spare): catch up with each
		// before serving its reads or answering its ver-queries. The
		// node's other chains are served throughout. They are marked
		// behind before the layout is taken, so that no one sees this
		// epoch without them (GossipStats).
		joined = joins(cur, m, n.id)
		n.recov.beginParts(joined)
		if n.lay.CompareAndSwap(cur, m) {
			break
		}
		n.recov.endParts(joined)
	}
	n.log.Info("layout", "epoch", m.Epoch(), "down", m.Down())
	// Only a chain that changed can have lost the member a write was
	// sent to, or made this node its head: a layout that changes no chain
	// (a spare's chains served once it caught up) re-sends nothing and
	// scans no tree.
	changed := map[uint32]bool{}
	for p := range m.Partitions() {
		if !slices.Equal(m.Chain(uint32(p)), cur.Chain(uint32(p))) {
			changed[uint32(p)] = true
		}
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if len(joined) > 0 {
			n.dropDirty(tailsOf(m, n.id, joined))
			n.recov.catchUpAsTail(joined)
		}
		if len(changed) > 0 {
			n.adoptDirty(changed)
		}
	}()
	return true
}

// joins are the partitions of m that node id must catch up with before it
// serves them, coming from layout cur: those whose chains it joins, and,
// if it missed a layout between cur and m (a restarted node starts from
// the layout it was given, which may be long gone; gossip may skip one
// while a fill moves epochs fast), every one it is in below the head that
// it joined after cur (layout.Map.Joined). In a missed layout it may have
// been spliced out of such a chain and added back as its tail, with the
// same chain in cur and m: the chain committed writes without it
// meanwhile, and a tail that took its membership as unbroken served reads
// older than an acknowledged write (spec/README.md, flaw I). A chain it
// has not joined since cur had it throughout, whatever other members came
// and went; catching up with it would refuse the reads its read set sends. A head needs no catch-up: a
// chain that lost its head takes a new one from among its members.
func joins(cur, m *layout.Map, id wire.NodeID) map[uint32]bool {
	missed := m.Epoch() > cur.Epoch()+1
	out := map[uint32]bool{}
	for p := range m.Partitions() {
		pos := m.Position(uint32(p), id)
		joined := pos >= 0 && cur.Position(uint32(p), id) < 0
		if joined || missed && pos > 0 && m.Joined(uint32(p), id) > cur.Epoch() {
			out[uint32(p)] = true
		}
	}
	return out
}

// tailsOf are the partitions of parts whose chain node id ends in m.
func tailsOf(m *layout.Map, id wire.NodeID, parts map[uint32]bool) map[uint32]bool {
	out := map[uint32]bool{}
	for p := range parts {
		if ch := m.Chain(p); len(ch) > 0 && ch[len(ch)-1] == id {
			out[p] = true
		}
	}
	return out
}

// adoptDirty hands every dirty version of the partitions in parts to its
// key's shard, which re-sends it down the key's current chain if this node
// heads it.
func (n *Node) adoptDirty(parts map[uint32]bool) {
	for _, s := range n.admit.shards {
		if !n.post(s, s.resendPending) {
			return
		}
	}
	for _, t := range n.trees {
		err := t.eachDirty(parts, func(key []byte, h wire.KeyHash, rec *record) {
			s := n.admit.shardOf(h)
			n.post(s, func() { s.adopt(key, h) })
		})
		if err != nil {
			n.log.Warn("adopt dirty versions", "err", err)
		}
	}
}

// dropDirty drops the dirty versions of the partitions a node rejoins as
// tail, which takes what it holds as committed: they are writes it took
// as head before it was spliced out, which either went down the chain
// (and its new head re-sends them) or were never acknowledged. A node
// that catches up below the head but above the tail keeps its dirty
// versions: one may be committed, its ack lost, and a member holding it
// dirty asks the tail rather than serve the clean version before it.
func (n *Node) dropDirty(parts map[uint32]bool) {
	var wg sync.WaitGroup
	for _, t := range n.trees {
		err := t.eachDirty(parts, func(key []byte, h wire.KeyHash, _ *record) {
			part := n.layout().Partition(h)
			s := n.admit.shardOf(h)
			wg.Add(1)
			if !n.post(s, func() {
				defer wg.Done()
				if rec, err := s.getRecord(t, part, key); err == nil && len(rec.Dirty) > 0 {
					rec.Dirty = nil
					s.putRecord(t, part, key, &rec, &s.commit)
				}
			}) {
				wg.Done()
			}
		})
		if err != nil {
			n.log.Warn("drop dirty versions", "err", err)
		}
	}
	wg.Wait()
}

// post runs fn on shard s; false once the node stops.
func (n *Node) post(s *shard, fn func()) bool {
	select {
	case s.ch <- item{fn: fn}:
		return true
	case <-n.stop:
		return false
	}
}

// resendPending makes every pending write due at once: the chain it was
// sent down may have lost the member that held it.
func (s *shard) resendPending() {
	for _, pw := range s.pending {
		pw.sent, pw.tries = time.Time{}, 0
	}
	s.housekeep()
}

// adopt takes over the dirty versions of key if this node now heads its
// chain: they become pending writes (their requests known to the dedup
// table, so a client's retry is not applied twice) and go down the chain;
// a head that is also the tail commits them.
func (s *shard) adopt(key []byte, h wire.KeyHash) {
	n := s.n
	part, ch, pos := n.where(h)
	if pos != 0 {
		return
	}
	t := n.treeOf(part)
	rec, err := s.getRecord(t, part, key)
	if err != nil || len(rec.Dirty) == 0 {
		return
	}
	for _, v := range append([]version{rec.Clean}, rec.Dirty...) {
		if v.ReqID != 0 {
			if _, ok := n.chain.dedup.get(v.ReqID, h); !ok {
				n.addDedup(v.ReqID, dedupEntry{KeyHash: h, Ver: v.Ver, Code: uint8(wire.CodeOK), Op: v.Op})
			}
		}
		for _, w := range v.Absorbed {
			if _, ok := n.chain.dedup.get(w.ReqID, h); !ok {
				n.addDedup(w.ReqID, dedupEntry{KeyHash: h, Ver: v.Ver, Code: uint8(wire.CodeOK), Op: uint8(w.Op)})
			}
		}
	}
	if len(ch) > 1 {
		for _, v := range rec.Dirty {
			if _, ok := s.pending[pendKey{h, v.Ver}]; !ok {
				s.launch(key, h, v, ch)
			}
		}
		return
	}
	// A copy: setClean drops from rec.Dirty in place.
	dirty := slices.Clone(rec.Dirty)
	for _, v := range dirty {
		rec.setClean(v)
		delete(s.pending, pendKey{h, v.Ver})
	}
	if err := s.putRecord(t, part, key, &rec, &s.commit); err != nil {
		return
	}
	for _, v := range dirty {
		s.replyCommitted(h, &v)
	}
	if extras, promoted := n.copies.promoted(h); promoted {
		s.announce(h, key, &rec.Clean, extras)
	}
}

// replyCommitted answers the requester of a committed version (a no-op
// version has none), flagged with the head's dmClock phase.
func (s *shard) replyCommitted(h wire.KeyHash, v *version) {
	if !v.Addr.IsValid() {
		return
	}
	op := wire.Op(v.Op)
	req := wire.Header{Op: op, Tenant: v.Tenant, ReqID: v.ReqID, KeyHash: h, Timestamp: v.TS}
	if v.Reservation {
		req.Flags = wire.FlagReservation
	}
	s.send(v.Addr, s.n.appendReply(s.pkt(), &req, op.Reply(), wire.CodeOK, v.Ver, nil))
}

// eachDirty calls fn for every record in t with dirty versions, of the
// partitions in parts (every partition if parts is nil); key is fn's own.
func (t *tree) eachDirty(parts map[uint32]bool, fn func(key []byte, h wire.KeyHash, rec *record)) error {
	if parts == nil {
		return t.eachDirtyIn([]byte{kindRecord}, []byte{kindRecord + 1}, fn)
	}
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		lo, hi := partitionBounds(p)
		if err := t.eachDirtyIn(lo, hi, fn); err != nil {
			return err
		}
	}
	return nil
}

// eachDirtyIn is eachDirty over the record keys in [lo, hi).
func (t *tree) eachDirtyIn(lo, hi []byte, fn func(key []byte, h wire.KeyHash, rec *record)) error {
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) < 5 {
			continue
		}
		rec, err := decodeRecord(append([]byte(nil), it.Value()...))
		if err != nil || len(rec.Dirty) == 0 {
			continue
		}
		key := append([]byte(nil), k[5:]...)
		fn(key, wire.HashKey(key), &rec)
	}
	return it.Error()
}
