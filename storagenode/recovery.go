package storagenode

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// Recovery: before serving reads, a node catches up with its chains. For
// every partition it holds, it pulls the clean versions of the partition
// from a live chain neighbour (its predecessor, or its successor for the
// head) with OpSync/OpSyncData, cursor by cursor, and merges by version.
// Dirty versions are not pulled: the head retransmits every uncommitted
// write until the tail acks it. A neighbour that does not answer is taken
// as down for the rest of the recovery and the next member is tried; if no
// member answers, nothing can have committed on the chain without this node
// (a write is acknowledged only after every member stores it), so the
// partition is already caught up.
//
// A tail is the chain's commit authority: members holding a dirty version
// ask it which one is committed. So a tail pulls from its predecessor the
// latest versions, dirty included, and takes them as committed (a tail
// commits what its predecessor holds; every member before it holds them
// too), and a node rejoining as tail (SetLayout) is ready only once its
// predecessor has answered so at the node's epoch. Clean versions alone are
// not enough (spec/README.md, flaw H): a version acknowledged by the old
// tail, whose ack to the predecessor was lost, is dirty there until the
// head's re-send arrives, and a tail that caught up without it would
// answer the predecessor's ver-query with the version before.
const (
	syncChunkBytes = 24 << 10
	syncChunkKeys  = 256
	syncParallel   = 8
	syncTries      = 3
	syncTryTimeout = 150 * time.Millisecond
	syncServeLimit = 4
	// fillParallel is how many chains a fill (catchUpAsTail) copies at
	// once: one, so that each chain is caught up, and served, as soon as
	// it can be, rather than every chain late.
	fillParallel = 1
	// fillTarget is the queueing a fill may add to its chunks' delay
	// before it slows (sched.FillPace); the chains' clients wait in the
	// same queues. The fill never goes below fillFloor of Options.SyncRate.
	fillTarget = 2 * time.Millisecond
	fillFloor  = 1.0 / 32
)

// recovery is the role that brings the node's trees up to date with its
// chains before it serves reads, and answers the syncs of other nodes
// doing the same.
type recovery struct {
	n       *Node
	ids     atomic.Uint64 // sync request ids
	serving chan struct{} // bounds concurrent OpSync answers

	mu   sync.Mutex
	wait map[uint64]chan *wire.NodePacket // this node's syncs in flight, by id

	behindMu sync.Mutex
	behind   int // catch-ups under way (start): the node is ready when none is

	// Catch-ups as tail (SetLayout's joins: a rejoin, a spare's fill),
	// per partition: the node serves a partition only when none is under
	// way for it.
	behindParts []atomic.Int32
	partsBehind atomic.Int64 // partitions with one under way

	pace bucket // Options.SyncRate, over every sync's data
}

func (rc *recovery) init(n *Node) {
	rc.n = n
	rc.ids.Store(uint64(time.Now().UnixNano()))
	rc.serving = make(chan struct{}, syncServeLimit)
	rc.wait = make(map[uint64]chan *wire.NodePacket)
	rc.behindParts = make([]atomic.Int32, n.opts.Layout.Partitions())
	if n.opts.SyncRate > 0 {
		rc.pace.setRate(float64(n.opts.SyncRate))
	}
}

// beginParts marks the partitions as behind until endPart.
func (rc *recovery) beginParts(parts map[uint32]bool) {
	for p := range parts {
		if int(p) < len(rc.behindParts) && rc.behindParts[p].Add(1) == 1 {
			rc.partsBehind.Add(1)
		}
	}
}

// endPart ends one catch-up of partition p that beginParts started.
func (rc *recovery) endPart(p uint32) {
	if int(p) < len(rc.behindParts) && rc.behindParts[p].Add(-1) == 0 {
		rc.partsBehind.Add(-1)
	}
}

// endParts ends the catch-ups beginParts started for parts.
func (rc *recovery) endParts(parts map[uint32]bool) {
	for p := range parts {
		rc.endPart(p)
	}
}

// behindList lists the partitions with a catch-up as tail under way.
func (rc *recovery) behindList() []uint32 {
	var out []uint32
	for p := range rc.behindParts {
		if rc.behindParts[p].Load() > 0 {
			out = append(out, uint32(p))
		}
	}
	return out
}

