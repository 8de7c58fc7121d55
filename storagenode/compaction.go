package storagenode

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/netdir/netdir/sched"
)

// Compaction scheduling (HATS §4.4): the R trees of a node run under one
// node-level scheduler. It grants compactions within each tree's own
// concurrency limit (Pebble's GetAllowedWithoutPermission) and a node-level
// cap, and it paces the bytes that granted compactions write (reported
// through the grant handle's CumulativeStats) so that the node's total stays
// within Budget bytes/s, split among trees by an Allocator's weights
// (sched.CompactionRates). The default Allocator is ReadShare: a tree's share
// is its read share E/Q, the expected load the controller's coarse scheduler
// gives it (Node.SetExpected) over the node's total, or its observed reads
// while no E is known.
//
// Flushes never pass through a CompactionScheduler, so they are never
// throttled. Every compaction class is paced, L0's included, so that the
// budget bounds the device time compaction takes from reads: a tree's L0
// may grow while its compactions wait (Pebble's own L0 thresholds are
// raised for it, L0StopWrites), until it holds L0Urgent files; from there
// the tree's compactions are paced at a rate that doubles at L0Urgent and
// again every sched.DeepL0DoublingFiles files deeper (sched.DeepL0Rate),
// so that L0 stays a few files past L0Urgent and writes never stall on the
// budget, while compaction takes only what the flushes need beyond it.
// With L0 exempt (before issue 14), 85-100 % of the experiments'
// compaction bytes were never paced; with a deep L0's compactions unpaced
// (before branch hats14), 85 % at 2 MiB/s of writes per node. A tree whose
// share of the budget is below Floor is pooled:
// the pooled trees share one bucket of at least Floor bytes/s, first come
// first served (their waiting compactions are granted in the order they
// started waiting, and one bucket paces them all), so write-heavy trees that
// few read still progress. The budget bounds the paced bytes: the trees'
// rates and the pool's sum to it.

// Defaults of the compaction scheduler.
const (
	DefaultCompactionBudget = 64 << 20 // bytes/s, whole node
	DefaultCompactionFloor  = 4 << 20  // bytes/s, per tree
	DefaultMaxCompactions   = 2        // concurrent paced compactions, whole node
	DefaultL0Urgent         = 32       // L0 files at which a tree's paced rate starts to rise (sched.DeepL0Rate)
	maxTreeCompactions      = 3        // a tree's concurrent compactions at most, with a deep L0 (L0Urgent files)
	// L0StopWrites is each tree's Pebble L0StopWritesThreshold (L0
	// sublevels at which writes stop; Pebble's default is 12): above
	// L0Urgent, so that the paced L0 may grow to L0Urgent without
	// stalling writes, and the raised rates from there drain it.
	// Every L0 file a GET's key falls in costs it a bloom filter probe
	// (tree.go: filters on every level; the filter blocks are small and
	// stay cached) and, at the filter's 1 % false positives, a hundredth
	// of a data block read; before the filters each such file cost a data
	// block read, so a deep L0 made GETs read the device 6-57 times.
	L0StopWrites = 2 * DefaultL0Urgent
)

// Unthrottled as a budget turns pacing off: compactions run as fast as
// Pebble's own concurrency limits let them (the baseline HATS measures the
// read-throughput drop against).
const Unthrottled = -1

// TreeLoad is what an Allocator sees of each tree.
type TreeLoad struct {
	Position        int           // chain position the tree serves
	Reads           uint64        // reads since the node started
	RecentReads     float64       // reads/s, smoothed over about a second
	MeanReadLatency time.Duration // mean Pebble read latency since start
	L0Files         int64
	CompactionDebt  uint64 // Pebble's estimated compaction debt, bytes
	// Expected is the load the controller's coarse scheduler expects this
	// tree to serve (its part of E), valid if HasExpected.
	Expected    float64
	HasExpected bool
}

// Allocator splits the node's compaction budget among its trees. Shares
// returns one non-negative weight per tree, in the order given; the
// scheduler normalises them (all zero means equal shares) and pools trees
// whose share falls below the floor (sched.CompactionRates). ReadShare is
// the default; EqualShares ignores load.
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

// ReadShare weights each tree by its read share E/Q (HATS §4.4): the
// expected load E the controller gave the tree, when every tree has one;
// otherwise the reads it serves now (RecentReads), or, before any recent
// reads, the reads since start.
type ReadShare struct{}

