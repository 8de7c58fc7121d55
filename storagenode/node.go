// Package storagenode is netdir's storage node: R Pebble trees per node (one
// per chain position: replica decoupling), CRAQ chain replication with
// version stamps and request deduplication at the head, hot-key copies
// announced by VSB, a node-level compaction scheduler, and a UDP server with
// batched I/O, a sharded worker pool and bounded queues.
//
// Start a node with Start(Options); the layout (node table and partition map)
// comes from package layout. The wire format of client ops and node ops
// (0x20..0x2a) is package wire's (wire/nodeop.go); payload.go holds the
// sync-data records, which only nodes read.
//
// Invariants, and why they make reads linearizable (CRAQ):
//   - A write enters at the head, which assigns (or checks) its version and
//     stores it dirty with a synced WAL before it forwards it; every member
//     does the same; the tail stores it clean, synced, before it replies. So
//     an acknowledged write is on every member's disk.
//   - A version committed at the tail has passed through every member, so a
//     member holding no dirty version holds exactly the committed one; a
//     member holding a dirty version asks the tail, whose answer is the
//     committed state at the time of the answer.
//   - Versions of a key are totally ordered by the head, and every member
//     merges by version, so loss, duplication and reordering between members
//     change nothing: the head retransmits uncommitted writes until the tail's
//     ack comes back.
//   - All packets about one key are handled by one worker (sharded by
//     KeyHash), so a key's read-modify-write of its record is serial.
package storagenode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/net/ipv4"

	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/storagenode/layout"
	"github.com/netdir/netdir/wire"
)

// Defaults of Options.
const (
	DefaultWorkers         = 16
	DefaultQueueLen        = 1024
	DefaultCacheBytes      = 64 << 20 // Pebble block cache, shared by the R trees
	DefaultMemTableBytes   = 8 << 20  // per tree
	DefaultDedupEntries    = 1 << 16
	DefaultMaxPending      = 1 << 14
	DefaultRetransmitAfter = 100 * time.Millisecond
)

// Options configure a node.
type Options struct {
	ID     wire.NodeID
	Dir    string      // data directory; trees live in Dir/tree-<j>
	Layout *layout.Map // node table and partition map
	// Listen is the UDP address to bind; empty means the node's address in
	// the layout. (A fault-injecting proxy may stand at the layout address.)
	Listen string

	Workers  int // shard workers; per-key order holds because keys map to one worker
	QueueLen int // per worker; a full queue answers ERR queue-full
	// MaxOps emulates a node's capacity for one-machine experiments: client
	// requests (GET/PUT/DEL) are admitted by a token bucket of MaxOps per
	// second (burst MaxOps/100, at least 1). Zero means unlimited. It is an
	// emulation knob, not a production control.
	MaxOps float64

	CacheBytes    int64  // Pebble block cache shared by the trees
	MemTableBytes uint64 // per tree
	// LBaseMaxBytes is Pebble's target size of each tree's base level (0:
	// Pebble's 64 MiB). Smaller values give a small data set the levels,
	// and so the non-L0 compactions, of a large one (one-machine
	// experiments).
	LBaseMaxBytes int64

	CompactionBudget int64     // bytes/s for the node; default 64 MiB/s
	CompactionFloor  int64     // bytes/s per tree; default 4 MiB/s
	Allocator        Allocator // default EqualShares

	DedupEntries    int           // bounded dedup table at the head
	MaxPending      int           // uncommitted writes at the head before ERR unavailable
	RetransmitAfter time.Duration // head retransmits an unacknowledged chain write after this

	Logger *slog.Logger
}