// member lists the partitions in whose chains the node is.
func (rc *recovery) member() []uint32 {
	m := rc.n.layout()
	var out []uint32
	for p := range m.Partitions() {
		if m.Position(uint32(p), rc.n.id) >= 0 {
			out = append(out, uint32(p))
		}
	}
	return out
}

// behindOn reports whether a catch-up of partition p is under way.
func (rc *recovery) behindOn(p uint32) bool {
	return int(p) < len(rc.behindParts) && rc.behindParts[p].Load() > 0
}

// fillPace paces one fill (catchUpAsTail): its bucket's rate follows a
// sched.FillPace fed with every chunk's delay.
type fillPace struct {
	mu   sync.Mutex
	pace *sched.FillPace
	b    bucket
}

// newFillPace paces a fill below rate bytes/s; nil if rate is not positive
// (unthrottled).
func newFillPace(rate int64) *fillPace {
	if rate <= 0 {
		return nil
	}
	f := &fillPace{pace: sched.NewFillPace(float64(rate), float64(rate)*fillFloor, fillTarget)}
	f.b.setRate(f.pace.Rate())
	return f
}

// observe takes one chunk's delay.
func (f *fillPace) observe(delay time.Duration) {
	f.mu.Lock()
	r := f.pace.Observe(time.Now(), delay)
	f.mu.Unlock()
	f.b.setRate(r)
}

// rate is the fill's copy rate now, bytes/s.
func (f *fillPace) rate() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pace.Rate()
}

// paceSync charges n bytes of sync data to the copy rate (fill's, or
// Options.SyncRate's without one) and waits while it is in debt; false
// once the node stops.
func (rc *recovery) paceSync(n int, fill *fillPace) bool {
	rc.n.ctr.syncBytes.Add(uint64(n))
	b := &rc.pace
	if fill != nil {
		b = &fill.b
	}
	wait := b.charge(uint64(n), time.Now())
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-rc.n.stop:
		return false
	}
}

// run catches up with every chain this node is in, then marks the node
// ready and starts re-announcing its copies. The caller has called begin.
func (rc *recovery) run() {
	n := rc.n
	defer n.wg.Done()
	defer func() {
		rc.end()
		n.wg.Add(1)
		go n.reannounce()
	}()
	rc.catchUp(func(uint32) bool { return true })
}

// begin marks the node not ready until the catch-up it starts ends, and
// every other one under way.
func (rc *recovery) begin() {
	rc.behindMu.Lock()
	defer rc.behindMu.Unlock()
	rc.behind++
	rc.n.ready.Store(false)
}

// end ends a catch-up that begin started.
func (rc *recovery) end() {
	rc.behindMu.Lock()
	defer rc.behindMu.Unlock()
	rc.behind--
	if rc.behind == 0 {
		rc.n.ready.Store(true)
	}
}