// Shares implements Allocator.
func (ReadShare) Shares(trees []TreeLoad) []float64 {
	s := make([]float64, len(trees))
	known := len(trees) > 0
	for _, t := range trees {
		known = known && t.HasExpected
	}
	if known {
		for i, t := range trees {
			s[i] = t.Expected
		}
		return s
	}
	var recent float64
	for i, t := range trees {
		s[i] = t.RecentReads
		recent += t.RecentReads
	}
	if recent > 0 {
		return s
	}
	for i, t := range trees {
		s[i] = float64(t.Reads)
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
	floor    int64
	l0Urgent atomic.Int64 // L0 files at which a tree's paced rate rises

	configured int64 // the budget SetBudget(0) restores

	mu         sync.Mutex
	budget     int64 // 0: unthrottled
	maxRunning int
	alloc      Allocator
	trees      []*treeSched
	running    int             // paced compactions running, node-wide
	waitSeq    uint64          // orders the trees' waits
	expected   map[int]float64 // E per chain position, from the controller
	pool       bucket          // shared by the pooled trees

	// turnNow, if set, staggers a paced budget (sched.TurnBudget): the
	// number of turns (0: not staggered) and whether it is this node's;
	// inTurn is the last sample's answer, for the load on replies.
	turnNow func(time.Time) (int, bool)
	inTurn  atomic.Bool

	poke chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

// NewScheduler makes a scheduler with the given budget and floor in bytes/s
// (zero takes the defaults; a negative budget, Unthrottled, paces nothing)
// and allocator (nil: ReadShare). A positive budget is also what
// SetBudget(0) restores: the node's, its device's by default.
func NewScheduler(budget, floor int64, alloc Allocator) *Scheduler {
	configured := int64(DefaultCompactionBudget)
	if budget > 0 {
		configured = budget
	}
	maxRunning := DefaultMaxCompactions
	switch {
	case budget < 0:
		budget, maxRunning = 0, math.MaxInt
	case budget == 0:
		budget = DefaultCompactionBudget
	}
	if floor <= 0 {
		floor = DefaultCompactionFloor
	}
	if alloc == nil {
		alloc = ReadShare{}
	}
	s := &Scheduler{
		configured: configured, budget: budget, floor: floor, maxRunning: maxRunning,
		alloc: alloc, poke: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	s.l0Urgent.Store(DefaultL0Urgent)
	s.wg.Add(1)
	go s.loop()
	return s
}

// SetL0Urgent sets how many L0 files raise a tree's paced rate
// (sched.DeepL0Rate; 0: DefaultL0Urgent). Beyond L0StopWrites it would let writes
// stall on the budget, so it is capped there.
func (s *Scheduler) SetL0Urgent(files int64) {
	if files <= 0 {
		files = DefaultL0Urgent
	}
	s.l0Urgent.Store(min(files, L0StopWrites))
	s.kick()
}

// SetAllocator replaces the allocation policy (nil: ReadShare); rates
// follow within 100 ms.
func (s *Scheduler) SetAllocator(a Allocator) {
	if a == nil {
		a = ReadShare{}
	}
	s.mu.Lock()
	s.alloc = a
	s.mu.Unlock()
	s.kick()
}

// SetBudget changes the node's compaction budget in bytes/s (0: the one
// the scheduler was made with, or 64 MiB/s; Unthrottled: no pacing, and no
// node-level cap on concurrent compactions); the rates follow at once.
func (s *Scheduler) SetBudget(budget int64) {
	s.mu.Lock()
	switch {
	case budget < 0:
		s.budget, s.maxRunning = 0, math.MaxInt
	case budget == 0:
		s.budget, s.maxRunning = s.configured, DefaultMaxCompactions
	default:
		s.budget, s.maxRunning = budget, DefaultMaxCompactions
	}
	s.mu.Unlock()
	s.sample()
	s.kick()
}

// Budget is the node's compaction budget in bytes/s (0: unthrottled).
func (s *Scheduler) Budget() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.budget
}

// SetExpected sets the load the controller expects each tree to serve (E,
// indexed by chain position; nil forgets it). ReadShare uses it instead of
// the observed reads when every tree has one.
func (s *Scheduler) SetExpected(e []float64) {
	s.mu.Lock()
	s.expected = nil
	if e != nil {
		s.expected = make(map[int]float64, len(e))
		for pos, x := range e {
			if x >= 0 && !math.IsInf(x, 0) {
				s.expected[pos] = x
			}
		}
	}
	s.mu.Unlock()
	s.kick()
}

// Close stops the granting loop and the pacing. Call it before closing the
// trees: Pebble's Close waits for running compactions, which then finish
// unpaced, and waiting ones are no longer granted.
func (s *Scheduler) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

// setTurns staggers the paced budget by turnNow (sched.TurnBudget).
func (s *Scheduler) setTurns(turnNow func(time.Time) (int, bool)) {
	s.mu.Lock()
	s.turnNow = turnNow
	s.mu.Unlock()
	s.kick()
}

func (s *Scheduler) kick() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// Rates returns each registered tree's current paced rate in bytes/s: its
// own, or the pool's for a pooled tree (0: unthrottled).
func (s *Scheduler) Rates() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := make([]int64, len(s.trees))
	for i, ts := range s.trees {
		r[i] = ts.rate.Load()
	}
	return r
}

// Pooled returns which registered trees share the pool.
func (s *Scheduler) Pooled() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := make([]bool, len(s.trees))
	for i, ts := range s.trees {
		r[i] = ts.pooled.Load()
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
	debt    atomic.Uint64
	rate    atomic.Int64 // paced bytes/s: own, or the pool's when pooled
	pooled  atomic.Bool

	// guarded by s.mu
	running      int
	unregistered bool
	granting     bool
	waitSeq      uint64 // when first held back, not granted since (0: not waiting): first come, first served
	lastReads    uint64
	lastSample   time.Time
	recentReads  float64

	bucket bucket
}

var _ pebble.CompactionScheduler = (*treeSched)(nil)

func (ts *treeSched) Register(_ int, db pebble.DBForCompaction) {
	ts.db = db
	ts.s.mu.Lock()
	ts.rate.Store(ts.s.budget)
	ts.bucket.setRate(float64(ts.s.budget))
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

func (ts *treeSched) urgent() bool { return ts.l0Files.Load() >= ts.s.l0Urgent.Load() }

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
		return false, nil // the tree's own limit; the DB asks again
	}
	if (s.running >= s.maxRunning && !ts.urgent() && ts.running > 0) || s.earlierPooledLocked(ts) {
		if ts.waitSeq == 0 {
			s.waitSeq++
			ts.waitSeq = s.waitSeq
		}
		return false, nil
	}
	ts.running++
	s.running++
	ts.waitSeq = 0
	return true, &grant{ts: ts}
}

