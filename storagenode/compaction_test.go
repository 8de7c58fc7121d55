package storagenode

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/netdir/netdir/layout"
)

func TestReadShareAllocator(t *testing.T) {
	var a ReadShare
	// Before any E: the reads the trees serve now.
	got := a.Shares([]TreeLoad{{RecentReads: 30, Reads: 1}, {RecentReads: 10, Reads: 1000}, {RecentReads: 0}})
	if got[0] != 30 || got[1] != 10 || got[2] != 0 {
		t.Fatalf("recent reads: %v", got)
	}
	// No recent reads: the reads since start.
	got = a.Shares([]TreeLoad{{Reads: 5}, {Reads: 15}})
	if got[0] != 5 || got[1] != 15 {
		t.Fatalf("reads since start: %v", got)
	}
	// E for every tree overrides the observed reads.
	got = a.Shares([]TreeLoad{
		{RecentReads: 100, Expected: 1, HasExpected: true},
		{RecentReads: 1, Expected: 3, HasExpected: true},
	})
	if got[0] != 1 || got[1] != 3 {
		t.Fatalf("expected load: %v", got)
	}
	// E for some trees only: the observed reads.
	got = a.Shares([]TreeLoad{{RecentReads: 100, Expected: 1, HasExpected: true}, {RecentReads: 1}})
	if got[0] != 100 || got[1] != 1 {
		t.Fatalf("partial E: %v", got)
	}
}

// newManualScheduler is a Scheduler without its background loop: the test
// samples and grants by hand.
func newManualScheduler(budget, floor int64, alloc Allocator) *Scheduler {
	s := &Scheduler{budget: budget, floor: floor, maxRunning: DefaultMaxCompactions,
		alloc: alloc, poke: make(chan struct{}, 1), stop: make(chan struct{})}
	s.l0Urgent.Store(DefaultL0Urgent)
	return s
}

// TestSchedulerFollowsReadShares: the default allocator paces each tree by
// its share of the reads, then by the controller's E once it is set.
func TestSchedulerFollowsReadShares(t *testing.T) {
	s := newManualScheduler(64<<20, 4<<20, ReadShare{})
	var trees []*tree
	for i := range 3 {
		tr := &tree{pos: i, lat: newLatencyRing(8)}
		s.forTree(tr).Register(1, &fakeDB{})
		trees = append(trees, tr)
	}
	s.sample() // first sample: the reads so far are the baseline
	for i, n := range []uint64{600, 300, 100} {
		trees[i].reads.Add(n)
	}
	s.sample()
	r := s.Rates()
	if r[0] <= r[1] || r[1] <= r[2] || s.Pooled()[0] {
		t.Fatalf("rates %v do not follow the reads 6:3:1", r)
	}
	if r[0]+r[1]+r[2] > 64<<20 {
		t.Fatalf("rates %v over the budget", r)
	}
	if r[0] != 2*r[1] || r[2] != (64<<20)/10 {
		t.Fatalf("rates %v, want 6:3:1 of 64 MiB/s", r)
	}
	// The controller expects tree 2 to serve most reads from now on.
	s.SetExpected([]float64{0, 10, 90})
	s.sample()
	r, p := s.Rates(), s.Pooled()
	if !p[0] || p[1] || p[2] || r[2] <= r[1] || r[0] != 4<<20 {
		t.Fatalf("with E 0:10:90: rates %v pooled %v", r, p)
	}
	if r[1]+r[2]+r[0] != 64<<20 && r[1]+r[2]+r[0] != 64<<20-1 {
		t.Fatalf("rates %v: the trees and the pool should sum to the budget", r)
	}
	s.SetExpected(nil)
	s.sample()
	if s.Pooled()[0] {
		t.Fatal("E forgotten, but the tree with reads is still pooled")
	}
}

// orderDB is a fake DB that records the order of grants across trees.
type orderDB struct {
	name    string
	allowed int
	waiting bool
	log     *[]string
	mu      *sync.Mutex
}

func (f *orderDB) GetAllowedWithoutPermission() int { return f.allowed }
func (f *orderDB) GetWaitingCompaction() (bool, pebble.WaitingCompaction) {
	return f.waiting, pebble.WaitingCompaction{}
}
func (f *orderDB) Schedule(pebble.CompactionGrantHandle) bool {
	f.mu.Lock()
	*f.log = append(*f.log, f.name)
	f.mu.Unlock()
	return true
}

