// Package sim is a deterministic discrete-event simulator of netdir at
// thousands of nodes. Every routing decision, write stamp, reply, VSB and
// controller decision is made by the same pure packages the real system
// runs: directory (the data plane's state machine, and its Spine above the
// rack directories), sched (hot keys, copy placement, HATS coarse weights)
// and layout (placement). What the simulator adds is only what the real
// system does with I/O: storage nodes as queues (writes first, but a read
// between two writes if one waits) with a service-time distribution, a
// chain head serving the writes of one key
// that wait together as one group in one service time (write groups: one
// version, one commit, each write answered once it commits), links as
// fixed latencies, clients in a closed or open loop drawing YCSB
// operations from package bench's generator, chain replication
// as hops, an extra's version query for a read the data plane flagged
// FlagVerify as a round trip to the key's tail (no service time: the
// nodes' token buckets charge client requests only), and the controller's
// loops at fixed virtual periods.
//
// A run is a function of its Config: virtual time, a seeded PCG
// (math/rand/v2) for the simulator's own draws (request ids, service times,
// arrivals), the workload's own seeded streams for keys, and events ordered
// by (time, the order they were scheduled in).
package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
	"unsafe"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/prefetch"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// Defaults of Config.
const (
	DefaultNodes       = 8
	DefaultCapacity    = 100 // requests/s per node, as netdir bench's N=8 runs
	DefaultRackSize    = directory.MaxLocations
	DefaultLink        = 10 * time.Microsecond
	DefaultRound       = 500 * time.Millisecond // bench/system.DefaultRound
	DefaultEpoch       = sched.MinEpoch         // bench/system.CoarseEpoch
	DefaultWarmup      = 10 * time.Second
	DefaultRequests    = 200_000
	DefaultConcurrency = 128
	// DefaultClientTimeout is bench/system's client timeout.
	DefaultClientTimeout = time.Second
	// hotShare is the share of the cluster's capacity per round that makes
	// a key hot, as in bench/system.
	hotShare = 0.005
	// maxRetries bounds a client's retries of an operation answered ERR.
	maxRetries = 8
	// maxCopyAttempts bounds an extra's requests for a copy whose VSB was
	// refused.
	maxCopyAttempts = 4
)

// Service distributions.
const (
	ServiceDeterministic = "det" // every request takes 1/Capacity: netdir bench's token bucket
	ServiceExponential   = "exp"
)

// Config is one simulated run.
type Config struct {
	Nodes    int
	Replicas int // chain length R (default min(3, Nodes))
	// RackSize is the nodes behind one rack directory (at most 32). More
	// nodes than one rack layer the directory: a rack directory per rack
	// and a Spine over them. Flat puts every node behind one directory
	// instead (its LocationLists still hold at most 32 nodes).
	RackSize int
	Flat     bool
	// Policy is the data plane's routing policy (directory.ParsePolicy).
	Policy        string
	PartitionBits uint // default: 10, or enough for 16 partitions per node
	// DirSize is each rack directory's capacity (default
	// sched.DirectorySize of its nodes); SpineSize the spine's (default
	// sched.DirectorySize of the racks). A rack directory has room for
	// both: its own keys and the spine's copies.
	DirSize, SpineSize int
	Workload           bench.Workload
	Capacity           float64 // each node's requests/s
	Service            string  // ServiceDeterministic (default) or ServiceExponential
	Link               time.Duration
	// Concurrency is the closed loop's operations in flight; with Rate > 0
	// the open loop's Poisson arrivals per second, at most Concurrency in
	// flight (more are dropped and counted).
	Concurrency int
	Rate        float64
	// A client resends a request not answered within ClientTimeout (a
	// new request, the first still queued), doubling it up to
	// ClientMaxTimeout, and gives the operation up after OpTimeout: as
	// netdir bench's clients (defaults 1 s, 4 s and 5 s).
	ClientTimeout, ClientMaxTimeout, OpTimeout time.Duration
	Round                                      time.Duration // hot-key round
	Epoch                                      time.Duration // HATS coarse epoch
	// Settle is how the coarse loop settles (default: the controller's,
	// sched.DefaultSettle).
	Settle sched.Settle
	// RackCopyHeadroom sizes a spread key's LocationList in each remote
	// rack by its load there: sched.RackCopies within this headroom
	// (default sched.RackCopyHeadroom). WholeRacks lists every node of
	// the rack instead, as the spine did before: a copy and a VSB per
	// commit at every node.
	RackCopyHeadroom float64
	WholeRacks       bool
	// PromoteMin is the requests per round that make a key hot in a rack
	// directory and in the spine; default as bench/system, 0.5% of a
	// rack's capacity per round.
	PromoteMin uint64
	Warmup     time.Duration // virtual time before measuring
	Requests   int64         // operations measured after the warm-up, answered or failed
	Seed       uint64
	// Progress, if set, is called about every tenth of the requests.
	Progress func(done, total int64)
	// CheckReads checks every read as its client gets it: the version it
	// returns (an extra's or remote rack's copy if served unverified, else
	// the committed one) must be no older than any write acknowledged, or
	// any read answered, before it was sent. Run fails on a read that is
	// older. Off by default: it costs a lookup per read.
	CheckReads bool
	// For tests: noSpinePort is a mutant whose rack directories do not
	// know the spine's port, so clear its FlagVerify as a client's;
	// copyDelay holds every copy of a commit back (a congested extra), so
	// that copies lag acknowledged writes as they can in a real cluster.
	noSpinePort bool
	copyDelay   time.Duration
}

