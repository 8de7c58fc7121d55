package storagenode

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/storagenode/device"
	"github.com/netdir/netdir/wire"
)

// admission is the role that decides where and when a packet is handled: on
// its key's shard, whose one worker makes a key's handling serial, through
// the shard's bounded queue; and a client request, under Options.MaxOps,
// once the token bucket grants it.
//
// The bucket is the capacity emulation (Options.MaxOps). Client requests
// wait for a token here, in one goroutine in front of the shards, so a
// rate-limited node still handles chain writes, acks, version answers and
// copies as they arrive: were the wait inside a shard worker, they would
// queue behind rate-limited reads, and a saturated tail would slow every
// chain it ends. Writes are admitted before reads (while a write to a hot
// key waits, the data plane keeps that key's reads on its chain), except
// that after a write a waiting read goes next: at a write-hot head the
// key's next group nearly always waits, and writes first left its reads
// queued for good (the simulator at 1024 nodes: thousands at the hottest
// keys' heads; docs/architecture.md, "A read between two writes").
//
// When the goroutine admits a write, the writes of the same key waiting
// behind it join it as one write group (docs/architecture.md, "The head's
// half of the contract"): one token, one processor time, one version at
// the head. A hot key's writes are applied one at a time at its head, so
// without groups its head's capacity bounds the key's write rate however
// its reads are spread.
//
// With a QoS configuration (qos.go), client requests queue per tenant in
// dmClock instead, and the same goroutine hands them on in dmClock order
// (no groups: dmClock orders each tenant's requests).
//
// On a device whose profile has a processor (device.CPU: a time per
// request and a number of cores), each client request also pays its
// processor time here: the goroutine books it at its arrival and hands it
// on when its processing ends, so the node serves at most Cores requests
// per RequestService however many hit the cache, and those that miss pay
// the device beside it.
//
// A GET the goroutine releases goes to the read pool, not to its shard:
// readers beside the shards serve what fastGet serves and hand the rest
// to the key's shard. A shard holds a GET while its block reads wait on
// the device, so a key-serial worker made every GET of its shard wait for
// another key's device read, a head-of-line block no real store has (it
// issues reads up to its device's queue depth): on the emulated ssd the
// slowest reads spent 57-173 ms queued behind such a GET (BENCHMARKS.md,
// issue 14 (c)). A reader hands to a shard and no shard waits on a reader,
// so the hand-off cannot deadlock.
type admission struct {
	shards []*shard
	bucket *tokenBucket // nil: unlimited
	cpu    *device.CPU  // nil: requests cost no emulated processor time
	clock  device.Clock
	writes chan admitted
	reads  chan admitted
	// waiting holds the writes that the goroutine took out of writes to
	// find a group's members, in arrival order from waiting[whead]: they
	// are admitted before those still in the channel. writesQueued counts
	// the writes in both, held to the queue's length.
	waiting      []admitted
	whead        int
	writesQueued atomic.Int64
	queueLen     int64
	// wrote: the last request admitted was a write (its group), so a
	// read waiting goes next.
	wrote bool
	qos   qosAdmission
	// pool holds the admitted GETs for the readers (readPoolSize of
	// them).
	pool chan admitted
	// pending counts the packets submitted and not yet handled: queued
	// anywhere (bucket, processor, QoS, read pool, shard) or in a reader's
	// or a shard's hands, which on a device is mostly waiting for its
	// block reads.
	pending atomic.Int64
}

type admitted struct {
	it item
	s  *shard
}

// init makes n's shards, and the bucket if n is rate-limited.
func (a *admission) init(n *Node) {
	a.shards = make([]*shard, n.opts.Workers)
	for i := range a.shards {
		a.shards[i] = newShard(n, i)
	}
	if rate := n.opts.MaxOps; rate > 0 {
		a.bucket = newTokenBucket(rate, max(1, rate/100))
	}
	a.cpu, a.clock = device.NewCPU(n.opts.Device), n.opts.clock
	a.queueLen = int64(n.opts.QueueLen)
	if a.queued() {
		a.writes = make(chan admitted, n.opts.QueueLen)
		a.reads = make(chan admitted, n.opts.QueueLen)
	}
	a.pool = make(chan admitted, n.opts.QueueLen)
	a.qos.init(n)
}

// readPoolSize is how many GETs the read pool serves at once: the device's
// queue depth, as a real node issues its reads; the shard count on a
// device whose reads take no time (none). Measured on the emulated ssd
// (BENCHMARKS.md, issue 14 (d)): 4 readers held a p99 SLO up to 2,777
// ops/s where 32 held it to 2,177, and at the closed loop's saturation
// gave a p99 of 163-167 ms against 375-403 at the same throughput: more
// readers let cache hits pass, but queue more misses on the device, and
// the tail is the misses'.
func readPoolSize(n *Node) int {
	if n.opts.Device.ReadService <= 0 {
		return n.opts.Workers
	}
	return max(1, n.opts.Device.QueueDepth)
}

