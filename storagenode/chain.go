package storagenode

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/netdir/netdir/wire"
)

// chain is the node-wide part of the chain role (CRAQ replication): the
// head's dedup table and the ids of version queries. Per key, its state is
// in the key's shard (chainShard).
type chain struct {
	dedup    dedupTable
	queryIDs atomic.Uint64
}

// chainShard is the chain role's state for one shard's keys, owned by the
// shard's worker (no lock): the writes this head forwarded and retransmits
// until the tail acks them, the resend timeouts of its chain links, and
// the reads of dirty keys waiting for the tail's version answer.
type chainShard struct {
	pending map[pendKey]*pendingWrite
	rto     map[wire.NodeID]*rtoEstimator // by successor
	waits   map[wire.KeyHash]*verWait
	noops   map[wire.KeyHash]*noopSlot // keys with a no-op version in flight
	npend   atomic.Int64               // len(pending), for Stats
	rtoSnap atomic.Pointer[[]LinkRTO]  // rto as of the last tick, for Stats
}

func newChainShard() chainShard {
	return chainShard{pending: make(map[pendKey]*pendingWrite), rto: make(map[wire.NodeID]*rtoEstimator),
		waits: make(map[wire.KeyHash]*verWait), noops: make(map[wire.KeyHash]*noopSlot)}
}

// noopSlot is a key's no-op version in flight at the head (flaw F) and the
// stamp owed by the stamped duplicates that arrived while it was: one no-op
// at the highest owed stamp, made once the one in flight is acked, covers
// them all, since the data plane's ver_done takes the highest stamp it is
// told of. Without the slot a storm of resends made one synced no-op
// version each, every one held dirty with the key's value in the record
// that each of them rewrote.
type noopSlot struct {
	key      []byte
	inFlight uint64 // the no-op's version
	owed     uint64 // highest stamp owed (incarnation and version), 0: none
	tenant   uint16
}

// owe records a stamped duplicate's stamp: a newer incarnation's replaces
// an older one's (only the newest incarnation's slot can be completed),
// and within one incarnation the higher version is kept.
func (sl *noopSlot) owe(stamp uint64, tenant uint16) {
	if sl.owed != 0 {
		oi, si := wire.StampIncarnation(sl.owed), wire.StampIncarnation(stamp)
		if wire.IncarnationBefore(si, oi) || (si == oi && wire.StampVersion(stamp) <= wire.StampVersion(sl.owed)) {
			return
		}
	}
	sl.owed, sl.tenant = stamp, tenant
}

type pendKey struct {
	h wire.KeyHash
	v uint64
}

// pendingWrite is a write the head forwarded and the tail has not acked,
// and the absorbed writes of its group that the head answers at the ack.
type pendingWrite struct {
	key     []byte
	h       wire.KeyHash // key's
	v       version
	to      wire.NodeID // the successor it was last sent to
	sent    time.Time   // zero: never sent (loaded after a restart, or made due)
	tries   int         // retransmissions so far: the wait doubles, up to 16×
	replies []groupReply
}

type getWaiter struct {
	from netip.AddrPort
	h    wire.Header
	at   time.Time
}

// verWait is the read of a dirty key waiting for the tail: waiters covered
// by the query in flight, and those that arrived after it was sent (which
// need a new query, since the answer may predate their invocation). At an
// extra (verified reads, issue 18) it is the read of a copy that the data
// plane could not vouch for, and asked is the copy the query named: the
// tail leaves the value out when asked is the committed version.
type verWait struct {
	key     []byte
	qid     uint64
	sent    time.Time
	covered []getWaiter
	next    []getWaiter
	extra   bool
	asked   version // at an extra: the copy named by the query (Ver 0: none)
}