func (c *Config) fill() error {
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Nodes < 1 || c.Nodes > 4095 {
		return fmt.Errorf("sim: %d nodes: want 1..4095", c.Nodes)
	}
	if c.Replicas == 0 {
		c.Replicas = min(layout.DefaultReplicas, c.Nodes)
	}
	if c.RackSize == 0 {
		c.RackSize = DefaultRackSize
	}
	if c.RackSize < 1 || c.RackSize > directory.MaxLocations {
		return fmt.Errorf("sim: rack size %d: want 1..%d", c.RackSize, directory.MaxLocations)
	}
	if c.Flat || c.Nodes <= c.RackSize {
		c.RackSize = c.Nodes
	}
	if c.Replicas < 1 || c.Replicas > min(c.RackSize, layout.MaxReplicas) {
		return fmt.Errorf("sim: %d replicas for racks of %d nodes", c.Replicas, c.RackSize)
	}
	if c.Policy == "" {
		c.Policy = "netdir"
	}
	if c.PartitionBits == 0 {
		c.PartitionBits = layout.DefaultPartitionBits
		for 1<<c.PartitionBits < 16*c.Nodes {
			c.PartitionBits++
		}
	}
	if c.PartitionBits > 20 {
		return fmt.Errorf("sim: %d partition bits: at most 20", c.PartitionBits)
	}
	if c.DirSize == 0 {
		c.DirSize = sched.DirectorySize(c.RackSize, 1<<20)
	}
	if c.SpineSize == 0 {
		c.SpineSize = sched.DirectorySize((c.Nodes+c.RackSize-1)/c.RackSize, directory.MaxRacks*64)
	}
	if c.DirSize < 1 || c.SpineSize < 1 {
		return errors.New("sim: directory sizes must be positive")
	}
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.Capacity <= 0 || math.IsNaN(c.Capacity) || math.IsInf(c.Capacity, 0) {
		return fmt.Errorf("sim: capacity %g: want a positive rate", c.Capacity)
	}
	switch c.Service {
	case "":
		c.Service = ServiceDeterministic
	case ServiceDeterministic, ServiceExponential:
	default:
		return fmt.Errorf("sim: service %q: want %s or %s", c.Service, ServiceDeterministic, ServiceExponential)
	}
	if c.Link == 0 {
		c.Link = DefaultLink
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Round == 0 {
		c.Round = DefaultRound
	}
	if c.ClientTimeout == 0 {
		c.ClientTimeout = DefaultClientTimeout
	}
	if c.ClientMaxTimeout == 0 {
		c.ClientMaxTimeout = 4 * c.ClientTimeout
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 5 * c.ClientTimeout
	}
	if c.ClientTimeout < 0 || c.ClientMaxTimeout < c.ClientTimeout || c.OpTimeout < 0 {
		return errors.New("sim: client timeouts must be positive, the most at least the first")
	}
	if c.Epoch == 0 {
		c.Epoch = DefaultEpoch
	}
	if c.Settle == (sched.Settle{}) {
		c.Settle = sched.DefaultSettle
	}
	if st := c.Settle; !(st.Tolerance >= 0 && st.Sigmas >= 0 && st.Damping >= 0 && st.Damping <= 1 && st.MinChange >= 0) {
		return fmt.Errorf("sim: settle %+v: want band, sigmas and min change ≥ 0, damping in [0, 1]", st)
	}
	if c.RackCopyHeadroom == 0 {
		c.RackCopyHeadroom = sched.RackCopyHeadroom
	}
	if h := c.RackCopyHeadroom; !(h > 0) || math.IsInf(h, 0) {
		return fmt.Errorf("sim: rack copy headroom %g: want > 0", h)
	}
	if c.Epoch < sched.MinEpoch || c.Epoch > sched.MaxEpoch {
		return fmt.Errorf("sim: epoch %v: want %v..%v", c.Epoch, sched.MinEpoch, sched.MaxEpoch)
	}
	if c.Warmup == 0 {
		c.Warmup = DefaultWarmup
	}
	if c.Requests == 0 {
		c.Requests = DefaultRequests
	}
	if c.Link < 0 || c.Concurrency < 1 || c.Rate < 0 || math.IsNaN(c.Rate) || c.Round <= 0 || c.Warmup < 0 || c.Requests < 1 {
		return errors.New("sim: link, concurrency, rate, round, warm-up and requests must be positive")
	}
	if c.PromoteMin == 0 {
		c.PromoteMin = uint64(max(2, math.Ceil(hotShare*float64(c.RackSize)*c.Capacity*c.Round.Seconds())))
	}
	return nil
}

// request is one send of an operation, from its client to its reply: an
// operation resent after a timeout has several. Two cache lines, the
// header and the rest: a request is touched at every event of its way,
// thousands of others between, so each line is a cache miss.
type request struct {
	hdr     [wire.HeaderLen]byte
	key     int64  // the key's index (its name is the workload's for it)
	issued  uint64 // when the operation was first issued
	version uint64 // a write's version, once the head assigned it
	minVer  uint64 // with CheckReads, the oldest version a read may return
	rack    int32  // the rack the spine sent it to
	client  int32
	op      int32 // its operation: an operation resent after a timeout has several requests
	kind    bench.OpKind
	retries uint8
	// A write queued at its node: the next write of its key that waits
	// to be served with it (-1: none), and on a group's first write, the
	// group's size so far (pushWrite).
	next  int32
	group uint8
	_     [11]byte // to 128 bytes, so that a request starts a cache line
}

// openGroup is the group of a key's writes waiting at its head that a
// write arriving now joins: its first and last (first < 0: none, the
// next write heads a group of its own).
type openGroup struct{ first, last int32 }

// operation is what a client waits for: its live request (the latest it
// sent; -1 once given up) and its current timeout. sends counts the sends
// of the operations this slot has held, so that a deadline of an earlier
// send is stale: a timeout tells so from the operation alone, without
// the request (a cache miss for each of the many answered in time).
type operation struct {
	live    int32
	sends   uint32
	timeout uint64
}

// timeouts holds the deadlines of requests sent with one timeout value:
// sends come in time order, so a FIFO keeps them in deadline order (to a
// link's latency, as a reply's next request is sent a link ahead).
type timeouts struct {
	d uint64
	queue[deadline]
}

type deadline struct {
	t     uint64
	op    int32
	sends uint32 // the operation's sends when it was sent
}

// node is a storage node: one server behind two FIFO queues, served as
// storagenode's admission takes them: a write first (a write to a hot key
// waits no longer than it must while its extras cannot serve), except
// that after a write, a waiting read goes next. Writes first without that
// exception starved a write-hot head's reads: with groups, its key's next
// write nearly always waited when a service ended, so the reads queued
// there (thousands, at 1024 nodes) hardly left, counted in flight to its
// rack by the spine (docs/architecture.md, "A read between two writes").
// A write in the queue stands for its group: the writes of its key that
// arrived after it join it, served with it (pushWrite).
type node struct {
	id wire.NodeID
	// wrote: the last request served was a write (its group), so a read
	// waiting goes next.
	wrote   bool
	rack    int
	writes  queue[int32]
	reads   queue[int32]
	serving int32 // the request in service, -1 if idle
	// grouped is the writes waiting or in service behind the first of
	// their group (which alone is in writes, or serving).
	grouped int32
	// Counts since the last epoch, per chain position, for HATS's C, and
	// the run's measured requests.
	byPos    []uint64
	measured uint64
	latency  time.Duration // mean service time, for HATS's T
	// top counts the keys the node served that the directory missed. Only
	// the controller's round reads it, so the counts wait in Sim.misses
	// and are added just before (flushMisses).
	top *sched.TopK
}

// backlog is the requests arrived and queued, or in service: the load a
// reply reports (served reads it after arrive).
func (n *node) backlog() int {
	b := n.writes.len() + n.reads.len() + int(n.grouped)
	if n.serving >= 0 {
		b++
	}
	return b
}

// keyState is one key's KeyHash (zero until computed), its chain head's
// latest version and its committed one: together, so that a request
// touches one cache line of them (the keys far outnumber the caches).
type keyState struct {
	hash               wire.KeyHash
	version, committed uint64
}

// linState is what CheckReads knows of a key: the newest version a
// client got as a write's acknowledgement, and as a read's answer.
type linState struct{ acked, seen uint64 }

// holdKey names the copy of key held by node.
type holdKey struct {
	key  int64
	node wire.NodeID
}

// spinePort is the rack directories' ingress port for requests from the
// spine (directory.PortSpine); a single directory takes them on it too,
// as a client port.
const spinePort = 0

// Sim is one run in progress.
type Sim struct {
	cfg    Config
	rng    *rand.Rand
	now    uint64
	ev     events
	stream *bench.Stream
	src    *bench.Source
	// ahead is the stream's next operation (kind and key index), drawn
	// one issue early so that its key's state is prefetched (its cache
	// miss then overlaps other events), and drawn the one after, all but
	// its zipf rank's table lookup (whose line is prefetched); not with
	// workload D (noAhead), whose reads of the latest key depend on the
	// inserts acknowledged by then.
	ahead             bench.Op
	drawn             bench.Drawn
	hasAhead, noAhead bool

	lay    *layout.Map
	chains [][]wire.NodeID
	// flatChains is chains in one array, Replicas a partition: a
	// request's chain is one cache miss, not a slice header's and its
	// array's.
	flatChains []wire.NodeID
	racks      []*directory.Directory
	spine      *directory.Spine
	nodes      []node // by id − 1
	ids        []wire.NodeID
	arriving   arrivals // requests on their way to their nodes

	// What the storage nodes hold, by key index (keys), and whether the
	// key is promoted in its home rack's directory (the head refuses
	// unstamped writes then).
	keys     []keyState
	promoted []bool
	keyOf    map[wire.KeyHash]int64 // the keys ever promoted
	vsbs     []vsbMsg               // VSBs in flight, by event.a
	nearBuf  []wire.NodeID          // announce's copies in the tail's rack
	farBuf   []wire.NodeID          // and in other racks
	copyBuf  []wire.NodeID          // announce's list of copies
	retryBuf []wire.NodeID          // deliverVSBs' refused copies, asked for again
	topKey   []byte                 // a key as a node's top-k counts it (appendTopKey)
	freeVSBs []int32
	// misses is what the nodes served that the directory missed since the
	// last round, in order (missOf), for their top-k; sorted is its copy
	// grouped by node, and perNode the counting sort's counts.
	misses, sorted []uint64
	perNode        []int

	// open is each key's group of writes waiting at its head, by key
	// index (as long as the highest key written).
	open   []openGroup
	ackBuf []int32 // serveGroup's accepted writes before the last

	reqs     []request
	free     []int32
	ops      []operation
	freeOps  []int32
	timeouts []timeouts
	// The list of the earliest first deadline, and that deadline.
	nextTimeout  int
	nextDeadline uint64
	ctl          *control
	lat          *hdrhistogram.Histogram
	stats        runStats
	// With CheckReads: per key, and the version of each copy by the VSB
	// that announced it; the first read found too old.
	lin   []linState
	holds map[holdKey]uint64
	stale error

	// vsbRun's senders and verdicts of a run of VSBs.
	vsbFrom     []directory.VSBSender
	vsbVerdicts []directory.Verdict
}

type runStats struct {
	measuring     bool
	start, end    uint64
	done, errors  int64
	dropped       int64
	issued        int64
	retried       int64
	verified      int64
	timedOut      int64
	nextProgress  int64
	hitsStart     uint64
	missesStart   uint64
	switchedStart uint64

	// Versions made of two writes or more (write groups), and the writes
	// they absorbed (all but each group's last), as storagenode counts.
	writeGroups, groupedWrites int64
}

// New builds a run: its layout, data planes, nodes and clients.
func New(cfg Config) (*Sim, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	pol, err := directory.ParsePolicy(cfg.Policy)
	if err != nil {
		return nil, err
	}
	src, err := cfg.Workload.Build()
	if err != nil {
		return nil, err
	}
	s := &Sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6e65746469720a)), src: src,
		stream: src.Stream(0), noAhead: src.Workload().Name == "D", keyOf: map[wire.KeyHash]int64{}, lat: bench.NewHistogram(),
		nextTimeout: -1, nextDeadline: math.MaxUint64, ev: newEvents()}
	if err := s.buildLayout(); err != nil {
		return nil, err
	}
	nracks := (cfg.Nodes + cfg.RackSize - 1) / cfg.RackSize
	for range nracks {
		// Room for the rack's own hot keys and the spine's copies.
		d, err := directory.New(directory.Config{PartitionBits: cfg.PartitionBits, Slots: cfg.DirSize + cfg.SpineSize,
			MaxNodes: cfg.Nodes + 1, Policy: pol, Window: sched.FineWindow(s.serviceMean())})
		if err != nil {
			return nil, err
		}
		if err := s.installLayout(d); err != nil {
			return nil, err
		}
		for _, id := range s.ids {
			d.SetPort(port(id), directory.PortStorage)
		}
		if nracks > 1 && !cfg.noSpinePort {
			d.SetPort(spinePort, directory.PortSpine)
		}
		s.racks = append(s.racks, d)
	}
	if nracks > 1 {
		if s.spine, err = directory.NewSpine(nracks, cfg.PartitionBits); err != nil {
			return nil, err
		}
		for p, ch := range s.chains {
			if err := s.spine.SetHome(uint32(p), s.rackOf(ch[0])); err != nil {
				return nil, err
			}
		}
	}
	s.nodes = make([]node, cfg.Nodes)
	for i, id := range s.ids {
		s.nodes[i] = node{id: id, rack: s.rackOf(id), serving: -1, byPos: make([]uint64, cfg.Replicas),
			latency: s.serviceMean(), top: sched.NewTopK(64)}
	}
	s.perNode = make([]int, cfg.Nodes)
	keys := src.Workload().Keys
	s.keys = make([]keyState, keys)
	s.promoted = make([]bool, keys)
	s.ctl = newControl(s)
	if cfg.CheckReads {
		s.holds = map[holdKey]uint64{}
	}
	return s, nil
}