// start runs the shard workers, the readers and the admission goroutine
// (the bucket's, the processor's and QoS's) until stop closes.
func (a *admission) start(n *Node, wg *sync.WaitGroup, stop <-chan struct{}) {
	for _, s := range a.shards {
		wg.Add(1)
		go s.run()
	}
	for range readPoolSize(n) {
		wg.Add(1)
		g := newFastGet(n, 1)
		go func() {
			defer wg.Done()
			a.read(g, stop)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.run(stop)
	}()
}

func (a *admission) shardOf(h wire.KeyHash) *shard {
	x := uint32(h[4])<<24 | uint32(h[5])<<16 | uint32(h[6])<<8 | uint32(h[7])
	return a.shards[x%uint32(len(a.shards))]
}

// queued reports whether client requests wait in the admission goroutine
// (the bucket or the processor), not only under QoS.
func (a *admission) queued() bool { return a.bucket != nil || a.cpu != nil }

// inline reports whether a GET may be served where it arrives (fastGet):
// no client request waits in admission, for the bucket, the processor or
// QoS.
func (a *admission) inline() bool { return !a.queued() && !a.qos.on.Load() }

// submit queues a packet for its key's shard, a client request through the
// bucket or the processor if there is one; false if the queue is full.
func (a *admission) submit(h wire.KeyHash, client bool, op wire.Op, it item) bool {
	s := a.shardOf(h)
	if client && a.cpu != nil {
		it.at = a.clock.Now()
	}
	it.counted = true
	a.pending.Add(1)
	if ok := a.enqueue(s, client, op, it); ok {
		return true
	}
	a.pending.Add(-1)
	return false
}

func (a *admission) enqueue(s *shard, client bool, op wire.Op, it item) bool {
	if client && a.qos.on.Load() {
		return a.qos.add(it.b, op, admitted{it, s})
	}
	if client && a.queued() {
		if op == wire.OpGet {
			select {
			case a.reads <- admitted{it, s}:
				return true
			default:
				return false
			}
		}
		if a.writesQueued.Add(1) > a.queueLen {
			a.writesQueued.Add(-1)
			return false
		}
		select {
		case a.writes <- admitted{it, s}:
			return true
		default:
			a.writesQueued.Add(-1)
			return false
		}
	}
	q := s.ch
	if controlOp(wire.Frame(it.b)) {
		q = s.ctl
	}
	select {
	case q <- it:
		return true
	default:
		return false
	}
}

// controlOp reports whether the node op in f goes in its shard's control
// lane (shard.ctl), which the worker drains first and client requests
// cannot fill. Its items are small (header, key, at most a promotion's
// extras), so the lane's bound (the queue's length) holds few bytes.
//
// A chain ack commits a version at every member above the tail and ends
// the head's retransmissions of it; each is owed to a version already
// taken. Applied ahead of the items queued before it, the ack stays
// key-serial (one worker) and is only reordered as the network may
// reorder it: at a member that has not yet handled a retransmitted copy
// of the chain-write, the copy later finds the version clean and is
// acked again.
//
// A controller's promote and demote (sent as node 0; stall16 saw a
// demote time out, dropped at a full queue) are safe ahead of the queue
// too. Key order holds: one worker still applies everything of the key,
// one item at a time. What changes is only the order between them and
// the items already queued, and those came from other senders (clients,
// data planes, chain members): no order between two senders' datagrams
// exists to keep, the network may deliver them either way, and each
// handler already decides by the state it finds (a head refuses an
// unstamped write of a key promoted by then, and accepts one after a
// demote; a promote answers the latest version, clean or dirty, that
// the head holds when it runs). The controller's own requests keep their
// order among themselves (one lane, first in first out). A head's demote
// pushed to an extra (node id set) stays in the queue behind the copies
// the same head sent before it, as its other node ops do. Node ops that
// carry a value or make work (chain writes, version queries and answers,
// copies) stay in the queue, where a full queue still sheds them.
func controlOp(f wire.Frame) bool {
	if len(f) < wire.HeaderLen {
		return false
	}
	switch f.Op() {
	case wire.OpChainAck:
		return true
	case wire.OpPromote, wire.OpDemote:
		return f.Node() == 0
	}
	return false
}

// handled counts it (and the writes of its group) out of the load once a
// shard or a reader has answered it, tells QoS if it came through its
// queues, and frees its buffer.
func (a *admission) handled(it item) {
	for _, w := range it.group {
		a.handled(w)
	}
	if it.counted {
		a.pending.Add(-1)
	}
	if it.qos {
		a.qos.done(wire.Frame(it.b).Tenant())
	}
	if it.pool != nil {
		smallPool.Put(it.pool)
	}
}

// load is the node's queue depth as replies carry it: the requests queued
// or in service (sim.node.backlog alike). A request in service counts:
// on a device a shard holds a GET while its block reads wait behind other
// I/O, compactions' chunks among them, so a node whose device is backed up
// has its requests there, not in the queues; counting the queues only, it
// reported a load of 0 with every shard waiting on the device, and the
// fine score sent it more.
func (a *admission) load() uint16 {
	return uint16(min(max(a.pending.Load(), 0), 65535))
}

// run admits requests at the bucket's rate, if there is one, handing each
// on when the processor, if there is one, is done with it: a GET to the
// read pool, anything else (a write with its group) to its shard. The
// processor's bookings end in the order they are made (one service time,
// FIFO), so waiting for each in turn keeps its schedule; a late wake-up
// only hands the next ones on at once.
func (a *admission) run(stop <-chan struct{}) {
	for {
		if a.bucket != nil {
			a.bucket.wait(stop)
		}
		next, ok := a.take(stop)
		if !ok {
			return
		}
		if a.cpu != nil && !next.it.at.IsZero() {
			if d := a.cpu.Book(next.it.at).Sub(a.clock.Now()); d > 0 {
				a.clock.Sleep(d)
			}
		}
		if wire.Frame(next.it.b).Op() == wire.OpGet {
			select {
			case a.pool <- next:
			case <-stop:
				return
			}
			continue
		}
		select {
		case next.s.ch <- next.it:
		case <-stop:
			return
		}
	}
}

// read is one reader of the read pool: it answers each GET that fastGet
// can (g's serve, its reply sent at once: the next GET may wait on the
// device), and hands the others (dirty, verified, errors) to their
// keys' shards, which count them out of the load when they have handled
// them.
func (a *admission) read(g *fastGet, stop <-chan struct{}) {
	for {
		select {
		case next := <-a.pool:
			if !g.serve(next.it.b, udpbatch.PeerOf(next.it.from, g.n.v4)) {
				select {
				case next.s.ch <- next.it:
				case <-stop:
					return
				}
				continue
			}
			g.flush()
			a.handled(next.it)
		case <-stop:
			return
		}
	}
}

// take waits for the next client request to admit: a bucket-queued write
// with its group, else a bucket-queued read, else QoS's next in dmClock
// order; but after a write, a bucket-queued read first if one waits.
// false once stop closes.
func (a *admission) take(stop <-chan struct{}) (admitted, bool) {
	if a.wrote {
		select {
		case next := <-a.reads:
			a.wrote = false
			return next, true
		default:
		}
	}
	if a.whead < len(a.waiting) {
		next := a.waiting[a.whead]
		a.waiting[a.whead] = admitted{}
		a.whead++
		return a.admitWrite(next), true
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case next := <-a.writes:
			return a.admitWrite(next), true
		default:
		}
		next, ok, until := a.qos.pull()
		if ok {
			return next, true
		}
		var due <-chan time.Time
		if until > 0 {
			if timer == nil {
				timer = time.NewTimer(until)
			} else {
				timer.Reset(until)
			}
			due = timer.C
		}
		select {
		case next := <-a.writes:
			return a.admitWrite(next), true
		case next := <-a.reads:
			a.wrote = false
			return next, true
		case <-a.qos.wake:
		case <-due:
		case <-stop:
			return admitted{}, false
		}
	}
}