// earlierPooledLocked reports whether ts is pooled and another pooled tree
// has waited longer for a compaction the node cap holds back: the pool is
// served first come, first served.
func (s *Scheduler) earlierPooledLocked(ts *treeSched) bool {
	if !ts.pooled.Load() || ts.running == 0 || ts.urgent() {
		return false // a tree's first compaction is never held back
	}
	for _, x := range s.trees {
		if x != ts && x.pooled.Load() && !x.unregistered && x.waitSeq != 0 &&
			(ts.waitSeq == 0 || x.waitSeq < ts.waitSeq) {
			return true
		}
	}
	return false
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

// recentAlpha smooths reads/s over the 100 ms samples (about 1 s).
const recentAlpha = 0.1

// sample reads each tree's L0, debt and reads, and sets the trees' rates
// from the allocator's shares (sched.CompactionRates).
func (s *Scheduler) sample() {
	s.mu.Lock()
	trees := append([]*treeSched(nil), s.trees...)
	alloc, budget, floor, turnNow := s.alloc, s.budget, s.floor, s.turnNow
	now := time.Now()
	loads := make([]TreeLoad, len(trees))
	for i, ts := range trees {
		r := ts.t.reads.Load()
		if !ts.lastSample.IsZero() {
			if dt := now.Sub(ts.lastSample).Seconds(); dt > 0 {
				rate := float64(r-min(ts.lastReads, r)) / dt
				ts.recentReads += recentAlpha * (rate - ts.recentReads)
			}
		} else {
			ts.recentReads = 0
		}
		ts.lastReads, ts.lastSample = r, now
		e, ok := s.expected[ts.t.pos]
		loads[i] = TreeLoad{Position: ts.t.pos, Reads: r, RecentReads: ts.recentReads, Expected: e, HasExpected: ok}
	}
	s.mu.Unlock()
	for i, ts := range trees {
		if db, ok := ts.db.(*pebble.DB); ok {
			m := db.Metrics()
			ts.l0Files.Store(m.Levels[0].TablesCount)
			ts.debt.Store(m.Compact.EstimatedDebt)
		}
		var mean time.Duration
		if loads[i].Reads > 0 {
			mean = time.Duration(ts.t.readNanos.Load() / loads[i].Reads)
		}
		loads[i].MeanReadLatency = mean
		loads[i].L0Files = ts.l0Files.Load()
		loads[i].CompactionDebt = ts.debt.Load()
	}
	inTurn := false
	if turnNow != nil && budget > 0 {
		turns, mine := turnNow(now)
		budget = sched.TurnBudget(budget, turns, mine)
		inTurn = mine && turns > 1
	}
	s.inTurn.Store(inTurn)
	if budget == 0 { // unthrottled
		for _, ts := range trees {
			ts.pooled.Store(false)
			ts.rate.Store(0)
			ts.bucket.setRate(0)
		}
		return
	}
	plan := sched.CompactionRates(float64(budget), float64(floor), alloc.Shares(loads))
	s.mu.Lock()
	s.pool.setRate(plan.Pool)
	s.mu.Unlock()
	urgent := s.l0Urgent.Load()
	for i, ts := range trees {
		ts.pooled.Store(plan.Pooled[i])
		rate := plan.Rates[i]
		if plan.Pooled[i] {
			rate = plan.Pool
		}
		// A deep L0 is paced on the tree's own bucket at a raised rate
		// (pace); below L0Urgent this is the plan's rate.
		rate = sched.DeepL0Rate(rate, loads[i].L0Files, urgent)
		ts.rate.Store(int64(rate))
		ts.bucket.setRate(rate)
	}
}

// grantWaiting offers waiting compactions grants: unpooled trees first
// (their read share entitles them to their rate), then pooled trees in the
// order they started waiting.
func (s *Scheduler) grantWaiting() {
	s.mu.Lock()
	trees := append([]*treeSched(nil), s.trees...)
	since := make([]uint64, len(trees))
	for i, ts := range trees {
		since[i] = ts.waitSeq
	}
	s.mu.Unlock()
	order := make([]int, len(trees))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		pa, pb := trees[a].pooled.Load(), trees[b].pooled.Load()
		switch {
		case pa != pb:
			if pa {
				return 1
			}
			return -1
		case !pa:
			return 0
		case (since[a] == 0) != (since[b] == 0):
			if since[a] == 0 {
				return 1
			}
			return -1
		}
		return cmp.Compare(since[a], since[b])
	})
	for _, i := range order {
		ts := trees[i]
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
			waiting, _ := ts.db.GetWaitingCompaction()
			if waiting {
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
			if ok || !waiting {
				ts.waitSeq = 0
			}
			s.mu.Unlock()
			if !ok {
				break
			}
		}
	}
}