// buildLayout places partitions on chains: layout's ring over all nodes
// with one rack, else each partition in one rack (p mod racks), on the
// ring of that rack's nodes, as explicit chains of the layout.
func (s *Sim) buildLayout() error {
	c := layout.Config{Epoch: 1, PartitionBits: s.cfg.PartitionBits, Replicas: s.cfg.Replicas}
	for i := range s.cfg.Nodes {
		id := wire.NodeID(i + 1)
		s.ids = append(s.ids, id)
		c.Nodes = append(c.Nodes, layout.Node{ID: id, Addr: fmt.Sprintf("10.%d.%d.1:%d", i>>8, i&0xff, wire.ServicePort)})
	}
	if nracks := (s.cfg.Nodes + s.cfg.RackSize - 1) / s.cfg.RackSize; nracks > 1 {
		c.Chains = map[uint32][]wire.NodeID{}
		for p := range 1 << s.cfg.PartitionBits {
			members := s.rackNodes(p % nracks)
			ch := make([]wire.NodeID, s.cfg.Replicas)
			for i := range ch {
				ch[i] = members[(p/nracks+i)%len(members)]
			}
			c.Chains[uint32(p)] = ch
		}
	}
	m, err := layout.New(c)
	if err != nil {
		return err
	}
	s.lay, s.chains = m, m.Chains()
	for p, ch := range s.chains {
		if len(ch) != s.cfg.Replicas {
			return fmt.Errorf("sim: partition %d's chain has %d nodes, want %d", p, len(ch), s.cfg.Replicas)
		}
		s.flatChains = append(s.flatChains, ch...)
	}
	return nil
}

// chain is partition p's chain.
func (s *Sim) chain(p uint32) []wire.NodeID {
	r := s.cfg.Replicas
	return s.flatChains[int(p)*r : int(p+1)*r]
}

func (s *Sim) rackOf(id wire.NodeID) int { return (int(id) - 1) / s.cfg.RackSize }

// inRack is rackOf(id) == r for rack r's first node id first, without a
// division: for the runs of a rack's nodes in a commit's copies.
func (s *Sim) inRack(id wire.NodeID, first int) bool {
	return uint(int(id)-first) < uint(s.cfg.RackSize)
}

func (s *Sim) rackNodes(r int) []wire.NodeID {
	lo := r * s.cfg.RackSize
	return s.ids[lo:min(lo+s.cfg.RackSize, len(s.ids))]
}

