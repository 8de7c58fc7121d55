package storagenode

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Compaction scheduling (HATS §4.4): the R trees of a node run under one
// node-level scheduler. It grants compactions within each tree's own
// concurrency limit (Pebble's GetAllowedWithoutPermission) and a node-level
// cap, and it paces the bytes that granted compactions write so that the
// node's total stays within Budget bytes/s, split among trees by an
// Allocator. Flushes never pass through a CompactionScheduler, so they are
// never throttled; compactions with L0 inputs, and every compaction of a
// tree whose L0 holds L0Urgent files or more, are never paced either. Each
// tree gets at least Floor bytes/s so that none starves.

// Defaults of the compaction scheduler.
const (
	DefaultCompactionBudget = 64 << 20 // bytes/s, whole node
	DefaultCompactionFloor  = 4 << 20  // bytes/s, per tree
	DefaultMaxCompactions   = 2        // concurrent paced compactions, whole node
	DefaultL0Urgent         = 8        // L0 files at which a tree is never paced
)

// TreeLoad is what an Allocator sees of each tree.
type TreeLoad struct {
	Position        int           // chain position the tree serves
	Reads           uint64        // reads since the node started
	MeanReadLatency time.Duration // mean Pebble read latency since start
	L0Files         int64
}

// Allocator splits the node's compaction budget among its trees. Shares
// returns one non-negative weight per tree, in the order given; the
// scheduler normalises them (all zero means equal shares). EqualShares is
// the default; HATS read shares (E/Q) implement the same interface.
type Allocator interface {
	Shares(trees []TreeLoad) []float64
}

// EqualShares gives every tree the same share.
type EqualShares struct{}

// Shares implements Allocator.
func (EqualShares) Shares(trees []TreeLoad) []float64 {
	s := make([]float64, len(trees))
	for i := range s {
		s[i] = 1
	}
	return s
}

// AllocatorFunc adapts a function to Allocator.
type AllocatorFunc func([]TreeLoad) []float64

// Shares implements Allocator.
func (f AllocatorFunc) Shares(t []TreeLoad) []float64 { return f(t) }

