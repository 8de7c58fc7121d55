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
//
// A Node keeps the wiring (options, layout, trees, socket, lifecycle) and
// dispatches packets; its state is split by role, each role a struct that
// owns its fields and at most one lock:
//   - admission (admit.go): the shard workers and their queues, and MaxOps's
//     token bucket and the device profile's emulated processor
//     (device.CPU, its own lock) with the client requests waiting for
//     them. No lock: queues
//     are channels, and the bucket is its goroutine's alone. With a QoS
//     configuration (qos.go), client requests wait in per-tenant dmClock
//     queues instead (their lock) for admission's goroutine.
//   - chain (chain.go): CRAQ replication. The head's dedup table (its lock)
//     node-wide; per key, in the key's shard (chainShard, owned by the
//     shard's worker, no lock), the writes the head forwarded and
//     retransmits until the tail's ack, and the reads of dirty keys waiting
//     for the tail's version answer. The shard's handlers (write, chainWrite,
//     chainAck, get, verQuery, verAnswer, housekeep) run the protocol.
//   - copies (hot.go): hot keys. At a head, the promoted keys, their extras
//     and whether data planes stamp them; at an extra, the copies it holds
//     and the tombstones of dropped ones (one RWMutex). The shard's promote,
//     demote, copyIn and announce, and the node's reannounce, send the
//     copies and VSBs.
//   - recovery (recovery.go): catching up with the chains before serving
//     reads, and answering other nodes' syncs (its lock guards the syncs in
//     flight).
//   - counters (stats.go): request and packet counters (atomics) and the
//     hot-key top-k reported to the controller (its lock); Stats, the
//     Prometheus collector and GossipStats read them with the trees' figures.
//
// No role calls another while holding its lock, so there is no lock order
// between them.
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

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/storagenode/device"
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
	DefaultSyncRate        = 32 << 20 // bytes/s a catch-up copies
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
	// emulation knob, not a production control; Device is the capacity
	// model that makes compaction contend with reads.
	MaxOps float64
	// Device is the emulated storage device beneath the node's trees
	// (device.Parse: "ssd", "hdd" or "none"; the zero value is "none": I/O
	// is counted and costs nothing). The trees share it, so compaction I/O
	// takes device time from reads. Its processor (RequestService, Cores)
	// charges every client request, cache hits included (device.CPU).
	Device device.Profile

	CacheBytes    int64  // Pebble block cache shared by the trees
	MemTableBytes uint64 // per tree
	// LBaseMaxBytes is Pebble's target size of each tree's base level (0:
	// Pebble's 64 MiB). Smaller values give a small data set the levels,
	// and so the non-L0 compactions, of a large one (one-machine
	// experiments).
	LBaseMaxBytes int64

	// CompactionBudget is the node's paced compaction bytes/s (Unthrottled:
	// none); 0 takes the device's (Device.CompactionBudget, HATS's 64 MiB/s
	// scaled like the device; 64 MiB/s with no device).
	CompactionBudget int64
	// CompactionFloor is the per-tree floor in bytes/s; 0 takes 4 MiB/s, or,
	// with the device's budget, the same 1/16 of it.
	CompactionFloor int64
	Allocator       Allocator // default ReadShare

	// SyncRate paces catching up (OpSyncData taken from chain neighbours:
	// a restart's recovery, a rejoin, a spare's fill) in bytes/s, so that
	// copying a partition does not starve the neighbour's or this node's
	// reads; 0 takes DefaultSyncRate, Unthrottled paces nothing.
	SyncRate int64

	// QoSRankLocal makes the node's QoS ignore the δ and ρ that the data
	// plane stamps, so each node enforces the policies alone (CephFS's
	// rank-local QoS): the bench's baseline, not a production setting.
	QoSRankLocal bool

	DedupEntries int // bounded dedup table at the head
	MaxPending   int // uncommitted writes at the head before ERR unavailable
	// RetransmitAfter is the shortest wait of the head for the tail's ack
	// of a chain write before it resends it, and the wait until acks down
	// the write's chain link have been timed: from then on the wait is the
	// link's measured timeout (RFC 6298, rtoEstimator) where that is
	// longer, at most 16× RetransmitAfter, as the old fixed timer's
	// backoff. The shards' timer ticks every RetransmitAfter/2.
	RetransmitAfter time.Duration

	Logger *slog.Logger

	// Auth seals the node ops the node sends and authenticates those it
	// receives (nodeauth): the cluster key. Nil: node ops carry no MAC and
	// are admitted by their source address alone.
	Auth *nodeauth.Auth

	// Current says the node's trees are already current with their
	// chains, so it serves at once instead of catching up from its
	// neighbours first, and holds no uncommitted writes, so it skips the
	// scan for them: an experiment's fresh cluster whose every node starts
	// from one copied, cleanly stopped and settled template
	// (bench/system.Fresh). The catch-up and the scan read every partition
	// through the emulated device, which takes minutes. Never set it for a
	// node that may have missed writes or stopped with writes in flight.
	Current bool

	clock device.Clock // the device's clock, and the read timer's (nil: the wall clock); tests fake it
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
	if o.SyncRate == 0 {
		o.SyncRate = DefaultSyncRate
	}
	if o.RetransmitAfter <= 0 {
		o.RetransmitAfter = DefaultRetransmitAfter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Device == (device.Profile{}) {
		o.Device, _ = device.Parse("none")
	}
	if o.CompactionBudget == 0 {
		o.CompactionBudget = o.Device.CompactionBudget
		if o.CompactionFloor == 0 {
			o.CompactionFloor = o.CompactionBudget / (DefaultCompactionBudget / DefaultCompactionFloor)
		}
	}
	if o.clock == nil {
		o.clock = device.RealClock{}
	}
	return nil
}