// admitWrite takes w out of the write queue's count and gathers its
// group: the writes of its key that wait at this moment, in arrival order,
// up to wire.MaxWriteGroup writes in all, leaving the others in their
// order. Not under QoS.
func (a *admission) admitWrite(w admitted) admitted {
	a.wrote = true
	a.writesQueued.Add(-1)
	if a.qos.on.Load() {
		return w
	}
	for drained := false; !drained; {
		select {
		case x := <-a.writes:
			a.waiting = append(a.waiting, x)
		default:
			drained = true
		}
	}
	h := wire.Frame(w.it.b).KeyHash()
	kept := a.waiting[:0]
	for _, x := range a.waiting[a.whead:] {
		if len(w.it.group) < wire.MaxWriteGroup-1 && wire.Frame(x.it.b).KeyHash() == h {
			w.it.group = append(w.it.group, x.it)
			continue
		}
		kept = append(kept, x)
	}
	clear(a.waiting[len(kept):])
	a.waiting, a.whead = kept, 0
	a.writesQueued.Add(-int64(len(w.it.group)))
	return w
}

// tokenBucket is a small rate limiter for --max-ops. Only the admission
// goroutine uses it.
type tokenBucket struct {
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newTokenBucket(rate, burst float64) *tokenBucket {
	return &tokenBucket{rate: rate, burst: burst, tokens: burst, last: time.Now()}
}

// wait blocks until a token is available or stop closes.
func (b *tokenBucket) wait(stop <-chan struct{}) {
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	b.tokens--
	d := time.Duration(-b.tokens / b.rate * float64(time.Second))
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-stop:
		t.Stop()
	}
}