// port is a node's ingress port on its rack's data plane.
func port(id wire.NodeID) uint32 { return uint32(id) }

func (s *Sim) serviceMean() time.Duration {
	return time.Duration(float64(time.Second) / s.cfg.Capacity)
}

func (s *Sim) node(id wire.NodeID) *node { return &s.nodes[id-1] }

// hash is key i's KeyHash, computed once.
func (s *Sim) hash(i int64) wire.KeyHash {
	if i >= int64(len(s.keys)) {
		n := max(i+1, int64(len(s.keys))*5/4)
		s.keys = slices.Grow(s.keys, int(n)-len(s.keys))[:n]
		s.promoted = slices.Grow(s.promoted, int(n)-len(s.promoted))[:n]
	}
	h := &s.keys[i].hash
	if *h == (wire.KeyHash{}) {
		var name [32]byte // the name on the stack, not two allocations a key
		*h = wire.HashKey(s.src.AppendKey(name[:0], i))
	}
	return *h
}

func (s *Sim) at(d uint64, e event) { s.ev.after(s.now, d, e) }

func (s *Sim) link() uint64 { return uint64(s.cfg.Link) }

// Run simulates until the measured requests are done and returns the run's
// row in netdir bench's shape.
func (s *Sim) Run() (bench.Run, error) {
	if s.cfg.Rate > 0 {
		s.ev.rarely(s.now, 0, event{kind: evIssue, a: -1})
	} else {
		for c := range s.cfg.Concurrency {
			s.ev.rarely(s.now, 0, event{kind: evIssue, a: int32(c)})
		}
	}
	s.ev.rarely(s.now, uint64(s.cfg.Round), event{kind: evRound})
	s.ev.rarely(s.now, uint64(s.cfg.Epoch), event{kind: evEpoch})
	warm := uint64(s.cfg.Warmup)
	for {
		// Failed operations count: a run whose operations all time out
		// (an overloaded open loop with short client timeouts) ends too,
		// where counting only the answered ones ran until memory ran out.
		// Checked after a timeout as after an event: a run whose last
		// operation is given up ends then, not at whichever event is next.
		if s.stats.measuring && s.stats.done+s.stats.errors >= s.cfg.Requests {
			s.stats.end = s.now
			return s.result(), nil
		}
		src, t, ok := s.ev.earliest()
		if !ok {
			break
		}
		if s.nextDeadline <= t && s.expire(t) {
			continue
		}
		e := s.ev.take(src)
		s.now = e.t
		if src != heapHead {
			s.warmNext(&s.ev.lanes[src])
		}
		if !s.stats.measuring && s.now >= warm {
			s.startMeasuring()
		}
		switch e.kind {
		case evIssue:
			s.issue(e.a, s.now)
		case evAtPlane:
			s.atPlane(e.a)
		case evAtNode:
			s.atNode(e.a)
		case evServed:
			s.served(wire.NodeID(e.a))
		case evCommit:
			s.commit(e.a)
		case evReplyAtPlane:
			s.replyAtPlane(e.a)
		case evVSB:
			s.deliverVSBs(e)
		case evVerify:
			s.verifyAtTail(e.a)
		case evRound:
			s.flushMisses()
			if err := s.ctl.round(); err != nil {
				return bench.Run{}, err
			}
			s.ev.rarely(s.now, uint64(s.cfg.Round), event{kind: evRound})
		case evEpoch:
			if err := s.ctl.epoch(); err != nil {
				return bench.Run{}, err
			}
			s.ev.rarely(s.now, uint64(s.cfg.Epoch), event{kind: evEpoch})
		}
		if s.stale != nil {
			return bench.Run{}, s.stale
		}
	}
	return bench.Run{}, errors.New("sim: no events left before the requests were done")
}

// warmNext prefetches what the next events of lane l touch first, so
// that their cache misses overlap the event in hand instead of stalling
// the loop one after the other (at 1024 nodes the requests, nodes and
// operations are megabytes, touched at random). The lane's first event is
// likely the next handled: warm goes deeper the nearer an event is.
func (s *Sim) warmNext(l *lane) {
	for i := min(l.len(), 3) - 1; i >= 0; i-- {
		s.warm(l.at(i), 2-i)
	}
}

// warm prefetches, at depth 0, the request or node event e touches first;
// deeper, what that leads to (read from the lines prefetched one event
// before): the request in service and then its key's state and chain, a
// request's home rack directory (its partition entry, index cell and
// sketch counters), a request's node, a reply's operation, a commit's key
// state.
func (s *Sim) warm(e *event, depth int) {
	switch e.kind {
	case evServed:
		n := &s.nodes[e.a-1]
		switch {
		case depth == 0 || n.serving < 0:
			prefetchPair(n) // serving and the queues are in its second line
		case depth == 1:
			prefetchPair(&s.reqs[n.serving])
		default:
			r := &s.reqs[n.serving]
			prefetchAt(&s.keys[r.key])
			prefetchAt(&s.chain(wire.Frame(r.hdr[:]).KeyHash().Partition(s.cfg.PartitionBits))[0])
		}
	case evAtPlane, evVerify, evAtNode, evCommit, evReplyAtPlane:
		r := &s.reqs[e.a]
		switch {
		case depth == 0:
			prefetchPair(r) // the header, then key, op and rack
		case e.kind == evAtPlane && depth == 1:
			// The key's home rack directory (the spine sends most
			// requests home; buildLayout homes partition p in rack p
			// mod racks): what its routing reads first.
			h := wire.Frame(r.hdr[:]).KeyHash()
			s.racks[int(h.Partition(s.cfg.PartitionBits))%len(s.racks)].Prefetch(&h)
		case e.kind == evAtPlane || e.kind == evVerify:
			// Nothing more: a routing's lines were asked for at depth 1.
		case e.kind == evAtNode:
			prefetchPair(s.node(wire.Frame(r.hdr[:]).Node()))
		case e.kind == evCommit:
			prefetchAt(&s.keys[r.key])
		default:
			prefetchAt(&s.ops[r.op])
		}
	}
}

// prefetchAt prefetches the cache line at p.
func prefetchAt[T any](p *T) { prefetch.Line(uintptr(unsafe.Pointer(p))) }

// prefetchPair prefetches the cache line at p and the next: a request
// (its header, then the rest) or a node's first 128 bytes.
func prefetchPair[T any](p *T) { prefetch.Pair(uintptr(unsafe.Pointer(p))) }

func (s *Sim) startMeasuring() {
	s.stats.measuring = true
	s.stats.start = s.now
	s.stats.nextProgress = s.cfg.Requests / 10
	for i := range s.nodes {
		s.nodes[i].measured = 0
	}
	c := s.dirCounters()
	s.stats.hitsStart, s.stats.missesStart, s.stats.switchedStart = c.Hits, c.Misses, c.Switched
}

func (s *Sim) dirCounters() directory.Counters {
	var c directory.Counters
	for _, d := range s.racks {
		x := d.Counters()
		c.Hits += x.Hits
		c.Misses += x.Misses
		c.Switched += x.Switched
	}
	return c
}

// newRequest takes a free request slot.
func (s *Sim) newRequest() int32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	s.reqs = append(s.reqs, request{})
	return int32(len(s.reqs) - 1)
}