func (o *Options) fill() error {
	if o.Layout == nil {
		return errors.New("storagenode: no layout")
	}
	if _, ok := o.Layout.Addr(o.ID); !ok {
		return fmt.Errorf("storagenode: node %d is not in the layout", o.ID)
	}
	if o.Dir == "" {
		return errors.New("storagenode: no data directory")
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.QueueLen <= 0 {
		o.QueueLen = DefaultQueueLen
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = DefaultMemTableBytes
	}
	if o.DedupEntries <= 0 {
		o.DedupEntries = DefaultDedupEntries
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.RetransmitAfter <= 0 {
		o.RetransmitAfter = DefaultRetransmitAfter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return nil
}

// Node is a running storage node.
type Node struct {
	opts  Options
	id    wire.NodeID
	lay   *layout.Map
	log   *slog.Logger
	cache *pebble.Cache
	sched *Scheduler
	trees []*tree

	conn  *net.UDPConn
	laddr netip.AddrPort
	peers map[wire.NodeID]netip.AddrPort
	dp    netip.AddrPort

	shards []*shard
	outCh  chan []ipv4.Message // shards' reply batches, to sendLoop
	admit  *admission          // MaxOps's token bucket; nil if unlimited

	dedup *dedupTable

	promoMu sync.RWMutex
	promo   map[wire.KeyHash][]wire.NodeID // promoted keys at this head → extras
	noStamp map[wire.KeyHash]bool          // promoted keys no data plane stamps (promoteNoStamp)

	hotMu sync.Mutex
	hot   *sched.TopK // the keys of client requests served, for the controller

	extraMu sync.RWMutex
	extras  map[wire.KeyHash]*extraCopy

	ready   atomic.Bool
	closing atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup

	syncServe chan struct{} // bounds concurrent OpSync answers
	syncMu    sync.Mutex
	syncWait  map[uint64]chan *wire.NodePacket
	nextQuery atomic.Uint64

	ctr counters
}

type counters struct {
	gets, puts, dels, errs, queueFull  atomic.Uint64
	dupWrites, retransmits, verQueries atomic.Uint64
	rxPackets, txPackets               atomic.Uint64
	syncKeys                           atomic.Uint64
	noops                              atomic.Uint64 // no-op versions made for stamped duplicates
}

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

// Start opens the trees, binds the UDP socket, recovers (catches up with the
// chains) in the background, and serves. Reads are answered ERR unavailable
// until recovery is done; Ready reports it, and WaitReady waits for it.
func Start(o Options) (*Node, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	n := &Node{
		opts: o, id: o.ID, lay: o.Layout, log: o.Logger.With("node", o.ID),
		peers:     make(map[wire.NodeID]netip.AddrPort),
		promo:     make(map[wire.KeyHash][]wire.NodeID),
		noStamp:   make(map[wire.KeyHash]bool),
		hot:       sched.NewTopK(hotKeyCounters),
		extras:    make(map[wire.KeyHash]*extraCopy),
		stop:      make(chan struct{}),
		syncWait:  make(map[uint64]chan *wire.NodePacket),
		syncServe: make(chan struct{}, syncServeLimit),
	}
	n.nextQuery.Store(uint64(time.Now().UnixNano()))
	for _, id := range o.Layout.Nodes() {
		a, _ := o.Layout.Addr(id)
		n.peers[id] = a
	}
	n.dp = o.Layout.DataPlane()
	if o.MaxOps > 0 {
		n.admit = newAdmission(o.MaxOps, o.QueueLen)
	}
	n.cache = pebble.NewCache(o.CacheBytes)
	n.sched = NewScheduler(o.CompactionBudget, o.CompactionFloor, o.Allocator)
	fail := func(err error) (*Node, error) {
		for _, t := range n.trees {
			t.db.Close()
		}
		n.sched.Close()
		n.cache.Unref()
		return nil, err
	}
	for j := 0; j < o.Layout.R(); j++ {
		t, err := openTree(o.Dir, j, n.cache, &o, n.sched, n.log)
		if err != nil {
			return fail(fmt.Errorf("storagenode: open tree %d: %w", j, err))
		}
		n.trees = append(n.trees, t)
	}
	var err error
	if n.dedup, err = loadDedup(n.trees[0], o.DedupEntries); err != nil {
		return fail(err)
	}
	if err := n.loadPromotions(); err != nil {
		return fail(err)
	}
	listen := o.Listen
	if listen == "" {
		a, _ := o.Layout.Addr(o.ID)
		listen = a.String()
	}
	ua, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return fail(err)
	}
	n.conn, err = net.ListenUDP("udp", ua)
	if err != nil {
		return fail(err)
	}
	_ = n.conn.SetReadBuffer(8 << 20)
	_ = n.conn.SetWriteBuffer(8 << 20)
	n.laddr = n.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	n.shards = make([]*shard, o.Workers)
	for i := range n.shards {
		n.shards[i] = newShard(n, i)
	}
	if err := n.loadPending(); err != nil {
		n.conn.Close()
		return fail(err)
	}
	n.outCh = make(chan []ipv4.Message, 4*o.Workers)
	n.wg.Add(1)
	go n.sendLoop()
	for _, s := range n.shards {
		n.wg.Add(1)
		go s.run()
	}
	if n.admit != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.admit.run(n.stop)
		}()
	}
	n.wg.Add(1)
	go n.readLoop()
	n.wg.Add(1)
	go n.recover()
	return n, nil
}