// catchUp pulls the partitions that want names, of those this node is in.
func (rc *recovery) catchUp(want func(part uint32) bool) {
	n := rc.n
	type job struct {
		part  uint32
		cands []wire.NodeID
	}
	var jobs []job
	for p := 0; p < n.layout().Partitions(); p++ {
		ch := n.layout().Chain(uint32(p))
		pos := n.layout().Position(uint32(p), n.id)
		if pos < 0 || len(ch) < 2 || !want(uint32(p)) {
			continue
		}
		var cands []wire.NodeID
		if pos > 0 {
			cands = append(cands, ch[pos-1])
		}
		for i, id := range ch {
			if i != pos && (pos == 0 || i != pos-1) {
				cands = append(cands, id)
			}
		}
		jobs = append(jobs, job{uint32(p), cands})
	}
	var mu sync.Mutex
	dead := map[wire.NodeID]bool{}
	next := 0
	var wg sync.WaitGroup
	for range syncParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(jobs) {
					mu.Unlock()
					return
				}
				j := jobs[next]
				next++
				mu.Unlock()
				for _, c := range j.cands {
					mu.Lock()
					d := dead[c]
					mu.Unlock()
					if d {
						continue
					}
					if rc.syncPartition(j.part, c, false, nil) {
						break
					}
					select {
					case <-n.stop:
						return
					default:
					}
					mu.Lock()
					dead[c] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

// catchUpAsTail pulls the partitions in parts, which this node joined as
// tail (rejoining, or as a spare), from each one's predecessor, dirty
// versions included, and ends each one's beginParts as it is done: the
// partition is then served. It copies one chain at a time (fillParallel),
// at a rate that yields to the chains' clients (fillPace, at most
// Options.SyncRate). It tries again
// until the predecessor answers at this node's epoch (it may not have
// taken the layout yet; a dead one is spliced out by a newer layout, which
// names the next), or the node is no longer behind anyone in the chain.
// Unlike catchUp it never takes silence as caught up. It logs its
// progress every few seconds and when done.
func (rc *recovery) catchUpAsTail(parts map[uint32]bool) {
	n := rc.n
	var wg sync.WaitGroup
	slots := make(chan struct{}, fillParallel)
	fill := newFillPace(n.opts.SyncRate)
	start, bytes0 := time.Now(), n.ctr.syncBytes.Load()
	var done atomic.Int64
	progress := func(msg string) {
		el := time.Since(start)
		b := n.ctr.syncBytes.Load() - bytes0
		args := []any{"chains", len(parts), "done", done.Load(), "bytes", b, "elapsed", el.Round(time.Millisecond),
			"MiB/s", fmt.Sprintf("%.2f", float64(b)/(1<<20)/max(el.Seconds(), 1e-3)), "rate_limit", n.opts.SyncRate}
		if fill != nil {
			args = append(args, "rate", int64(fill.rate()))
		}
		n.log.Info(msg, args...)
	}
	progress("catching up as tail")
	quit := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				progress("catch-up progress")
			case <-quit:
				return
			}
		}
	}()
	defer close(quit)
	for p := range n.layout().Partitions() {
		if !parts[uint32(p)] {
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func(part uint32) {
			defer func() { <-slots; rc.endPart(part); done.Add(1); wg.Done() }()
			for wait := syncTryTimeout; ; wait = min(2*wait, time.Second) {
				lay := n.layout()
				ch, pos := lay.Chain(part), lay.Position(part, n.id)
				// A node that a later layout put behind a newer tail is a
				// middle: its clean versions are what it needs from here.
				if pos <= 0 || rc.syncPartition(part, ch[pos-1], pos == len(ch)-1, fill) {
					return
				}
				select {
				case <-n.stop:
					return
				case <-time.After(wait):
				}
			}
		}(uint32(p))
	}
	wg.Wait()
	progress("caught up as tail")
}

// syncPartition pulls partition part from peer; false if the peer did not
// answer, or, with asTail, did not answer with its latest versions. A fill
// paces it and learns each chunk's delay: its round trip and the time its
// records took to store, both spent in queues the clients share.
func (rc *recovery) syncPartition(part uint32, peer wire.NodeID, asTail bool, fill *fillPace) bool {
	n := rc.n
	var cursor []byte
	for {
		id := rc.ids.Add(1)
		ch := make(chan *wire.NodePacket, 1)
		rc.mu.Lock()
		rc.wait[id] = ch
		rc.mu.Unlock()
		req := wire.Header{Op: wire.OpSync, ReqID: id, Stamp: uint64(part), Node: n.id, Epoch: n.layout().Epoch()}
		pkt := wire.AppendNodeOp(nil, &req, cursor, nil, nil)
		var got *wire.NodePacket
		sent := time.Now()
		for try := 0; try < syncTries && got == nil; try++ {
			n.sendNow(n.peers[peer], pkt)
			t := time.NewTimer(syncTryTimeout)
			select {
			case got = <-ch:
			case <-t.C:
			case <-n.stop:
			}
			t.Stop()
			if n.closing.Load() {
				break
			}
		}
		rc.mu.Lock()
		delete(rc.wait, id)
		rc.mu.Unlock()
		roundTrip := time.Since(sent)
		if got == nil {
			if fill != nil {
				fill.observe(roundTrip)
			}
			return false
		}
		recs, more, ok := decodeSyncData(got.Ext)
		if !ok || asTail && !syncLatest(got.Ext) {
			return false
		}
		if !rc.paceSync(len(got.Ext), fill) {
			return false
		}
		stored := time.Now()
		var wg sync.WaitGroup
		for _, r := range recs {
			h := wire.HashKey(r.Key)
			if n.layout().Partition(h) != part || len(r.Key) > wire.MaxKey {
				continue
			}
			wg.Add(1)
			r := r
			s := n.admit.shardOf(h)
			fn := func() {
				defer wg.Done()
				t := n.treeOf(part)
				rec, err := s.getRecord(t, part, r.Key)
				if err != nil {
					return
				}
				if rec.setClean(r.V) {
					n.ctr.syncKeys.Add(1)
					rec.Clean.Val = slices.Clone(rec.Clean.Val) // held beside newer dirty versions
					s.putRecord(t, part, r.Key, &rec, nil)
				}
			}
			select {
			case s.ch <- item{fn: fn}:
			case <-n.stop:
				wg.Done()
			}
		}
		wg.Wait()
		if fill != nil {
			fill.observe(roundTrip + time.Since(stored))
		}
		if !more || len(recs) == 0 {
			return true
		}
		cursor = recs[len(recs)-1].Key
	}
}