// loadPending rebuilds the uncommitted writes held in the trees, so that
// they are retransmitted after a restart (housekeep keeps those of the
// partitions this node heads).
func loadPending(trees []*tree, shardOf func(wire.KeyHash) *shard) error {
	for _, t := range trees {
		err := t.eachDirty(nil, func(key []byte, h wire.KeyHash, rec *record) {
			s := shardOf(h)
			for _, v := range rec.Dirty {
				s.pending[pendKey{h, v.Ver}] = &pendingWrite{key: key, h: h, v: v}
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// dedupTable is the head's bounded memory of write requests by request id.
// Accepted writes are persisted in the same batch as the write; refusals
// (stale-version, retry) are kept in memory only, since nothing was applied.
type dedupTable struct {
	mu   sync.Mutex
	m    map[uint64]dedupEntry
	fifo []uint64
	seq  uint64
	cap  int
}

// load reads the entries persisted in every tree (the head's and, since
// members below it remember the versions they take, every position's),
// keeps the newest capacity of them and deletes the older ones.
func (d *dedupTable) load(trees []*tree, capacity int) error {
	d.m, d.cap = make(map[uint64]dedupEntry), capacity
	var all []dedupEvicted
	ents := map[dedupEvicted]dedupEntry{}
	for j, t := range trees {
		it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindDedup}, UpperBound: []byte{kindDedup + 1}})
		if err != nil {
			return err
		}
		for it.First(); it.Valid(); it.Next() {
			k := it.Key()
			if len(k) != 9 {
				continue
			}
			e, err := decodeDedup(it.Value())
			if err != nil {
				continue
			}
			e.inTree = uint8(j + 1)
			x := dedupEvicted{binary.BigEndian.Uint64(k[1:]), e.inTree}
			all = append(all, x)
			ents[x] = e
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	slices.SortFunc(all, func(a, b dedupEvicted) int { return cmp.Compare(ents[a].Seq, ents[b].Seq) })
	var old []dedupEvicted
	for _, x := range all {
		e := ents[x]
		if prev, ok := d.m[x.id]; ok {
			old = append(old, dedupEvicted{x.id, prev.inTree})
		} else {
			d.fifo = append(d.fifo, x.id)
		}
		d.m[x.id] = e
		d.seq = max(d.seq, e.Seq)
	}
	old = append(old, d.trim()...)
	return forgetDedup(trees, old)
}

// dedupEvicted names a persisted entry to delete: its request id and tree.
type dedupEvicted struct {
	id     uint64
	inTree uint8
}

// forgetDedup deletes evicted entries from the trees that persist them.
func forgetDedup(trees []*tree, evicted []dedupEvicted) error {
	for j, t := range trees {
		var b *pebble.Batch
		for _, x := range evicted {
			if int(x.inTree) == j+1 {
				if b == nil {
					b = t.db.NewBatch()
				}
				b.Delete(dedupKey(x.id), nil)
			}
		}
		if b != nil {
			err := b.Commit(pebble.NoSync)
			b.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *dedupTable) get(id uint64, h wire.KeyHash) (dedupEntry, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.m[id]
	if !ok || e.KeyHash != h {
		return dedupEntry{}, false
	}
	return e, true
}

// reserve is the sequence number of an entry persisted before it is added.
func (d *dedupTable) reserve() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	return d.seq
}

// add records id (under e.Seq, or the next sequence number if it is 0) and
// returns the persisted entries it replaced or evicted to stay within the
// bound, which the caller deletes (forgetDedup).
func (d *dedupTable) add(id uint64, e dedupEntry) (dedupEntry, []dedupEvicted) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.Seq == 0 {
		d.seq++
		e.Seq = d.seq
	}
	d.seq = max(d.seq, e.Seq)
	var evict []dedupEvicted
	if prev, ok := d.m[id]; !ok {
		d.fifo = append(d.fifo, id)
	} else if prev.inTree != 0 && prev.inTree != e.inTree {
		evict = append(evict, dedupEvicted{id, prev.inTree})
	}
	d.m[id] = e
	return e, append(evict, d.trim()...)
}

// trim evicts the oldest entries beyond the bound (d.mu held) and returns
// the persisted ones.
func (d *dedupTable) trim() []dedupEvicted {
	var evict []dedupEvicted
	for len(d.fifo) > d.cap {
		old := d.fifo[0]
		d.fifo = d.fifo[1:]
		if e := d.m[old]; e.inTree != 0 {
			evict = append(evict, dedupEvicted{old, e.inTree})
		}
		delete(d.m, old)
	}
	return evict
}

// handle processes one packet on the key's shard.
func (s *shard) handle(b []byte, from netip.AddrPort) {
	n := s.n
	var p wire.NodePacket
	if err := p.Decode(b); err != nil {
		switch wire.Frame(b).Op() {
		case wire.OpGet, wire.OpPut, wire.OpDel:
			n.ctr.errs.Add(1)
			s.send(from, n.errPacket(b, wire.CodeMalformed, 0))
		}
		return
	}
	switch p.Op {
	case wire.OpGet, wire.OpPut, wire.OpDel:
		if !s.checkClient(&p, from) {
			return
		}
		if p.Op == wire.OpGet {
			s.get(&p, from)
		} else {
			s.write([]groupWrite{{p, from}})
		}
		return
	}
	// Node ops: a wrong epoch or a key that does not hash right is dropped.
	if p.Epoch != 0 && p.Epoch != n.layout().Epoch() {
		n.heardEpoch(p.Epoch)
		if p.Op == wire.OpPromote || p.Op == wire.OpDemote {
			s.send(from, n.appendReply(s.pkt(), &p.Header, p.Op, wire.CodeStaleEpoch, 0, nil))
		}
		return
	}
	if len(p.Key) > wire.MaxKey || wire.HashKey(p.Key) != p.KeyHash {
		if p.Op == wire.OpPromote || p.Op == wire.OpDemote {
			s.send(from, n.appendReply(s.pkt(), &p.Header, p.Op, wire.CodeHashMismatch, 0, nil))
		}
		return
	}
	switch p.Op {
	case wire.OpChainWrite:
		s.chainWrite(&p)
	case wire.OpChainAck:
		s.chainAck(&p)
	case wire.OpVerQuery:
		s.verQuery(&p, from)
	case wire.OpVerAnswer:
		s.verAnswer(&p)
	case wire.OpCopy:
		s.copyIn(&p, from)
	case wire.OpCopyAck:
	case wire.OpPromote:
		s.promote(&p, from)
	case wire.OpDemote:
		s.demote(&p, from)
	}
}

// handleGroup handles a write group that admission formed (it and the
// writes of its key that joined it): each write is checked as handle
// checks a client request, and those that pass are applied together.
func (s *shard) handleGroup(it item) {
	ws := make([]groupWrite, 0, 1+len(it.group))
	for _, x := range append([]item{it}, it.group...) {
		var p wire.NodePacket
		if err := p.Decode(x.b); err != nil {
			s.n.ctr.errs.Add(1)
			s.send(x.from, s.n.errPacket(x.b, wire.CodeMalformed, 0))
			continue
		}
		if s.checkClient(&p, x.from) {
			ws = append(ws, groupWrite{p, x.from})
		}
	}
	if len(ws) > 0 {
		s.write(ws)
	}
}

// checkClient checks a client request and counts it; a rejected one is
// answered with its code.
func (s *shard) checkClient(p *wire.NodePacket, from netip.AddrPort) bool {
	n := s.n
	if code := n.checkClient(p); code != wire.CodeOK {
		n.ctr.errs.Add(1)
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, code, 0, nil))
		return false
	}
	n.ctr.countKey(p.Key)
	switch p.Op {
	case wire.OpGet:
		n.ctr.gets.Add(1)
	case wire.OpPut:
		n.ctr.puts.Add(1)
	default:
		n.ctr.dels.Add(1)
	}
	return true
}

// checkClient validates a client request; every rejection has its code.
func (n *Node) checkClient(p *wire.NodePacket) wire.Code {
	if c := n.checkShape(p); c != wire.CodeOK {
		return c
	}
	if wire.HashKey(p.Key) != p.KeyHash {
		return wire.CodeHashMismatch
	}
	return wire.CodeOK
}

// checkShape is checkClient without the KeyHash check (SHAKE128 of the
// key), for fastGet, which checks the hash only where the answer depends on it.
func (n *Node) checkShape(p *wire.NodePacket) wire.Code {
	switch {
	case len(p.Ext) != 0:
		return wire.CodeMalformed
	case len(p.Key) > wire.MaxKey:
		return wire.CodeKeyTooLarge
	case len(p.Value) > wire.MaxValue:
		return wire.CodeValTooLarge
	case p.Epoch != 0 && p.Epoch != n.layout().Epoch():
		return wire.CodeStaleEpoch
	}
	return wire.CodeOK
}

// where returns the key's partition, chain and this node's position in it.
func (n *Node) where(h wire.KeyHash) (uint32, []wire.NodeID, int) {
	part := n.layout().Partition(h)
	ch := n.layout().Chain(part)
	return part, ch, slices.Index(ch, n.id)
}

func readCode(v *version) wire.Code {
	if v.Ver == 0 || v.Del {
		return wire.CodeNotFound
	}
	return wire.CodeOK
}

// get serves a read: from the record if it is clean, from the tail's answer
// if it is dirty, or from an extra copy for a key outside this node's chains.
func (s *shard) get(p *wire.NodePacket, from netip.AddrPort) {
	n := s.n
	part, ch, pos := n.where(p.KeyHash)
	if pos < 0 {
		v, ok := n.copies.held(p.KeyHash, p.Key)
		if p.Flags&wire.FlagVerify != 0 {
			s.verifyAtExtra(p, from, ch, v)
			return
		}
		if !ok {
			n.ctr.errs.Add(1)
			s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.CodeWrongNode, 0, nil))
			return
		}
		n.ctr.extraGets.Add(1)
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpGetReply, readCode(&v), v.Ver, v.Val))
		return
	}
	if !n.serves(part) {
		if n.layoutBehindPeer() {
			n.ctr.staleLayoutGets.Add(1)
		} else {
			n.ctr.unavailableGets.Add(1)
		}
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.CodeUnavailable, 0, nil))
		return
	}
	// Read in place, as fastGet does: send copies the reply before closer
	// lets Pebble's memory go.
	rec, closer, err := n.treeOf(part).viewRecord(part, p.Key, s.kb[:0])
	if err != nil {
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.CodeInternal, 0, nil))
		return
	}
	if closer != nil {
		defer closer.Close()
	}
	if len(rec.Dirty) == 0 || pos == len(ch)-1 {
		v := rec.Latest()
		if pos != len(ch)-1 {
			v = &rec.Clean
		}
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpGetReply, readCode(v), v.Ver, v.Val))
		return
	}
	// Dirty: ask the tail which version is committed.
	s.askTail(p, from, ch, version{Ver: rec.Latest().Ver}, false)
}