// bucket is a token bucket of paced bytes that holds at most 100 ms of its
// rate. charge takes n bytes at now and returns how long the caller must
// wait to stay within the rate; waiters queue in the order they charge.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
}

func (b *bucket) setRate(r float64) {
	b.mu.Lock()
	b.rate = r
	b.mu.Unlock()
}

func (b *bucket) charge(n uint64, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate <= 0 {
		return 0
	}
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.tokens+now.Sub(b.last).Seconds()*b.rate, b.rate/10)
	}
	if now.After(b.last) {
		b.last = now
	}
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// pace charges n written bytes to the tree's bucket, or the pool's, and
// sleeps while it is in debt (at most a second per charge). A tree with a
// deep L0 charges its own bucket, whose rate sample raised with L0's depth
// (sched.DeepL0Rate), even when pooled: the pool's other trees do not wait
// for its catching up.
func (ts *treeSched) pace(n uint64) {
	if ts.rate.Load() <= 0 {
		return // unthrottled
	}
	b := &ts.bucket
	if ts.pooled.Load() && !ts.urgent() {
		b = &ts.s.pool
	}
	wait := b.charge(n, time.Now())
	if wait > 0 {
		wait = min(wait, time.Second)
		ts.t.throttledNanos.Add(uint64(wait))
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
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

// CumulativeStats is Pebble's report of the bytes the compaction wrote so
// far: the growth since the last report is counted and paced, at a raised
// rate while the tree's L0 is deep (L0Urgent files).
func (g *grant) CumulativeStats(st pebble.CompactionGrantHandleStats) {
	if st.CumWriteBytes <= g.last {
		return
	}
	d := st.CumWriteBytes - g.last
	g.last = st.CumWriteBytes
	g.ts.t.compactBytes.Add(d)
	if g.ts.urgent() {
		g.ts.t.deepL0Bytes.Add(d)
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