// issue draws client c's next operation at client time t (c < 0: an
// open-loop arrival, which also schedules the next one) and sends it to
// the data plane.
func (s *Sim) issue(c int32, t uint64) {
	if c < 0 {
		s.ev.rarely(s.now, uint64(s.rng.ExpFloat64()/s.cfg.Rate*1e9), event{kind: evIssue, a: -1}) // a random delay
		if len(s.ops)-len(s.freeOps) >= s.cfg.Concurrency {
			if s.stats.measuring {
				s.stats.dropped++
			}
			return
		}
	}
	op := s.nextOp()
	i := s.newRequest()
	r := &s.reqs[i]
	r.kind, r.key, r.issued, r.client, r.retries = op.Kind, op.Index, t, c, 0
	r.op = s.newOp(i)
	s.send(i, t)
}

// nextOp is the stream's next operation (its kind and key index only).
// Without noAhead it is drawn two issues early: the zipf table's line for
// its rank is prefetched then, its key's state one issue early.
func (s *Sim) nextOp() bench.Op {
	if s.noAhead {
		return kindAndKey(s.stream.Draw())
	}
	if !s.hasAhead {
		s.ahead, s.hasAhead = kindAndKey(s.stream.Draw()), true
		s.stream.Prepare(&s.drawn)
	}
	op := s.ahead
	s.ahead = kindAndKey(s.stream.Complete(&s.drawn))
	s.stream.Prepare(&s.drawn)
	if k := s.ahead.Index; k < int64(len(s.keys)) {
		prefetchAt(&s.keys[k])
	}
	return op
}

func kindAndKey(op bench.Op) bench.Op { return bench.Op{Kind: op.Kind, Index: op.Index} }

func (s *Sim) newOp(live int32) int32 {
	if n := len(s.freeOps); n > 0 {
		i := s.freeOps[n-1]
		s.freeOps = s.freeOps[:n-1]
		s.ops[i].live, s.ops[i].timeout = live, uint64(s.cfg.ClientTimeout) // sends go on counting
		return i
	}
	s.ops = append(s.ops, operation{live: live, timeout: uint64(s.cfg.ClientTimeout)})
	return int32(len(s.ops) - 1)
}

// findNextTimeout notes the timeout list whose first deadline is the
// earliest (the first such list on ties), and that deadline; none:
// math.MaxUint64. Only a pop, or a push to an empty list, changes them.
func (s *Sim) findNextTimeout() {
	s.nextTimeout, s.nextDeadline = -1, math.MaxUint64
	for i := range s.timeouts {
		if tq := &s.timeouts[i]; tq.len() > 0 && tq.first().t < s.nextDeadline {
			s.nextTimeout, s.nextDeadline = i, tq.first().t
		}
	}
}

// popTimeout removes the earliest first deadline.
func (s *Sim) popTimeout() deadline {
	d := s.timeouts[s.nextTimeout].pop()
	s.findNextTimeout()
	return d
}

// armTimeout notes operation op's deadline for its send at time t.
func (s *Sim) armTimeout(op int32, t uint64) {
	o := &s.ops[op]
	o.sends++
	d := o.timeout
	j := 0
	for j < len(s.timeouts) && s.timeouts[j].d != d {
		j++
	}
	if j == len(s.timeouts) {
		s.timeouts = append(s.timeouts, timeouts{d: d})
		j = len(s.timeouts) - 1
	}
	tq := &s.timeouts[j]
	tq.push(deadline{t + d, op, o.sends})
	if tq.len() == 1 && (t+d < s.nextDeadline || t+d == s.nextDeadline && j < s.nextTimeout) {
		s.nextTimeout, s.nextDeadline = j, t+d
	}
}

// timeout: a request's deadline passed. If it is still its operation's
// live request, the client gives the operation up (past OpTimeout) or
// sends it again as a new request with twice the timeout; the first stays
// queued where it is, and its reply will be dropped. It says whether
// the deadline was live.
func (s *Sim) timeout(d deadline) bool {
	o := &s.ops[d.op]
	if o.live < 0 || o.sends != d.sends {
		return false // answered, resent or given up since
	}
	live := o.live
	r := &s.reqs[live]
	if s.now-r.issued >= uint64(s.cfg.OpTimeout) {
		o.live = -1
		s.endOp(r, false, s.now)
		return true
	}
	if s.stats.measuring {
		s.stats.timedOut++
	}
	o.timeout = min(2*o.timeout, uint64(s.cfg.ClientMaxTimeout))
	j := s.newRequest()
	r = &s.reqs[live] // newRequest may have moved the slab
	n := &s.reqs[j]
	n.kind, n.key, n.issued, n.client, n.retries, n.op = r.kind, r.key, r.issued, r.client, r.retries, r.op
	o.live = j
	s.send(j, s.now)
	return true
}

// expire passes the deadlines due by t, the earliest event's time, up to
// and including the first live one; true if there was one. The stale
// ones (answered or resent since: nearly all) schedule nothing, so the
// earliest event stays the one found; a live one's resend or next
// operation may come before it.
func (s *Sim) expire(t uint64) bool {
	for s.nextDeadline <= t {
		d := s.popTimeout()
		s.now = max(s.now, d.t)
		if s.timeout(d) {
			return true
		}
	}
	return false
}

// send encodes request i's header afresh (a retry is a new request id)
// and sends it from its client at time t (now or a link ahead) to the data
// plane.
func (s *Sim) send(i int32, t uint64) {
	r := &s.reqs[i]
	h := wire.Header{Op: wire.OpGet, ReqID: s.rng.Uint64(), KeyHash: s.hash(r.key)}
	switch r.kind {
	case bench.OpUpdate, bench.OpInsert, bench.OpReadModifyWrite:
		h.Op = wire.OpPut
	}
	_ = h.EncodeHeader(r.hdr[:]) // the buffer is HeaderLen long
	r.version = 0
	if s.cfg.CheckReads && h.Op == wire.OpGet {
		l := s.linOf(r.key)
		r.minVer = max(l.acked, l.seen)
	}
	s.stats.issued++
	s.armTimeout(r.op, t)
	s.at(t-s.now+s.link(), event{kind: evAtPlane, a: i})
}

// atPlane routes a request: the spine picks a rack, the rack's directory a
// node.
func (s *Sim) atPlane(i int32) {
	r := &s.reqs[i]
	r.rack = 0
	if s.spine != nil {
		r.rack = int32(s.spine.Request(r.hdr[:]))
	}
	v := s.racks[r.rack].Process(r.hdr[:], spinePort, s.now)
	if v.Action != directory.Forward {
		if s.ops[r.op].live == i {
			s.finish(i, false, s.now)
		} else {
			s.free = append(s.free, i)
		}
		return
	}
	f := wire.Frame(r.hdr[:])
	s.route(i, f.Op() != wire.OpGet, int32(f.Node())-1)
}

// atNode: request i's arrival at its node, at an event of its own, starts
// the node's service if it has none.
func (s *Sim) atNode(i int32) {
	f := wire.Frame(s.reqs[i].hdr[:])
	n := s.node(f.Node())
	switch {
	case !s.arriving.everyOne:
		s.arrive()
	case f.Op() == wire.OpGet:
		n.reads.push(i)
	default:
		s.pushWrite(n, i)
	}
	if n.serving < 0 {
		s.startService(n)
	}
}