// verifyAtExtra serves a read flagged wire.FlagVerify at an extra (copy: its
// copy, Ver 0 if it holds none): the data plane could not vouch for the
// copy, so the tail's committed version answers, as for a dirty chain
// member. The copy is never newer than committed (extras receive only
// committed versions), and the query leaves after the read passed the data
// plane, so the answer is linearizable.
func (s *shard) verifyAtExtra(p *wire.NodePacket, from netip.AddrPort, ch []wire.NodeID, copy version) {
	if len(ch) == 0 {
		s.n.ctr.errs.Add(1)
		s.send(from, s.n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.CodeUnavailable, 0, nil))
		return
	}
	copy.Val = slices.Clone(copy.Val)
	s.askTail(p, from, ch, copy, true)
}

// askTail makes p's read wait for the tail's version answer: it joins the
// query in flight for the key, or sends one naming asked.
func (s *shard) askTail(p *wire.NodePacket, from netip.AddrPort, ch []wire.NodeID, asked version, extra bool) {
	gw := getWaiter{from: from, h: p.Header, at: s.n.opts.clock.Now()}
	if w := s.waits[p.KeyHash]; w != nil {
		w.next = append(w.next, gw)
		return
	}
	w := &verWait{key: slices.Clone(p.Key), covered: []getWaiter{gw}, extra: extra, asked: asked}
	s.waits[p.KeyHash] = w
	s.query(w, p.KeyHash, ch[len(ch)-1])
}

// query asks the tail which version of w's key is committed, naming the
// version w.asked; an extra's query carries wire.FlagVerify, which lets
// the tail leave out a value the extra holds.
func (s *shard) query(w *verWait, h wire.KeyHash, tail wire.NodeID) {
	n := s.n
	w.qid = n.chain.queryIDs.Add(1)
	w.sent = s.n.opts.clock.Now()
	n.ctr.verQueries.Add(1)
	q := wire.Header{Op: wire.OpVerQuery, ReqID: w.qid, KeyHash: h, Stamp: w.asked.Ver, Node: n.id, Epoch: n.layout().Epoch()}
	if w.extra {
		q.Flags = wire.FlagVerify
	}
	s.send(n.peers[tail], wire.AppendNodeOp(s.pkt(), &q, w.key, nil, nil))
}

// verQuery: the tail answers with its committed version and value, without
// the value when an extra's query names the committed version.
func (s *shard) verQuery(p *wire.NodePacket, from netip.AddrPort) {
	n := s.n
	part, ch, pos := n.where(p.KeyHash)
	if pos != len(ch)-1 || !n.serves(part) {
		return // a tail still catching up may not know the committed version
	}
	rec, err := n.treeOf(part).getRecord(part, p.Key)
	if err != nil {
		return
	}
	v := rec.Latest()
	a := wire.Header{Op: wire.OpVerAnswer, Code: readCode(v), ReqID: p.ReqID, KeyHash: p.KeyHash, Stamp: v.Ver, Node: n.id, Load: n.load(), Epoch: n.layout().Epoch()}
	val := v.Val
	if p.Flags&wire.FlagVerify != 0 && p.Stamp == v.Ver { // an extra's query naming its copy
		val = nil
		n.ctr.verAnswersSame.Add(1)
	} else {
		n.ctr.verAnswersValue.Add(1)
	}
	s.send(from, wire.AppendNodeOp(s.pkt(), &a, p.Key, val, nil))
}