// Node is a running storage node.
type Node struct {
	opts  Options
	id    wire.NodeID
	auth  *nodeauth.Auth
	lay   atomic.Pointer[layout.Map] // the newest layout heard of (SetLayout)
	turns compactionTurns
	log   *slog.Logger
	cache *pebble.Cache
	dev   *device.Device // shared by the trees
	sched *Scheduler
	trees []*tree

	conn  *net.UDPConn
	v4    bool // conn is an IPv4 socket
	laddr netip.AddrPort
	peers map[wire.NodeID]netip.AddrPort
	dp    netip.AddrPort

	ready   atomic.Bool
	closing atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup

	// peerEpoch is the newest epoch a chain neighbour's packet carried:
	// above lay's, the node's layout is stale (it restarted with the one
	// it was given, or missed the gossip), and it serves no chain until it
	// takes a layout as new (serves).
	peerEpoch atomic.Uint32

	admit  admission
	chain  chain
	copies copies
	recov  recovery
	ctr    counters
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
		opts: o, id: o.ID, auth: o.Auth, log: o.Logger.With("node", o.ID),
		peers: make(map[wire.NodeID]netip.AddrPort),
		stop:  make(chan struct{}),
		ctr:   counters{hot: sched.NewTopK(hotKeyCounters)},
	}
	n.lay.Store(o.Layout)
	n.chain.queryIDs.Store(uint64(time.Now().UnixNano()))
	n.recov.init(n)
	for _, id := range o.Layout.Nodes() {
		a, _ := o.Layout.Addr(id)
		n.peers[id] = a
	}
	n.dp = o.Layout.DataPlane()
	n.cache = pebble.NewCache(o.CacheBytes)
	n.dev = device.New(o.Device, o.clock)
	n.sched = NewScheduler(o.CompactionBudget, o.CompactionFloor, o.Allocator)
	n.sched.setTurns(n.turnNow)
	fail := func(err error) (*Node, error) {
		n.sched.Close()
		for _, t := range n.trees {
			t.db.Close()
		}
		n.cache.Unref()
		return nil, err
	}
	for j := 0; j < o.Layout.R(); j++ {
		t, err := openTree(o.Dir, j, n.cache, &o, n.sched, n.dev, n.log)
		if err != nil {
			return fail(fmt.Errorf("storagenode: open tree %d: %w", j, err))
		}
		n.trees = append(n.trees, t)
	}
	if err := n.chain.dedup.load(n.trees, o.DedupEntries); err != nil {
		return fail(err)
	}
	if err := n.copies.load(n.trees[0]); err != nil {
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
	n.v4 = n.conn.LocalAddr().(*net.UDPAddr).IP.To4() != nil
	n.admit.init(n)
	if !o.Current { // a current node holds no uncommitted writes to scan for
		if err := loadPending(n.trees, n.admit.shardOf); err != nil {
			n.conn.Close()
			return fail(err)
		}
	}
	n.admit.start(n, &n.wg, n.stop)
	n.wg.Add(1)
	go n.readLoop()
	if o.Current {
		n.ready.Store(true)
		return n, nil
	}
	n.recov.begin()
	n.wg.Add(1)
	go n.recov.run()
	return n, nil
}

// ID is the node's id.
func (n *Node) ID() wire.NodeID { return n.id }

// Addr is the bound UDP address.
func (n *Node) Addr() netip.AddrPort { return n.laddr }

// Ready reports whether recovery is done and reads are served: the node
// is catching up with no chain.
func (n *Node) Ready() bool { return n.ready.Load() && n.recov.partsBehind.Load() == 0 }

// serves reports whether the node serves partition part: recovery is done,
// no catch-up of the partition (a rejoin, a spare's fill) is under way, and
// no neighbour is at a newer epoch. A node whose layout is older than its
// neighbours' may have been spliced out of the chain meanwhile: as the
// tail of the chain it left it would answer reads older than the writes
// the chain acknowledged without it.
func (n *Node) serves(part uint32) bool {
	return n.ready.Load() && !n.recov.behindOn(part) && !n.layoutBehindPeer()
}

// layoutBehindPeer reports whether a chain neighbour has shown a newer
// epoch than this node's layout.
func (n *Node) layoutBehindPeer() bool { return n.peerEpoch.Load() > n.layout().Epoch() }

// heardEpoch notes the epoch a chain neighbour's packet carried: a node op
// that openNodeOp admitted (with a cluster key, authenticated), never a
// forgery's.
func (n *Node) heardEpoch(e uint32) {
	for {
		cur := n.peerEpoch.Load()
		if e <= cur || n.peerEpoch.CompareAndSwap(cur, e) {
			return
		}
	}
}

// WaitReady waits until the node serves reads, up to d.
func (n *Node) WaitReady(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !n.Ready() {
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
	n.sched.Close() // running compactions finish unpaced, so closing waits for the device, not the budget
	var errs []error
	for _, t := range n.trees {
		errs = append(errs, t.db.Close())
	}
	n.cache.Unref()
	return errors.Join(errs...)
}

// load is the node's queue depth, carried on replies, and
// sched.TurnLoadPenalty more in its turn of staggered compaction, so that
// the fine score sends its reads to a chain partner.
func (n *Node) load() uint16 {
	l := n.admit.load()
	if n.sched.inTurn.Load() {
		l = min(l, 65535-sched.TurnLoadPenalty) + sched.TurnLoadPenalty
	}
	return l
}

// SetDeviceFree turns the node's device time off (true) or back on
// (device.Device.SetFree): for a bench's preload, which is setup, not
// measurement. Client requests still pay the processor.
func (n *Node) SetDeviceFree(free bool) { n.dev.SetFree(free) }