// pushWrite queues write i, arrived at node n, its key's head: it joins
// the group of its key's writes waiting there, up to wire.MaxWriteGroup, or
// heads a group of its own in the writes queue. A group is closed when
// its first write starts service (startService): the writes that arrive
// after wait for the next group. Groups formed this way as writes arrive
// are those that taking, at each start of service, the waiting writes of
// its key (at most wire.MaxWriteGroup, in arrival order) would form, without a
// scan of the queue.
func (s *Sim) pushWrite(n *node, i int32) {
	r := &s.reqs[i]
	r.next = -1
	k := r.key
	if k >= int64(len(s.open)) {
		for range max(k+1, int64(len(s.keys))) - int64(len(s.open)) {
			s.open = append(s.open, openGroup{-1, -1})
		}
	}
	g := &s.open[k]
	if g.first >= 0 {
		if first := &s.reqs[g.first]; first.group < wire.MaxWriteGroup {
			first.group++
			s.reqs[g.last].next = i
			g.last = i
			n.grouped++
			return
		}
	}
	r.group = 1
	*g = openGroup{i, i}
	n.writes.push(i)
}

// startService takes the next request: a write (and its group) before
// a read, unless the last was a write and a read waits.
func (s *Sim) startService(n *node) {
	n.wrote = n.writes.len() > 0 && (n.reads.len() == 0 || !n.wrote)
	if n.wrote {
		i := n.writes.pop()
		n.serving = i
		if g := &s.open[s.reqs[i].key]; g.first == i {
			g.first = -1 // closed: later writes wait for the next group
		}
	} else {
		n.serving = n.reads.pop()
	}
	d := float64(s.serviceMean())
	if s.cfg.Service == ServiceExponential {
		d *= s.rng.ExpFloat64()
	}
	s.at(uint64(max(d, 1)), event{kind: evServed, a: int32(n.id)})
}

// served completes the request in service at node id: a read is
// answered; a write, or a group of writes, is applied at the head by the
// head's rules and sent down the chain.
func (s *Sim) served(id wire.NodeID) {
	s.arrive()
	n := s.node(id)
	i := n.serving
	n.serving = -1
	if n.writes.len()+n.reads.len() > 0 {
		s.startService(n)
	} else {
		s.await(n)
	}
	r := &s.reqs[i]
	f := wire.Frame(r.hdr[:])
	h := f.KeyHash()
	p := h.Partition(s.cfg.PartitionBits)
	ch := s.chain(p)
	pos := slices.Index(ch, id)
	if f.Op() != wire.OpGet && r.next >= 0 {
		n.grouped -= int32(r.group) - 1 // the group's others leave with it
	}
	s.count(n, i, pos, uint16(min(n.backlog(), math.MaxUint16)))
	if f.Op() == wire.OpGet {
		f.SetOp(wire.OpGetReply)
		if f.Flags()&wire.FlagVerify != 0 && pos < 0 {
			// An extra whose copy may be stale asks the key's tail which
			// version is committed (issue 18): a version query, a node op
			// that no node's token bucket charges.
			if s.stats.measuring {
				s.stats.verified++
			}
			s.at(s.toTail(id, p), event{kind: evVerify, a: i})
			return
		}
		v := s.keys[r.key].committed
		if pos < 0 && s.cfg.CheckReads {
			v = s.holds[holdKey{r.key, id}] // served from its copy, unasked
		}
		f.SetStamp(v)
		s.at(s.link(), event{kind: evReplyAtPlane, a: i})
		return
	}
	if r.next >= 0 {
		s.serveGroup(n, i, pos, len(ch))
		return
	}
	if s.applyWrite(i) {
		s.at(uint64(len(ch)-1)*s.link(), event{kind: evCommit, a: i})
	}
}

// applyWrite applies write i at its key's head by the head's rules: a
// stamp at or below the latest version is stale, an unstamped write of a
// promoted key is told to retry, each answered at once; else it takes
// its version (its stamp, or the latest + 1), which it says.
func (s *Sim) applyWrite(i int32) bool {
	r := &s.reqs[i]
	f := wire.Frame(r.hdr[:])
	ks := &s.keys[r.key]
	if f.Flags()&wire.FlagStamped != 0 {
		v := wire.StampVersion(f.Stamp())
		if v <= ks.version {
			s.replyErr(i, wire.CodeStaleVersion)
			return false
		}
		ks.version = v
	} else {
		if s.promoted[r.key] {
			s.replyErr(i, wire.CodeRetry)
			return false
		}
		ks.version++
	}
	r.version = ks.version
	return true
}

// serveGroup applies the group of writes headed by request i, served
// together at node n (chain position pos of a chain of chainLen): in
// arrival order, each by the head's rules (applyWrite: "the latest" is
// then the version the group's last accepted write took), the refused
// answered at once. The accepted make one version, the last's: it alone
// goes down the chain, answered by the tail at its commit; the head
// answers each other accepted write with that version when the tail's
// ack is back, chainLen − 1 links after the commit, from its own address
// (a chain of one: at once).
func (s *Sim) serveGroup(n *node, i int32, pos, chainLen int) {
	load := uint16(min(n.backlog(), math.MaxUint16))
	last := int32(-1)
	acked := s.ackBuf[:0]
	for j := i; j >= 0; j = s.reqs[j].next {
		if j != i {
			s.count(n, j, pos, load) // the group's first was counted in served
		}
		if s.applyWrite(j) {
			if last >= 0 {
				acked = append(acked, last)
			}
			last = j
		}
	}
	s.ackBuf = acked
	if last < 0 {
		return
	}
	if s.stats.measuring && len(acked) > 0 {
		s.stats.writeGroups++
		s.stats.groupedWrites += int64(len(acked))
		n.measured -= uint64(len(acked)) // one service: the node's load counts it once, as netdir bench does
	}
	v := s.reqs[last].version
	s.at(uint64(chainLen-1)*s.link(), event{kind: evCommit, a: last})
	for _, j := range acked {
		r := &s.reqs[j]
		r.version = v
		f := wire.Frame(r.hdr[:])
		f.SetOp(wire.OpPutReply)
		f.SetCode(wire.CodeOK)
		f.SetStamp(v)
		s.at(uint64(2*chainLen-1)*s.link(), event{kind: evReplyAtPlane, a: j})
	}
}

// count counts request j, served at node n (chain position pos, alone or
// in a group), as served: by position, as a miss of the directory, as
// measured; its reply reports load.
func (s *Sim) count(n *node, j int32, pos int, load uint16) {
	r := &s.reqs[j]
	f := wire.Frame(r.hdr[:])
	if pos >= 0 {
		n.byPos[pos]++
	}
	if f.Flags()&wire.FlagHit == 0 {
		// A node's top-k names the keys the directory does not hold: the
		// controller counts the others by their slots' hits and skips
		// cached keys among the candidates, so counting only misses
		// changes no decision except that hits no longer take top-k
		// counters from misses (and it halves the simulator's top-k time).
		s.misses = append(s.misses, missOf(n.id, r.key))
		if len(s.misses) >= maxMisses {
			s.flushMisses() // early, for memory: the counts are the same
		}
	}
	if s.stats.measuring {
		n.measured++
	}
	f.SetLoad(load)
}

// maxMisses bounds Sim.misses (8 MB) in rounds long for the run's rate:
// a thousand misses a node at 1024 nodes.
const maxMisses = 1 << 20