// TestPooledTreesFirstComeFirstServed: trees below the floor are granted in
// the order they started waiting, whatever their registration order.
func TestPooledTreesFirstComeFirstServed(t *testing.T) {
	s := newManualScheduler(64<<20, 4<<20, AllocatorFunc(func([]TreeLoad) []float64 { return []float64{1, 0, 0} }))
	s.maxRunning = 3
	var log []string
	var mu sync.Mutex
	a := s.forTree(&tree{pos: 0, lat: newLatencyRing(8)})
	b := s.forTree(&tree{pos: 1, lat: newLatencyRing(8)})
	c := s.forTree(&tree{pos: 2, lat: newLatencyRing(8)})
	a.Register(1, &orderDB{name: "a", allowed: 2, log: &log, mu: &mu})
	b.Register(1, &orderDB{name: "b", allowed: 2, waiting: true, log: &log, mu: &mu})
	c.Register(1, &orderDB{name: "c", allowed: 2, waiting: true, log: &log, mu: &mu})
	s.sample()
	if p := s.Pooled(); p[0] || !p[1] || !p[2] {
		t.Fatalf("pooled %v, want b and c", p)
	}
	grant := func(ts *treeSched) pebble.CompactionGrantHandle {
		ok, h := ts.TrySchedule()
		if !ok {
			t.Fatal("refused")
		}
		h.Started()
		return h
	}
	a1, a2, b1, c1 := grant(a), grant(a), grant(b), grant(c)
	_, _ = b1, c1
	// The node is at its cap: c waits first, then b.
	if ok, _ := c.TrySchedule(); ok {
		t.Fatal("c granted over the node cap")
	}
	if ok, _ := b.TrySchedule(); ok {
		t.Fatal("b granted over the node cap")
	}
	a1.Done()
	a2.Done()
	// One slot free: b asks first, but c has waited longer.
	if ok, _ := b.TrySchedule(); ok {
		t.Fatal("b overtook c, which waited first")
	}
	s.grantWaiting()
	mu.Lock()
	got := fmt.Sprint(log)
	mu.Unlock()
	if got != "[c]" {
		t.Fatalf("grants %s, want [c]: the pool is first come, first served", got)
	}
}

// TestBucketNeverExceedsRate: whatever the sizes and times of the charges,
// the bytes let through by any time stay within the rate times the elapsed
// time plus the burst (100 ms of rate).
func TestBucketNeverExceedsRate(t *testing.T) {
	const rate = 4 << 20
	rng := rand.New(rand.NewPCG(7, 8))
	b := &bucket{rate: rate}
	t0 := time.Unix(1000, 0)
	now := t0
	var through float64
	for range 10000 {
		n := uint64(rng.IntN(2 << 20))
		wait := b.charge(n, now)
		if wait < 0 {
			t.Fatal("negative wait")
		}
		// The compaction goes on writing once it has waited.
		now = now.Add(wait)
		through += float64(n)
		if limit := rate*now.Sub(t0).Seconds() + rate/10 + 2<<20; through > limit {
			t.Fatalf("%.0f bytes through after %s: over the rate's %.0f", through, now.Sub(t0), limit)
		}
		now = now.Add(time.Duration(rng.IntN(int(50 * time.Millisecond))))
	}
	if b2 := (&bucket{}); b2.charge(1<<30, now) != 0 {
		t.Fatal("a bucket without a rate paces")
	}
}

// TestLowBudgetNeverHoldsFlushesOrL0 gives a real node a budget far below
// what its writes need: flushes (which never pass through the scheduler)
// still run, L0 compactions are paced while L0 is shallow, and once L0
// holds L0Urgent files they run at a raised rate (sched.DeepL0Rate), so L0
// stays bounded.
func TestLowBudgetNeverHoldsFlushesOrL0(t *testing.T) {
	m, err := layout.New(layout.Config{PartitionBits: 2, Replicas: 1, Nodes: []layout.Node{{ID: 1, Addr: "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := Start(Options{ID: 1, Dir: filepath.Join(t.TempDir(), "n"), Layout: m, MemTableBytes: 256 << 10, Workers: 1,
		CompactionBudget: 16 << 10, CompactionFloor: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.Scheduler().SetL0Urgent(8)
	tr := n.trees[0]
	val := bytes.Repeat([]byte("y"), 1000)
	for round := range 20 {
		b := tr.db.NewBatch()
		for i := range 600 {
			k := []byte(fmt.Sprintf("k%06d", (round*600+i*7)%3000)) // overlapping: L0 sublevels grow
			r := record{Clean: version{Ver: 1, Val: val}}
			b.Set(recordKey(0, k), r.encode(), nil)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		b.Close()
		if err := tr.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if f := tr.db.Metrics().Flush.Count; f < 20 {
		t.Fatalf("%d flushes, want every memtable flushed", f)
	}
	deadline := time.Now().Add(30 * time.Second)
	for tr.deepL0Bytes.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if tr.deepL0Bytes.Load() == 0 {
		t.Fatalf("no L0 compaction ran at a deep L0's raised rate under a 16 KiB/s budget: %+v", n.Stats().Trees[0])
	}
	if st := n.Stats().Trees[0]; st.ThrottledTime == 0 {
		t.Fatalf("compactions never waited for the budget: %+v", st)
	}
}