// Scheduler is the node-level compaction scheduler. Each tree registers
// through its own pebble.CompactionScheduler (forTree), since Pebble calls
// Register and Unregister once per DB.
type Scheduler struct {
	budget, floor int64
	maxRunning    int
	l0Urgent      int64

	mu      sync.Mutex
	alloc   Allocator
	trees   []*treeSched
	running int // paced compactions running, node-wide

	poke chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

// NewScheduler makes a scheduler with the given budget and floor in bytes/s
// (zero takes the defaults) and allocator (nil: EqualShares).
func NewScheduler(budget, floor int64, alloc Allocator) *Scheduler {
	if budget <= 0 {
		budget = DefaultCompactionBudget
	}
	if floor <= 0 {
		floor = DefaultCompactionFloor
	}
	if alloc == nil {
		alloc = EqualShares{}
	}
	s := &Scheduler{
		budget: budget, floor: floor, maxRunning: DefaultMaxCompactions, l0Urgent: DefaultL0Urgent,
		alloc: alloc, poke: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	s.wg.Add(1)
	go s.loop()
	return s
}

// SetAllocator replaces the allocation policy; rates follow within 100 ms.
func (s *Scheduler) SetAllocator(a Allocator) {
	if a == nil {
		a = EqualShares{}
	}
	s.mu.Lock()
	s.alloc = a
	s.mu.Unlock()
	s.kick()
}

// Close stops the granting loop. Call it after closing the trees.
func (s *Scheduler) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

func (s *Scheduler) kick() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// Rates returns each registered tree's current paced rate in bytes/s.
func (s *Scheduler) Rates() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := make([]int64, len(s.trees))
	for i, ts := range s.trees {
		r[i] = int64(ts.rate.Load())
	}
	return r
}

func (s *Scheduler) forTree(t *tree) *treeSched {
	return &treeSched{s: s, t: t}
}

// treeSched is one tree's view of the node scheduler.
type treeSched struct {
	s  *Scheduler
	t  *tree
	db pebble.DBForCompaction

	l0Files atomic.Int64
	rate    atomic.Int64

	// guarded by s.mu
	running      int
	unregistered bool
	granting     bool

	bmu    sync.Mutex
	tokens float64
	last   time.Time
}

var _ pebble.CompactionScheduler = (*treeSched)(nil)

func (ts *treeSched) Register(_ int, db pebble.DBForCompaction) {
	ts.db = db
	ts.rate.Store(ts.s.budget)
	ts.s.mu.Lock()
	ts.s.trees = append(ts.s.trees, ts)
	ts.s.mu.Unlock()
	ts.s.kick()
}

func (ts *treeSched) Unregister() {
	s := ts.s
	s.mu.Lock()
	ts.unregistered = true
	for ts.granting {
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
		s.mu.Lock()
	}
	for i, x := range s.trees {
		if x == ts {
			s.trees = append(s.trees[:i], s.trees[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
}

func (ts *treeSched) urgent() bool { return ts.l0Files.Load() >= ts.s.l0Urgent }

// TrySchedule is called by the DB with its mutex held: it must not call
// back into the DB except GetAllowedWithoutPermission.
func (ts *treeSched) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s := ts.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts.unregistered {
		return false, nil
	}
	if ts.running >= ts.db.GetAllowedWithoutPermission() {
		return false, nil
	}
	if s.running >= s.maxRunning && !ts.urgent() && ts.running > 0 {
		return false, nil
	}
	ts.running++
	s.running++
	return true, &grant{ts: ts}
}

func (ts *treeSched) UpdateGetAllowedWithoutPermission() { ts.s.kick() }

// loop samples L0, recomputes rates, and grants waiting compactions.
func (s *Scheduler) loop() {
	defer s.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.sample()
		case <-s.poke:
		}
		s.grantWaiting()
	}
}

func (s *Scheduler) sample() {
	s.mu.Lock()
	trees := append([]*treeSched(nil), s.trees...)
	alloc := s.alloc
	s.mu.Unlock()
	loads := make([]TreeLoad, len(trees))
	for i, ts := range trees {
		if db, ok := ts.db.(*pebble.DB); ok {
			m := db.Metrics()
			ts.l0Files.Store(m.Levels[0].TablesCount)
		}
		r := ts.t.reads.Load()
		var mean time.Duration
		if r > 0 {
			mean = time.Duration(ts.t.readNanos.Load() / r)
		}
		loads[i] = TreeLoad{Position: ts.t.pos, Reads: r, MeanReadLatency: mean, L0Files: ts.l0Files.Load()}
	}
	shares := alloc.Shares(loads)
	var sum float64
	for i := range trees {
		if i < len(shares) && shares[i] > 0 {
			sum += shares[i]
		}
	}
	for i, ts := range trees {
		share := 1 / float64(len(trees))
		if sum > 0 {
			share = 0
			if i < len(shares) && shares[i] > 0 {
				share = shares[i] / sum
			}
		}
		ts.rate.Store(max(s.floor, int64(share*float64(s.budget))))
	}
}

func (s *Scheduler) grantWaiting() {
	s.mu.Lock()
	trees := append([]*treeSched(nil), s.trees...)
	s.mu.Unlock()
	for _, ts := range trees {
		for range 4 {
			s.mu.Lock()
			if ts.unregistered || ts.granting || ts.db == nil {
				s.mu.Unlock()
				break
			}
			allowed := ts.db.GetAllowedWithoutPermission()
			if ts.running >= allowed || (s.running >= s.maxRunning && !ts.urgent() && ts.running > 0) {
				s.mu.Unlock()
				break
			}
			ts.granting = true
			s.mu.Unlock()
			ok := false
			if waiting, _ := ts.db.GetWaitingCompaction(); waiting {
				g := &grant{ts: ts}
				s.mu.Lock()
				ts.running++
				s.running++
				s.mu.Unlock()
				if ok = ts.db.Schedule(g); !ok {
					s.mu.Lock()
					ts.running--
					s.running--
					s.mu.Unlock()
				}
			}
			s.mu.Lock()
			ts.granting = false
			s.mu.Unlock()
			if !ok {
				break
			}
		}
	}
}

// pace charges n written bytes to the tree's bucket, sleeping while it is
// in debt. The bucket holds at most 100 ms of rate.
func (ts *treeSched) pace(n uint64) {
	rate := float64(ts.rate.Load())
	if rate <= 0 {
		return
	}
	ts.bmu.Lock()
	now := time.Now()
	if !ts.last.IsZero() {
		ts.tokens = min(ts.tokens+now.Sub(ts.last).Seconds()*rate, rate/10)
	}
	ts.last = now
	ts.tokens -= float64(n)
	var wait time.Duration
	if ts.tokens < 0 {
		wait = time.Duration(-ts.tokens / rate * float64(time.Second))
	}
	ts.bmu.Unlock()
	if wait > 0 {
		wait = min(wait, time.Second)
		ts.t.throttledNanos.Add(uint64(wait))
		select {
		case <-time.After(wait):
		case <-ts.s.stop:
		}
	}
}

// grant is one compaction's grant handle.
type grant struct {
	ts        *treeSched
	l0        atomic.Bool
	countedL0 bool
	last      uint64
	done      atomic.Bool
}

func (g *grant) Started() {
	t := g.ts.t
	t.compactions.Add(1)
	t.mu.Lock()
	t.started = append(t.started, g)
	t.mu.Unlock()
}

func (g *grant) MeasureCPU(pebble.CompactionGoroutineKind) {}

func (g *grant) CumulativeStats(st pebble.CompactionGrantHandleStats) {
	if st.CumWriteBytes <= g.last {
		return
	}
	d := st.CumWriteBytes - g.last
	g.last = st.CumWriteBytes
	g.ts.t.compactBytes.Add(d)
	if g.l0.Load() || g.ts.urgent() {
		return
	}
	g.ts.pace(d)
}

func (g *grant) Done() {
	if g.done.Swap(true) {
		return
	}
	ts := g.ts
	t := ts.t
	t.mu.Lock()
	for i, x := range t.started {
		if x == g {
			t.started = append(t.started[:i], t.started[i+1:]...)
			break
		}
	}
	if g.countedL0 {
		t.l0Compactions.Add(-1)
	}
	t.mu.Unlock()
	ts.s.mu.Lock()
	ts.running--
	ts.s.running--
	ts.s.mu.Unlock()
	ts.s.kick()
}