func (s *shard) verAnswer(p *wire.NodePacket) {
	n := s.n
	w := s.waits[p.KeyHash]
	if w == nil || w.qid != p.ReqID {
		return
	}
	if w.extra {
		s.extraAnswer(w, p)
		return
	}
	for _, g := range w.covered {
		s.send(g.from, n.appendReply(s.pkt(), &g.h, wire.OpGetReply, p.Code, p.Stamp, p.Value))
	}
	// The tail committed p.Stamp: it is clean here too.
	part, ch, pos := n.where(p.KeyHash)
	if pos >= 0 && p.Stamp > 0 {
		t := n.treeOf(part)
		if rec, err := s.getRecord(t, part, p.Key); err == nil {
			cv := version{Ver: p.Stamp, Del: p.Code == wire.CodeNotFound, Val: slices.Clone(p.Value)}
			if d := rec.find(p.Stamp); d != nil {
				cv = *d
			}
			if rec.setClean(cv) {
				s.putRecord(t, part, p.Key, &rec, nil)
			}
			if len(rec.Dirty) == 0 {
				// Nothing dirty any more: later waiters read the record.
				for _, g := range w.next {
					v := &rec.Clean
					s.send(g.from, n.appendReply(s.pkt(), &g.h, wire.OpGetReply, readCode(v), v.Ver, v.Val))
				}
				w.next = nil
			}
		}
	}
	if len(w.next) == 0 {
		delete(s.waits, p.KeyHash)
		return
	}
	w.covered, w.next = w.next, nil
	w.asked = version{Ver: p.Stamp}
	s.query(w, p.KeyHash, ch[len(ch)-1])
}

// extraAnswer answers an extra's verified reads with the tail's committed
// version: the copy the query named if the tail left the value out, else
// the tail's. Reads that arrived after the query ask again, naming it.
func (s *shard) extraAnswer(w *verWait, p *wire.NodePacket) {
	n := s.n
	v := version{Ver: p.Stamp, Del: p.Code == wire.CodeNotFound, Val: p.Value}
	if p.Stamp == w.asked.Ver { // the tail left the value out
		v = w.asked
		n.ctr.verifiedOwnCopy.Add(1)
	}
	for _, g := range w.covered {
		n.ctr.verifiedGets.Add(1)
		s.send(g.from, n.appendReply(s.pkt(), &g.h, wire.OpGetReply, readCode(&v), v.Ver, v.Val))
	}
	_, ch, _ := n.where(p.KeyHash)
	if len(w.next) == 0 || len(ch) == 0 {
		delete(s.waits, p.KeyHash)
		return
	}
	v.Val = slices.Clone(v.Val)
	w.covered, w.next, w.asked = w.next, nil, v
	s.query(w, p.KeyHash, ch[len(ch)-1])
}

// maxDirtyPerKey bounds the uncommitted versions of one key at its head,
// beyond which a write is refused as unavailable. A record holds its dirty
// versions with their values and every write of the key rewrites it whole,
// so without a bound a hot key whose commits lag (acks refused by a full
// shard queue, a slow successor) made each write cost more: at N=16 its
// head's record grew past 500 KB (1 KB values), every write of it filled
// a memtable, and the tree sat in Pebble's memtable write stall for
// minutes after the clients stopped (BENCHMARKS.md, the write stall).
// About 70 writes/s of the hottest key committing in ~150 ms keep ~10
// dirty.
const maxDirtyPerKey = 32

// groupWrite is a client write at the head: alone, or one of a write group
// that admission formed (admitWrite).
type groupWrite struct {
	p    wire.NodePacket
	from netip.AddrPort
}

// groupReply is an absorbed write of a version in flight (its request
// header and address): the head answers it when the tail's ack for the
// version reaches it.
type groupReply struct {
	h    wire.Header
	from netip.AddrPort
}

// replyTo makes the head's reply to an absorbed write of pw go to its
// retry (h, from): replacing the write's entry, or adding one (after a
// restart pw knows no addresses).
func (pw *pendingWrite) replyTo(h wire.Header, from netip.AddrPort) {
	for i := range pw.replies {
		if pw.replies[i].h.ReqID == h.ReqID {
			pw.replies[i] = groupReply{h, from}
			return
		}
	}
	pw.replies = append(pw.replies, groupReply{h, from})
}

// headGroup is a write group being taken at the head: the key's record
// (loaded for the first write that needs it), the latest version including
// those the group's accepted writes took, the accepted writes with their
// versions, and the stamped duplicates whose no-ops wait for the group's
// version (noop skips the stamps it covers).
type headGroup struct {
	part     uint32
	ch       []wire.NodeID
	t        *tree
	rec      record
	loaded   bool
	latest   uint64
	accepted []acceptedWrite
	dupNoops []*wire.NodePacket
}

type acceptedWrite struct {
	w   *groupWrite
	ver uint64
}

// write applies a write group at the head of its key's chain (a lone write
// is a group of one). Its writes are taken in arrival order by the head's
// rules (take), each refused one answered at once; the accepted ones make
// one version, the last one's (apply). The earlier ones are linearized just
// before it: all were invoked before it is applied, none is acknowledged
// before it commits.
func (s *shard) write(ws []groupWrite) {
	n := s.n
	part, ch, pos := n.where(ws[0].p.KeyHash)
	if pos != 0 {
		for i := range ws {
			s.send(ws[i].from, n.appendReply(s.pkt(), &ws[i].p.Header, wire.OpErr, wire.CodeWrongNode, 0, nil))
		}
		return
	}
	g := headGroup{part: part, ch: ch, t: n.treeOf(part)}
	for i := range ws {
		s.take(&g, &ws[i])
	}
	s.apply(&g)
	for _, p := range g.dupNoops {
		s.noop(p.Key, p.KeyHash, p.Stamp, p.Tenant, part, ch)
	}
}