// deliver hands an OpSyncData to the sync waiting for it.
func (rc *recovery) deliver(b []byte) {
	var q wire.NodePacket
	if q.Decode(append([]byte(nil), b...)) != nil {
		return
	}
	rc.n.heardEpoch(q.Epoch)
	rc.mu.Lock()
	ch := rc.wait[q.ReqID]
	rc.mu.Unlock()
	if ch != nil {
		select {
		case ch <- &q:
		default:
		}
	}
}

// serve answers one OpSync with the next chunk of the partition.
func (rc *recovery) serve(b []byte, from netip.AddrPort) {
	n := rc.n
	var p wire.NodePacket
	if p.Decode(b) != nil || p.Stamp >= uint64(n.layout().Partitions()) {
		return
	}
	part := uint32(p.Stamp)
	lay := n.layout()
	ch, pos := lay.Chain(part), lay.Position(part, n.id)
	if pos < 0 {
		return
	}
	// The requester is the tail right behind this node, at this node's
	// epoch: it takes the latest versions (see Recovery above).
	latest := p.Epoch == lay.Epoch() && pos == len(ch)-2 && ch[pos+1] == p.Node
	select {
	case rc.serving <- struct{}{}:
	default:
		return // busy: the requester retries
	}
	hdr := p.Header
	cursor := append([]byte(nil), p.Key...)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { <-rc.serving }()
		if n.closing.Load() {
			return
		}
		if latest && !n.shardBarrier() {
			return
		}
		lo, hi := partitionBounds(part)
		if len(cursor) > 0 {
			lo = append(recordKey(part, cursor), 0)
		}
		it, err := n.treeOf(part).db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return
		}
		defer it.Close()
		var body []byte
		count := 0
		more := false
		for it.First(); it.Valid(); it.Next() {
			if count >= syncChunkKeys || len(body) >= syncChunkBytes {
				more = true
				break
			}
			rec, err := decodeRecord(bytes.Clone(it.Value()))
			if err != nil {
				continue
			}
			v := &rec.Clean
			if latest {
				v = rec.Latest()
			}
			if v.Ver == 0 {
				continue
			}
			body = appendSyncRecord(body, it.Key()[5:], v)
			count++
		}
		ext := []byte{0, byte(count >> 8), byte(count)}
		if more {
			ext[0] |= syncMore
		}
		if latest {
			ext[0] |= syncLatestFlag
		}
		ext = append(ext, body...)
		r := wire.Header{Op: wire.OpSyncData, ReqID: hdr.ReqID, Stamp: hdr.Stamp, Node: n.id, Epoch: n.layout().Epoch()}
		n.sendNow(from, wire.AppendNodeOp(nil, &r, nil, nil, ext))
	}()
}

// shardBarrier waits until every shard has handled what it was given
// before: a write handled under an older layout (a tail's commit) is then
// stored. False once the node stops.
func (n *Node) shardBarrier() bool {
	var wg sync.WaitGroup
	for _, s := range n.admit.shards {
		wg.Add(1)
		if !n.post(s, wg.Done) {
			wg.Done()
			wg.Wait()
			return false
		}
	}
	wg.Wait()
	return true
}