// missOf is a miss of key k served by node id, as Sim.misses holds it:
// the key index above the node's 12 bits (Config.Nodes < 4096).
func missOf(id wire.NodeID, k int64) uint64 { return uint64(k)<<12 | uint64(id-1) }

// flushMisses adds the misses since the last round to their nodes' top-k,
// node by node, each node's in the order served: a node's top-k then
// stays in cache for its few hundred keys, where counting each as it is
// served took several cache misses. Its counts, read at the round only,
// are the same.
func (s *Sim) flushMisses() {
	clear(s.perNode)
	for _, m := range s.misses {
		s.perNode[m&0xfff]++
	}
	at := 0
	for i, c := range s.perNode {
		s.perNode[i] = at
		at += c
	}
	s.sorted = slices.Grow(s.sorted[:0], len(s.misses))[:len(s.misses)]
	for _, m := range s.misses {
		s.sorted[s.perNode[m&0xfff]] = m
		s.perNode[m&0xfff]++
	}
	for _, m := range s.sorted {
		s.topKey = appendTopKey(s.topKey[:0], int64(m>>12))
		s.nodes[m&0xfff].top.Add(s.topKey)
	}
	s.misses = s.misses[:0]
}

// toTail is the way between node n and partition p's tail: a link to the
// data plane and one on, and through the spine from another rack.
func (s *Sim) toTail(n wire.NodeID, p uint32) uint64 {
	ch := s.chain(p)
	d := 2 * s.link()
	if s.rackOf(n) != s.rackOf(ch[len(ch)-1]) {
		d += 2 * s.link()
	}
	return d
}

// verifyAtTail: a verified read's version query is at the key's tail,
// which answers with the committed version; back at the extra, the read
// is answered with that version (the extra's copy or the tail's value).
func (s *Sim) verifyAtTail(i int32) {
	r := &s.reqs[i]
	f := wire.Frame(r.hdr[:])
	f.SetStamp(s.keys[r.key].committed)
	s.at(s.toTail(f.Node(), f.KeyHash().Partition(s.cfg.PartitionBits))+s.link(), event{kind: evReplyAtPlane, a: i})
}

func (s *Sim) replyErr(i int32, code wire.Code) {
	f := wire.Frame(s.reqs[i].hdr[:])
	f.SetOp(wire.OpErr)
	f.SetCode(code)
	s.at(s.link(), event{kind: evReplyAtPlane, a: i})
}

// commit: the write is at its tail, which answers through the data plane
// and, for a promoted key, announces the commit by VSB and has the head
// copy the version to the key's extras.
func (s *Sim) commit(i int32) {
	r := &s.reqs[i]
	f := wire.Frame(r.hdr[:])
	p := f.KeyHash().Partition(s.cfg.PartitionBits)
	ch := s.chain(p)
	tail := ch[len(ch)-1]
	k := r.key
	s.keys[k].committed = max(s.keys[k].committed, r.version)
	f.SetOp(wire.OpPutReply)
	f.SetCode(wire.CodeOK)
	f.SetStamp(r.version)
	f.SetNode(tail)
	// The tail's own load, as storagenode's reply says (arrive: a reader
	// of the tail's queues).
	s.arrive()
	f.SetLoad(uint16(min(s.node(tail).backlog(), math.MaxUint16)))
	s.at(s.link(), event{kind: evReplyAtPlane, a: i})
	if s.ctl.announced(k) {
		s.announce(k, tail, r.version)
	}
}

// announce is a promoted key's commit of version v: the tail's VSB, and
// copies to every extra (and, through a spine, every remote rack), each
// answered by a VSB.
func (s *Sim) announce(k int64, tail wire.NodeID, v uint64) {
	s.sendVSBs(s.link(), k, v, 0, tail)
	s.copyBuf = s.ctl.copies(s.copyBuf[:0], k)
	near, far := s.nearBuf[:0], s.farBuf[:0]
	first := s.rackOf(tail)*s.cfg.RackSize + 1
	for _, x := range s.copyBuf {
		if s.inRack(x, first) {
			near = append(near, x)
		} else {
			far = append(far, x)
		}
	}
	d := 2*s.link() + uint64(s.cfg.copyDelay)
	s.sendVSBs(d, k, v, 0, near...)
	s.sendVSBs(d+2*s.link(), k, v, 0, far...) // through the spine
	s.nearBuf, s.farBuf = near, far
}

// vsbMsg is the VSBs of nodes in flight together: each announces key's
// version v, its attempt'th for that copy.
type vsbMsg struct {
	key     int64
	v       uint64
	attempt int
	nodes   []wire.NodeID
}

// sendVSBs has the VSBs of nodes for key k at version v reach the data
// plane after d, in one event: VSBs sent at once with one delay arrive at
// one time, one after the other in the order sent, with no other event
// between them; one event for all of them is the same run, cheaper.
func (s *Sim) sendVSBs(d uint64, k int64, v uint64, attempt int, nodes ...wire.NodeID) {
	if len(nodes) == 0 {
		return
	}
	var i int32
	if m := len(s.freeVSBs); m > 0 {
		i = s.freeVSBs[m-1]
		s.freeVSBs = s.freeVSBs[:m-1]
	} else {
		s.vsbs = append(s.vsbs, vsbMsg{})
		i = int32(len(s.vsbs) - 1)
	}
	m := &s.vsbs[i]
	m.key, m.v, m.attempt, m.nodes = k, v, attempt, append(m.nodes[:0], nodes...)
	s.at(d, event{kind: evVSB, a: i})
}

// deliverVSBs delivers the VSBs of event e, in the order sent. The slot
// is freed after them: the refused copies' retries take another. Those
// retries are sent at once with one delay (nothing else is scheduled
// here), so they go in one event, in the order refused.
func (s *Sim) deliverVSBs(e event) {
	m := &s.vsbs[e.a]
	// One header for all: neither the spine nor a directory rewrites a VSB.
	var hdr [wire.HeaderLen]byte
	_ = (&wire.Header{Op: wire.OpVSB, KeyHash: s.hash(m.key), Stamp: m.v}).EncodeHeader(hdr[:])
	var sk *spreadKey // a key spread over racks announces to the spine
	if s.spine != nil {
		sk = s.ctl.spread[m.key]
	}
	refused := s.retryBuf[:0]
	// The nodes of a rack come one after the other: each run of them is
	// one call of its rack's directory, and rackOf(n) a division only
	// where the rack changes.
	for rest := m.nodes; len(rest) > 0; {
		rack := s.rackOf(rest[0])
		first := rack*s.cfg.RackSize + 1
		run := 1
		for run < len(rest) && s.inRack(rest[run], first) {
			run++
		}
		refused = s.vsbRun(m, sk, rest[:run], rack, hdr[:], refused)
		rest = rest[run:]
	}
	// A refused copy's node asks the head again for the committed version.
	if m.attempt < maxCopyAttempts {
		s.sendVSBs(4*s.link(), m.key, s.keys[m.key].committed, m.attempt+1, refused...)
	}
	s.retryBuf = refused
	s.freeVSBs = append(s.freeVSBs, e.a)
}