// take decides one write of g by the head's rules: a known request id is
// answered as before (duplicate); a write refused (unavailable, dirty cap,
// stale incarnation or version, unstamped write of a promoted key) is
// answered at once; an accepted one takes its version, its stamp or the
// latest + 1, which is the latest for the writes after it.
func (s *shard) take(g *headGroup, w *groupWrite) {
	n := s.n
	p, from := &w.p, w.from
	if i := slices.IndexFunc(g.accepted, func(a acceptedWrite) bool { return a.w.p.ReqID == p.ReqID }); i >= 0 {
		// A retry of a write accepted in this group: its reply goes to
		// the retry, at the version the write took.
		n.ctr.dupWrites.Add(1)
		g.accepted[i].w = w
		if p.Flags&wire.FlagStamped != 0 {
			g.dupNoops = append(g.dupNoops, p)
		}
		return
	}
	if e, ok := n.chain.dedup.get(p.ReqID, p.KeyHash); ok {
		s.duplicate(p, from, e, g.part, g.ch)
		if p.Flags&wire.FlagStamped != 0 {
			g.dupNoops = append(g.dupNoops, p)
		}
		return
	}
	if !n.serves(g.part) || len(s.pending) >= max(1, n.opts.MaxPending/len(n.admit.shards)) {
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.CodeUnavailable, 0, nil))
		return
	}
	if !g.loaded {
		rec, err := s.getRecord(g.t, g.part, p.Key)
		if err != nil {
			s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.CodeInternal, 0, nil))
			return
		}
		g.rec, g.loaded, g.latest = rec, true, rec.Latest().Ver
	}
	if len(g.rec.Dirty) >= maxDirtyPerKey {
		// Refused like a write beyond the pending limit: nothing applied,
		// the client retries (a stamped retry gets a new stamp).
		n.ctr.dirtyKeyFull.Add(1)
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.CodeUnavailable, 0, nil))
		return
	}
	latest := g.latest
	var v uint64
	if p.Flags&wire.FlagStamped != 0 {
		// Stamped by a data plane that has since lost its state: the
		// slot was re-seeded from this head's latest version without it,
		// so committing it above that seed would let an extra's older
		// copy pass for the newest (spec/README.md, flaw G). Refused as
		// stale: the client's retry is stamped in the new incarnation.
		if n.copies.staleIncarnation(p.KeyHash, wire.StampIncarnation(p.Stamp)) {
			n.ctr.staleIncarnation.Add(1)
			n.addDedup(p.ReqID, dedupEntry{KeyHash: p.KeyHash, Ver: latest, Code: uint8(wire.CodeStaleVersion), Op: uint8(p.Op)})
			s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.CodeStaleVersion, latest, nil))
			return
		}
		stamp := wire.StampVersion(p.Stamp)
		if stamp <= latest {
			n.addDedup(p.ReqID, dedupEntry{KeyHash: p.KeyHash, Ver: latest, Code: uint8(wire.CodeStaleVersion), Op: uint8(p.Op)})
			s.send(from, n.replyPacket(&p.Header, wire.OpErr, wire.CodeStaleVersion, latest, nil))
			return
		}
		v = stamp
	} else {
		if _, promoted := n.copies.promoted(p.KeyHash); promoted && !n.copies.unstampedOK(p.KeyHash) {
			n.addDedup(p.ReqID, dedupEntry{KeyHash: p.KeyHash, Ver: latest, Code: uint8(wire.CodeRetry), Op: uint8(p.Op)})
			s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.CodeRetry, latest, nil))
			return
		}
		v = latest + 1
	}
	g.accepted = append(g.accepted, acceptedWrite{w, v})
	g.latest = v
}

// apply makes g's accepted writes one version: the last one's number and
// value, stored with every accepted write's dedup entry in one synced
// write, and sent down the chain once, naming the absorbed writes (the
// members below remember them). The tail answers the last write; the head
// answers the others when the tail's ack reaches it (chainAck); a chain
// of one answers all at once.
func (s *shard) apply(g *headGroup) {
	if len(g.accepted) == 0 {
		return
	}
	n := s.n
	last := g.accepted[len(g.accepted)-1]
	p := &last.w.p
	nv := version{Ver: last.ver, Del: p.Op == wire.OpDel, ReqID: p.ReqID, TS: p.Timestamp, Tenant: p.Tenant, Op: uint8(p.Op), Addr: last.w.from,
		Reservation: p.Flags&wire.FlagReservation != 0}
	if !nv.Del {
		nv.Val = slices.Clone(p.Value)
	}
	absorbed := g.accepted[:len(g.accepted)-1]
	for _, a := range absorbed {
		nv.Absorbed = append(nv.Absorbed, wire.AbsorbedWrite{ReqID: a.w.p.ReqID, Op: a.w.p.Op})
	}
	alone := len(g.ch) == 1
	g.rec.place(nv, alone)
	entries := make([]dedupEntry, len(g.accepted))
	b := g.t.db.NewBatch()
	for i, a := range g.accepted {
		entries[i] = dedupEntry{Seq: n.chain.dedup.reserve(), KeyHash: p.KeyHash, Ver: nv.Ver, Code: uint8(wire.CodeOK), Op: uint8(a.w.p.Op)}
		b.Set(dedupKey(a.w.p.ReqID), entries[i].encode(), nil)
	}
	if err := s.commitRecord(g.t, g.part, p.Key, &g.rec, b); err != nil {
		for _, a := range g.accepted {
			s.send(a.w.from, n.appendReply(s.pkt(), &a.w.p.Header, wire.OpErr, wire.CodeInternal, 0, nil))
		}
		return
	}
	for i, a := range g.accepted {
		s.addDedup(g.t, a.w.p.ReqID, entries[i])
	}
	if len(absorbed) > 0 {
		n.ctr.writeGroups.Add(1)
		n.ctr.groupedWrites.Add(uint64(len(absorbed)))
	}
	if alone {
		for _, a := range g.accepted {
			s.send(a.w.from, n.appendReply(s.pkt(), &a.w.p.Header, a.w.p.Op.Reply(), wire.CodeOK, nv.Ver, nil))
		}
		if extras, promoted := n.copies.promoted(p.KeyHash); promoted {
			s.announce(p.KeyHash, p.Key, &g.rec.Clean, extras)
		}
		return
	}
	pw := s.launch(p.Key, p.KeyHash, nv, g.ch)
	for _, a := range absorbed {
		pw.replies = append(pw.replies, groupReply{a.w.p.Header, a.w.from})
	}
}