// ID is the node's id.
func (n *Node) ID() wire.NodeID { return n.id }

// Addr is the bound UDP address.
func (n *Node) Addr() netip.AddrPort { return n.laddr }

// Ready reports whether recovery is done and reads are served.
func (n *Node) Ready() bool { return n.ready.Load() }

// WaitReady waits until the node serves reads, up to d.
func (n *Node) WaitReady(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !n.ready.Load() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// Scheduler is the node's compaction scheduler (to install an Allocator).
func (n *Node) Scheduler() *Scheduler { return n.sched }

// Close stops serving and closes the trees cleanly.
func (n *Node) Close() error {
	if n.closing.Swap(true) {
		return nil
	}
	close(n.stop)
	n.conn.Close()
	n.wg.Wait()
	var errs []error
	for _, t := range n.trees {
		errs = append(errs, t.db.Close())
	}
	n.sched.Close()
	n.cache.Unref()
	return errors.Join(errs...)
}

// loadPromotions reads the promoted keys this node heads.
func (n *Node) loadPromotions() error {
	it, err := n.trees[0].db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindPromo}, UpperBound: []byte{kindPromo + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		v := it.Value()
		h := wire.HashKey(it.Key()[1:])
		if len(v)%2 == 1 && v[len(v)-1] == promoNoStampMark {
			v = v[:len(v)-1]
			n.noStamp[h] = true
		}
		ids, err := wire.ParseNodeIDs(v)
		if err != nil {
			continue
		}
		n.promo[h] = ids
	}
	return it.Error()
}

// loadPending rebuilds the head's uncommitted writes from tree 0, so that
// they are retransmitted after a restart.
func (n *Node) loadPending() error {
	it, err := n.trees[0].db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindRecord}, UpperBound: []byte{kindRecord + 1}})
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
		h := wire.HashKey(key)
		s := n.shardOf(h)
		for _, v := range rec.Dirty {
			s.pending[pendKey{h, v.Ver}] = &pendingWrite{key: key, v: v, sent: time.Time{}}
		}
	}
	return it.Error()
}

func (n *Node) shardOf(h wire.KeyHash) *shard {
	x := uint32(h[4])<<24 | uint32(h[5])<<16 | uint32(h[6])<<8 | uint32(h[7])
	return n.shards[x%uint32(len(n.shards))]
}

// load is the node's queue depth, carried on replies.
func (n *Node) load() uint16 {
	t := 0
	for _, s := range n.shards {
		t += len(s.ch)
	}
	if n.admit != nil {
		t += n.admit.len()
	}
	return uint16(min(t, 65535))
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

func loadDedup(t *tree, capacity int) (*dedupTable, error) {
	d := &dedupTable{m: make(map[uint64]dedupEntry), cap: capacity}
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindDedup}, UpperBound: []byte{kindDedup + 1}})
	if err != nil {
		return nil, err
	}
	type ent struct {
		id uint64
		e  dedupEntry
	}
	var all []ent
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 {
			continue
		}
		e, err := decodeDedup(it.Value())
		if err != nil {
			continue
		}
		all = append(all, ent{beUint64(k[1:]), e})
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	sortFunc(all, func(a, b ent) int { return cmpU64(a.e.Seq, b.e.Seq) })
	for _, x := range all {
		d.m[x.id] = x.e
		d.fifo = append(d.fifo, x.id)
		d.seq = max(d.seq, x.e.Seq)
	}
	return d, nil
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

// add records id and returns the ids evicted to stay within the bound,
// whose persisted entries the caller deletes in its batch.
func (d *dedupTable) add(id uint64, e dedupEntry) (dedupEntry, []uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	e.Seq = d.seq
	if _, ok := d.m[id]; !ok {
		d.fifo = append(d.fifo, id)
	}
	d.m[id] = e
	var evict []uint64
	for len(d.fifo) > d.cap {
		old := d.fifo[0]
		d.fifo = d.fifo[1:]
		delete(d.m, old)
		evict = append(evict, old)
	}
	return e, evict
}

// hotKeyCounters bounds the node's hot-key counting (sched.TopK): keys with
// more than 1/64 of a round's requests are always found.
const hotKeyCounters = 64

// HotKeys returns the keys of the client requests this node served since
// the last call, most requested first, at most max: the report that names
// hot keys to the controller (data planes count by hash only).
func (n *Node) HotKeys(max int) []sched.KeyCount {
	n.hotMu.Lock()
	defer n.hotMu.Unlock()
	return n.hot.Top(max)
}