// vsbRun delivers the VSBs for m.key (header hdr) of nodes, all of rack
// rack, to its data plane, and each of those that announces the key to
// the spine (in sk: its tail or a remote rack's primary) to the spine too. It
// appends a node to refused, in the order sent, for each of the two that
// refuses its VSB (the spine first): the extra asks again for the
// committed version. The spine and a rack directory share no state, so
// the directory may take the run first.
func (s *Sim) vsbRun(m *vsbMsg, sk *spreadKey, nodes []wire.NodeID, rack int, hdr []byte, refused []wire.NodeID) []wire.NodeID {
	from := s.vsbFrom[:0]
	for _, n := range nodes {
		from = append(from, directory.VSBSender{Node: n, Port: port(n)})
	}
	verdicts := s.racks[rack].ProcessVSBs(hdr, from, s.now, s.vsbVerdicts[:0])
	s.vsbFrom, s.vsbVerdicts = from, verdicts
	for i, n := range nodes {
		if s.cfg.CheckReads {
			// The copy is at n before its VSB leaves: no later than now.
			hk := holdKey{m.key, n}
			s.holds[hk] = max(s.holds[hk], m.v)
		}
		if sk != nil && sk.announcers.has(n) && !s.spine.VSB(hdr, rack) {
			refused = append(refused, n)
		}
		if v := verdicts[i]; v.Action == directory.Drop && (v.Reason == directory.ReasonVSBPending || v.Reason == directory.ReasonVSBVersion) {
			refused = append(refused, n)
		}
	}
	return refused
}

// replyAtPlane passes a reply through the data plane that learns from it.
func (s *Sim) replyAtPlane(i int32) {
	r := &s.reqs[i]
	id := wire.Frame(r.hdr[:]).Node()
	rack := s.rackOf(id)
	s.racks[rack].Process(r.hdr[:], port(id), s.now)
	if s.spine != nil {
		s.spine.Reply(r.hdr[:], int(r.rack))
	}
	s.replyAtClient(i, s.now+s.link())
}

// replyAtClient is what request i's client does with its reply at time t,
// a link after the data plane: without an event of its own, since nothing
// else can happen at the client in between.
func (s *Sim) replyAtClient(i int32, t uint64) {
	r := &s.reqs[i]
	if s.ops[r.op].live != i {
		s.free = append(s.free, i) // a request its client resent or gave up
		return
	}
	f := wire.Frame(r.hdr[:])
	if f.Op() == wire.OpErr {
		if r.retries < maxRetries {
			r.retries++
			s.stats.retried++
			s.send(i, t)
			return
		}
		s.finish(i, false, t)
		return
	}
	if s.cfg.CheckReads {
		s.checkRead(r, f)
	}
	s.finish(i, true, t)
}

// checkRead is CheckReads at a client that got reply f to request r: a
// read no older than r.minVer; what it learns for the reads sent later.
func (s *Sim) checkRead(r *request, f wire.Frame) {
	l := s.linOf(r.key)
	v := f.Stamp()
	switch f.Op() {
	case wire.OpGetReply:
		if v < r.minVer && s.stale == nil {
			s.stale = fmt.Errorf("sim: at %v a read of key %d at node %d returned version %d, older than %d acknowledged or read before it was sent",
				time.Duration(s.now), r.key, f.Node(), v, r.minVer)
		}
		l.seen = max(l.seen, v)
	case wire.OpPutReply, wire.OpDelReply:
		l.acked = max(l.acked, v)
	}
}

// linOf is key k's linState, for CheckReads.
func (s *Sim) linOf(k int64) *linState {
	if k >= int64(len(s.lin)) {
		n := max(k+1, int64(len(s.keys)))
		s.lin = slices.Grow(s.lin, int(n)-len(s.lin))[:n]
	}
	return &s.lin[k]
}

// finish ends request i's operation at client time t with its reply (or
// its drop).
func (s *Sim) finish(i int32, ok bool, t uint64) {
	r := &s.reqs[i]
	s.ops[r.op].live = -1
	s.free = append(s.free, i)
	s.endOp(r, ok, t)
}

// endOp records the operation of request r as done or failed at client
// time t, frees it, and lets its closed-loop client issue the next.
func (s *Sim) endOp(r *request, ok bool, t uint64) {
	op, issued, kind, key, c := r.op, r.issued, r.kind, r.key, r.client // r's slot may be reused below
	if s.stats.measuring && issued >= s.stats.start {
		if ok {
			s.stats.done++
			_ = s.lat.RecordValue(int64(max(t-issued, 1)))
		} else {
			s.stats.errors++
		}
		if s.cfg.Progress != nil && s.stats.done >= s.stats.nextProgress && s.stats.done < s.cfg.Requests {
			s.cfg.Progress(s.stats.done, s.cfg.Requests)
			s.stats.nextProgress += s.cfg.Requests / 10
		}
	}
	if kind == bench.OpInsert {
		s.stream.Done(bench.Op{Kind: kind, Index: key}) // read-latest (D) may read it now
	}
	s.freeOps = append(s.freeOps, op)
	if c >= 0 {
		s.issue(c, t)
	}
}

// result is the run as a row of netdir bench's results.
func (s *Sim) result() bench.Run {
	elapsed := time.Duration(s.stats.end - s.stats.start)
	info := bench.RunInfo{Policy: s.cfg.Policy, Workload: s.src.Workload(), DirSize: s.ctl.dirSize()}
	for i := range s.nodes {
		info.Nodes = append(info.Nodes, bench.NodeStat{Requests: float64(s.nodes[i].measured), MeanLatency: s.nodes[i].latency})
	}
	c := s.dirCounters()
	if routed := c.Hits + c.Misses - s.stats.hitsStart - s.stats.missesStart; routed > 0 {
		info.DirHitRate = float64(c.Hits-s.stats.hitsStart) / float64(routed)
		info.SwitchedFraction = float64(c.Switched-s.stats.switchedStart) / float64(routed)
	}
	run := bench.Summarize(info, &bench.Result{Ops: s.stats.done, Errors: s.stats.errors, Dropped: s.stats.dropped,
		Elapsed: elapsed, Latency: s.lat})
	run.CapacityOps = s.cfg.Capacity
	run.Device = "sim-" + s.cfg.Service
	run.Control = "sim"
	run.OfferedOps = s.cfg.Rate
	run.WriteGroups, run.GroupedWrites = s.stats.writeGroups, s.stats.groupedWrites
	run.Note = fmt.Sprintf("simulated: %d racks of ≤%d, %d partitions, link %v, seed %d, %d retries, %d resent after a timeout, %d reads verified at the tail",
		len(s.racks), s.cfg.RackSize, 1<<s.cfg.PartitionBits, s.cfg.Link, s.cfg.Seed, s.stats.retried, s.stats.timedOut, s.stats.verified)
	if s.spine != nil && s.cfg.WholeRacks {
		run.Note += ", remote racks' copies on every node"
	} else if h := s.cfg.RackCopyHeadroom; s.spine != nil && h != sched.RackCopyHeadroom {
		run.Note += fmt.Sprintf(", remote racks' copies by load within %g", h)
	}
	if st := s.cfg.Settle; st != sched.DefaultSettle {
		run.Note += fmt.Sprintf(", coarse loop settling within %g + %gσ (damping %g, min change %g)", st.Tolerance, st.Sigmas, st.Damping, st.MinChange)
	}
	return run
}

// Run builds and runs one simulation.
func Run(cfg Config) (bench.Run, error) {
	s, err := New(cfg)
	if err != nil {
		return bench.Run{}, err
	}
	return s.Run()
}