// duplicate answers a write whose request id the head's dedup table knows
// (e): with its refusal again; if its version is in flight, by sending the
// version down again with the tail's reply going to the retry, or for an
// absorbed write by making the head's reply at the ack go to the retry
// (the tail's reply stays the last writer's); else with its version once
// committed.
func (s *shard) duplicate(p *wire.NodePacket, from netip.AddrPort, e dedupEntry, part uint32, ch []wire.NodeID) {
	n := s.n
	n.ctr.dupWrites.Add(1)
	switch pw := s.pending[pendKey{p.KeyHash, e.Ver}]; {
	case wire.Code(e.Code) != wire.CodeOK:
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.OpErr, wire.Code(e.Code), e.Ver, nil))
	case pw != nil && pw.v.ReqID != p.ReqID:
		pw.replyTo(p.Header, from)
	case pw != nil:
		// Still in flight: send it down again, replying to the retry.
		pw.v.Addr, pw.v.TS = from, p.Timestamp
		pw.v.Reservation = p.Flags&wire.FlagReservation != 0
		s.forward(pw, ch)
	case s.dirtyAt(part, p.Key, e.Ver):
		// A version this node took below the head and has not
		// adopted yet (a layout change made it the head): not
		// committed, so not acknowledged; the client retries.
		s.send(from, n.replyPacket(&p.Header, wire.OpErr, wire.CodeUnavailable, 0, nil))
	default:
		s.send(from, n.appendReply(s.pkt(), &p.Header, wire.Op(e.Op).Reply(), wire.CodeOK, e.Ver, nil))
	}
}

// noop makes the stamp of a stamped duplicate a version of its own. The data
// plane stamped the resend (ver_next += 1) like any write that hits the
// directory, and the write it repeats keeps its first version, so no write
// of that stamp exists. Left so, nothing would complete it at the data plane
// until the key's next write: ver_next stays above ver_done, every extra's
// VSB is refused as vsb-pending, and a hot key's extras serve no reads. So
// when the stamp is above the key's latest version, the head makes it a
// no-op version: the latest value (or tombstone) again, under the stamp. It
// goes down the chain like any write, but with no requester (no address, no
// request id), so the tail sends no reply; for a promoted key the tail
// announces its commit by VSB, which completes the stamp at the data plane,
// and the extras get the copy as for any commit. It has no dedup entry: the
// request's entry keeps the write's own version, which its answers carry.
// A no-op version changes no value, so reads stay linearizable; in the
// record it is an ordinary version (retransmitted until acked, synced,
// recovered). A stamp at or below the latest version is covered already.
// At most one no-op version of a key is in flight: a stamp that arrives
// while one is owes a no-op (noopSlot), made when the one in flight is
// acked (settleNoop). (spec/README.md, flaw F.)
func (s *shard) noop(key []byte, h wire.KeyHash, stamp uint64, tenant uint16, part uint32, ch []wire.NodeID) {
	n := s.n
	if sl := s.noops[h]; sl != nil && s.pending[pendKey{h, sl.inFlight}] != nil {
		sl.owe(stamp, tenant)
		n.ctr.noopsOwed.Add(1)
		return
	}
	delete(s.noops, h)
	if !n.serves(part) || len(s.pending) >= max(1, n.opts.MaxPending/len(n.admit.shards)) {
		return // the key's next write completes past the stamp
	}
	t := n.treeOf(part)
	rec, err := s.getRecord(t, part, key)
	if err != nil {
		return
	}
	cur := rec.Latest()
	if len(rec.Dirty) >= maxDirtyPerKey {
		return // as at the pending limit
	}
	// A stamp of an older incarnation is no slot's to complete (flaw G).
	if wire.StampVersion(stamp) <= cur.Ver || n.copies.staleIncarnation(h, wire.StampIncarnation(stamp)) {
		return
	}
	nv := version{Ver: wire.StampVersion(stamp), Del: cur.Del || cur.Ver == 0, Tenant: tenant, Op: uint8(wire.OpPut)}
	if nv.Del {
		nv.Op = uint8(wire.OpDel)
	} else {
		nv.Val = slices.Clone(cur.Val)
	}
	alone := len(ch) == 1
	rec.place(nv, alone)
	if err := s.putRecord(t, part, key, &rec, &s.commit); err != nil {
		return
	}
	n.ctr.noops.Add(1)
	if alone {
		if extras, promoted := n.copies.promoted(h); promoted {
			s.announce(h, key, &rec.Clean, extras)
		}
		return
	}
	s.launch(key, h, nv, ch)
	s.noops[h] = &noopSlot{key: slices.Clone(key), inFlight: nv.Ver}
}

// settleNoop ends a key's no-op slot whose no-op is no longer in flight
// (acked, or dropped since this node no longer heads the key's chain) and
// makes the no-op it owes, if this node still heads the chain: noop
// skips a stamp the key's versions have passed since.
func (s *shard) settleNoop(h wire.KeyHash, sl *noopSlot) {
	delete(s.noops, h)
	if sl.owed == 0 {
		return
	}
	if part, ch, pos := s.n.where(h); pos == 0 {
		s.noop(sl.key, h, sl.owed, sl.tenant, part, ch)
	}
}

// launch makes a version the head stored dirty pending and forwards it.
func (s *shard) launch(key []byte, h wire.KeyHash, v version, ch []wire.NodeID) *pendingWrite {
	pw := &pendingWrite{key: slices.Clone(key), h: h, v: v}
	s.pending[pendKey{h, v.Ver}] = pw
	s.forward(pw, ch)
	return pw
}

// forward sends a pending write from the head to its successor.
func (s *shard) forward(pw *pendingWrite, ch []wire.NodeID) {
	n := s.n
	extras, promoted := n.copies.promoted(pw.h)
	pw.to, pw.sent = ch[1], n.opts.clock.Now()
	s.send(n.peers[ch[1]], n.chainPacket(s.pkt(), pw.h, pw.key, &pw.v, promoted, extras))
}

func (n *Node) chainPacket(dst []byte, h wire.KeyHash, key []byte, v *version, promoted bool, extras []wire.NodeID) []byte {
	hd := wire.Header{Op: wire.OpChainWrite, Tenant: v.Tenant, ReqID: v.ReqID, KeyHash: h, Stamp: v.Ver, Node: n.id, Epoch: n.layout().Epoch(), Timestamp: v.TS}
	op := wire.Op(v.Op)
	if op != wire.OpDel {
		op = wire.OpPut
	}
	var eb [128]byte
	ext := (&wire.ChainExt{Op: op, Promoted: promoted, Reservation: v.Reservation, Addr: v.Addr, Extras: extras, Absorbed: v.Absorbed}).Append(eb[:0])
	return wire.AppendNodeOp(dst, &hd, key, v.Val, ext)
}

// chainWrite: a middle member stores the version dirty and passes it on; the
// tail commits it, replies to the requester and acks up the chain.
func (s *shard) chainWrite(p *wire.NodePacket) {
	n := s.n
	part, ch, pos := n.where(p.KeyHash)
	if pos <= 0 {
		return
	}
	var ext wire.ChainExt
	if ext.Decode(p.Ext) != nil || len(p.Value) > wire.MaxValue {
		return
	}
	nv := version{Ver: p.Stamp, Del: ext.Op == wire.OpDel, ReqID: p.ReqID, TS: p.Timestamp, Tenant: p.Tenant, Op: uint8(ext.Op), Addr: ext.Addr,
		Reservation: ext.Reservation, Absorbed: ext.Absorbed}
	if !nv.Del {
		nv.Val = slices.Clone(p.Value)
	}
	t := n.treeOf(part)
	rec, err := s.getRecord(t, part, p.Key)
	if err != nil {
		return
	}
	if pos < len(ch)-1 {
		if rec.addDirty(nv) {
			if err := s.storeTaken(t, part, p.Key, p.KeyHash, &rec, &nv); err != nil {
				return // not stored: the head retransmits
			}
		} else {
			s.remember(t, p.KeyHash, &nv)
		}
		s.send(n.peers[ch[pos+1]], n.chainPacket(s.pkt(), p.KeyHash, p.Key, &nv, ext.Promoted, ext.Extras))
		return
	}
	// Tail.
	if rec.setClean(nv) {
		if err := s.storeTaken(t, part, p.Key, p.KeyHash, &rec, &nv); err != nil {
			return
		}
	} else {
		s.remember(t, p.KeyHash, &nv)
	}
	s.replyCommitted(p.KeyHash, &nv)
	if ext.Promoted {
		s.announce(p.KeyHash, p.Key, &rec.Clean, ext.Extras)
	}
	ack := wire.Header{Op: wire.OpChainAck, KeyHash: p.KeyHash, Stamp: nv.Ver, Node: n.id, Epoch: n.layout().Epoch()}
	s.send(n.peers[ch[pos-1]], wire.AppendNodeOp(s.pkt(), &ack, p.Key, nil, nil))
}

// announce tells the data plane that the tail committed v (VSB with the
// tail's id) and pushes v to the key's extra copies.
func (s *shard) announce(h wire.KeyHash, key []byte, v *version, extras []wire.NodeID) {
	n := s.n
	_, ch, _ := n.where(h)
	if n.dp.IsValid() {
		vsb := wire.Header{Op: wire.OpVSB, KeyHash: h, Stamp: v.Ver, Node: ch[len(ch)-1], Load: n.load(), Epoch: n.layout().Epoch()}
		s.send(n.dp, wire.AppendNodeOp(s.pkt(), &vsb, nil, nil, nil))
	}
	for _, id := range extras {
		s.send(n.peers[id], n.copyPacket(s.pkt(), h, key, v))
	}
}

func (n *Node) copyPacket(dst []byte, h wire.KeyHash, key []byte, v *version) []byte {
	c := wire.Header{Op: wire.OpCopy, Code: readCode(v), KeyHash: h, Stamp: v.Ver, Node: n.id, Epoch: n.layout().Epoch()}
	if v.Ver == 0 {
		c.Code = wire.CodeNotFound
	}
	return wire.AppendNodeOp(dst, &c, key, v.Val, nil)
}

// chainAck: the tail committed a version; members mark it clean.
func (s *shard) chainAck(p *wire.NodePacket) {
	n := s.n
	part, ch, pos := n.where(p.KeyHash)
	if pos < 0 || pos >= len(ch)-1 {
		return
	}
	t := n.treeOf(part)
	rec, err := s.getRecord(t, part, p.Key)
	if err != nil {
		return
	}
	if rec.commit(p.Stamp) {
		s.putRecord(t, part, p.Key, &rec, nil)
	}
	if pos > 0 {
		ack := wire.Header{Op: wire.OpChainAck, KeyHash: p.KeyHash, Stamp: p.Stamp, Node: n.id, Epoch: n.layout().Epoch()}
		s.send(n.peers[ch[pos-1]], wire.AppendNodeOp(s.pkt(), &ack, p.Key, nil, nil))
		return
	}
	k := pendKey{p.KeyHash, p.Stamp}
	if pw := s.pending[k]; pw != nil {
		if pw.tries == 0 && !pw.sent.IsZero() {
			s.linkRTO(pw.to).sample(n.opts.clock.Now().Sub(pw.sent)) // Karn: sent once
		}
		for _, r := range pw.replies { // the group's absorbed writes
			s.send(r.from, n.appendReply(s.pkt(), &r.h, r.h.Op.Reply(), wire.CodeOK, p.Stamp, nil))
		}
	}
	delete(s.pending, k)
	if sl := s.noops[p.KeyHash]; sl != nil && p.Stamp >= sl.inFlight {
		s.settleNoop(p.KeyHash, sl)
	}
	if extras, ok := n.copies.promoted(p.KeyHash); ok && len(rec.Dirty) == 0 && rec.Clean.Ver > 0 {
		// Covers writes forwarded before the promotion, which the tail
		// did not announce.
		s.announce(p.KeyHash, p.Key, &rec.Clean, extras)
	}
}

// housekeep retransmits unacknowledged writes, each once its link's
// timeout (rtoEstimator) has run out, and re-asks lost version queries.
func (s *shard) housekeep() {
	n := s.n
	now := n.opts.clock.Now()
	for k, pw := range s.pending {
		if !pw.sent.IsZero() && !s.linkRTO(pw.to).due(pw.sent, now, pw.tries) {
			continue
		}
		_, ch, pos := n.where(k.h)
		if pos != 0 || len(ch) < 2 {
			delete(s.pending, k)
			continue
		}
		if !pw.sent.IsZero() {
			s.linkRTO(pw.to).timedOut(now)
		}
		n.ctr.retransmits.Add(1)
		pw.tries++
		s.forward(pw, ch)
	}
	for h, sl := range s.noops {
		if s.pending[pendKey{h, sl.inFlight}] == nil {
			s.settleNoop(h, sl)
		}
	}
	for h, w := range s.waits {
		if now.Sub(w.sent) < n.opts.RetransmitAfter {
			continue
		}
		keep := func(g getWaiter) bool { return now.Sub(g.at) > time.Second }
		w.covered = slices.DeleteFunc(append(w.covered, w.next...), keep)
		w.next = nil
		if len(w.covered) == 0 {
			delete(s.waits, h)
			continue
		}
		_, ch, _ := n.where(h)
		if len(ch) == 0 {
			delete(s.waits, h)
			continue
		}
		if !w.extra {
			w.asked = version{}
		}
		s.query(w, h, ch[len(ch)-1])
	}
	s.publishRTO()
}

// remember records, at a chain member below the head, the request id of a
// version it took, as the head's dedup table does: should the head die and
// this node head the chain, a client's retry of the request is answered
// with its version rather than applied again. Without it a new head knew
// only the request ids of the versions in its records (adopt), so the
// retry of a write acknowledged as v4 and overwritten since was applied
// again as v9 (TestChaos seed 12, history 4: head killed).
//
// A write group's version remembers its absorbed writes' request ids too.
func (s *shard) remember(t *tree, h wire.KeyHash, v *version) {
	es := s.dedupOf(h, v)
	if len(es) == 0 {
		return
	}
	b := t.db.NewBatch()
	defer b.Close()
	for _, e := range es {
		b.Set(dedupKey(e.id), e.e.encode(), nil)
	}
	if err := b.Commit(pebble.NoSync); err == nil {
		for _, e := range es {
			s.addDedup(t, e.id, e.e)
		}
	}
}

// storeTaken stores rec, in which a member below the head took version v,
// with v's dedup entries (remember) in the same synced write, and adds the
// entries to the table once the write is applied.
func (s *shard) storeTaken(t *tree, part uint32, key []byte, h wire.KeyHash, rec *record, v *version) error {
	es := s.dedupOf(h, v)
	b := t.db.NewBatch()
	for _, e := range es {
		b.Set(dedupKey(e.id), e.e.encode(), nil)
	}
	if err := s.commitRecord(t, part, key, rec, b); err != nil {
		return err
	}
	for _, e := range es {
		s.addDedup(t, e.id, e.e)
	}
	return nil
}

// idEntry is a dedup entry and its request id.
type idEntry struct {
	id uint64
	e  dedupEntry
}

// dedupOf is the dedup entries that remember v, for its request and its
// absorbed writes', each under a reserved sequence number; none for a
// request known at v or later, or for a no-op version (no requester).
func (s *shard) dedupOf(h wire.KeyHash, v *version) []idEntry {
	if v.ReqID == 0 {
		return nil
	}
	d := &s.n.chain.dedup
	var es []idEntry
	add := func(id uint64, op uint8) {
		if e, ok := d.get(id, h); ok && e.Ver >= v.Ver {
			return
		}
		es = append(es, idEntry{id, dedupEntry{Seq: d.reserve(), KeyHash: h, Ver: v.Ver, Code: uint8(wire.CodeOK), Op: op}})
	}
	add(v.ReqID, v.Op)
	for _, w := range v.Absorbed {
		add(w.ReqID, uint8(w.Op))
	}
	return es
}

// addDedup adds an entry persisted in t to the dedup table and deletes
// the persisted entries it replaces or evicts.
func (s *shard) addDedup(t *tree, id uint64, e dedupEntry) {
	e.inTree = uint8(slices.Index(s.n.trees, t) + 1)
	s.n.addDedup(id, e)
}

// dirtyAt reports whether version ver of key is dirty in this node's
// record.
func (s *shard) dirtyAt(part uint32, key []byte, ver uint64) bool {
	rec, err := s.n.treeOf(part).getRecord(part, key)
	if err != nil {
		return true // unknown: not acknowledged
	}
	return slices.ContainsFunc(rec.Dirty, func(v version) bool { return v.Ver == ver })
}

// addDedup adds e, persisted in the tree e.inTree names or in memory only,
// to the dedup table and deletes the persisted entries it replaces or
// evicts.
func (n *Node) addDedup(id uint64, e dedupEntry) {
	_, evict := n.chain.dedup.add(id, e)
	if err := forgetDedup(n.trees, evict); err != nil {
		n.log.Warn("dedup: delete evicted entries", "err", err)
	}
}
