package sched

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/netdir/netdir/wire"
)

const mib = 1 << 20

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func TestCompactionRatesFollowReadShares(t *testing.T) {
	p := CompactionRates(64*mib, 4*mib, []float64{600, 300, 100})
	want := []float64{38.4 * mib, 19.2 * mib, 6.4 * mib}
	for i := range want {
		if p.Pooled[i] || !near(p.Rates[i], want[i]) {
			t.Fatalf("tree %d: rate %.0f pooled %v, want %.0f unpooled", i, p.Rates[i], p.Pooled[i], want[i])
		}
	}
	if p.Pool != 0 || !near(p.Total(), 64*mib) {
		t.Fatalf("pool %.0f total %.0f, want 0 and the budget", p.Pool, p.Total())
	}
}

func TestCompactionRatesFloorPoolsColdTrees(t *testing.T) {
	// Tree 2 is read 1% of the time: 0.64 MiB/s by share, below the floor,
	// so it joins the pool, which gets the floor; the rest is split 2:1.
	p := CompactionRates(64*mib, 4*mib, []float64{66, 33, 1})
	if !p.Pooled[2] || p.Pooled[0] || p.Pooled[1] {
		t.Fatalf("pooled %v, want only tree 2", p.Pooled)
	}
	if !near(p.Pool, 4*mib) {
		t.Fatalf("pool %.0f, want the floor", p.Pool)
	}
	if !near(p.Rates[0], 40*mib) || !near(p.Rates[1], 20*mib) {
		t.Fatalf("rates %v, want 40 and 20 MiB/s", p.Rates)
	}
	if !near(p.Total(), 64*mib) {
		t.Fatalf("total %.0f", p.Total())
	}
}

func TestCompactionRatesEdges(t *testing.T) {
	// No reads anywhere: equal shares.
	p := CompactionRates(60, 1, []float64{0, 0, 0})
	for i, r := range p.Rates {
		if !near(r, 20) || p.Pooled[i] {
			t.Fatalf("zero weights: %v %v", p.Rates, p.Pooled)
		}
	}
	// One tree has every read: the others share the floor in the pool.
	p = CompactionRates(64, 4, []float64{5, 0, math.NaN()})
	if !near(p.Rates[0], 60) || !p.Pooled[1] || !p.Pooled[2] || !near(p.Pool, 4) {
		t.Fatalf("one reader: %+v", p)
	}
	// A floor above the budget pools everything at the budget.
	p = CompactionRates(10, 20, []float64{1, 1})
	if !p.Pooled[0] || !p.Pooled[1] || !near(p.Pool, 10) || !near(p.Total(), 10) {
		t.Fatalf("floor over budget: %+v", p)
	}
	// Nothing to split.
	if p := CompactionRates(0, 4, []float64{1}); p.Total() != 0 {
		t.Fatalf("zero budget: %+v", p)
	}
	if p := CompactionRates(64, 4, nil); p.Total() != 0 || len(p.Rates) != 0 {
		t.Fatalf("no trees: %+v", p)
	}
}

// TestCompactionRatesInvariants checks the documented invariants on random
// weights: the total is the budget, unpooled trees get the floor and are in
// the ratio of their weights, the pool gets the floor.
func TestCompactionRatesInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 5000 {
		n := 1 + rng.IntN(6)
		w := make([]float64, n)
		for i := range w {
			switch rng.IntN(4) {
			case 0:
				w[i] = 0
			case 1:
				w[i] = rng.Float64() * 10
			default:
				w[i] = rng.Float64() * 1000
			}
		}
		budget := float64(1+rng.IntN(128)) * mib
		floor := float64(rng.IntN(16)+1) * mib / 2
		p := CompactionRates(budget, floor, w)
		if !near(p.Total(), budget) {
			t.Fatalf("%d: total %.0f, budget %.0f (w %v floor %.0f)", iter, p.Total(), budget, w, floor)
		}
		ref := -1
		for i := range w {
			if p.Pooled[i] {
				if p.Rates[i] != 0 {
					t.Fatalf("%d: pooled tree %d has its own rate", iter, i)
				}
				continue
			}
			if p.Rates[i] < floor*(1-1e-9) {
				t.Fatalf("%d: tree %d at %.0f, under the floor %.0f", iter, i, p.Rates[i], floor)
			}
			if ref < 0 {
				ref = i
			} else if w[ref] > 0 && !near(p.Rates[i]/p.Rates[ref], w[i]/w[ref]) {
				t.Fatalf("%d: rates %v not in the ratio of weights %v", iter, p.Rates, w)
			}
		}
		if anyTrue(p.Pooled) && p.Pool < min(floor, budget)*(1-1e-9) {
			t.Fatalf("%d: pool %.0f under the floor", iter, p.Pool)
		}
	}
}

func TestTreeExpected(t *testing.T) {
	// Ring placement of 3 nodes, R=2: groups [1 2], [2 3], [3 1], two
	// partitions each.
	chains := [][]wire.NodeID{{1, 2}, {2, 3}, {3, 1}, {1, 2}, {2, 3}, {3, 1}}
	req := map[wire.NodeID][]uint64{1: {100, 30}, 2: {60, 40}, 3: {20, 80}}
	// Even weights: each group's requests split evenly over its chain.
	e := TreeExpected(chains, nil, req)
	want := map[wire.NodeID][]float64{1: {70, 25}, 2: {70, 70}, 3: {25, 70}}
	for n, r := range want {
		for j := range r {
			if !near(e[n][j], r[j]) {
				t.Fatalf("even split: %v, want %v", e, want)
			}
		}
	}
	// Group [1 2] (140 requests) moves to 3:1 towards node 1.
	w := [][]uint32{{3, 1}, nil, nil, {3, 1}, nil, nil}
	e = TreeExpected(chains, w, req)
	if !near(e[1][0], 105) || !near(e[2][1], 35) {
		t.Fatalf("3:1 split: %v", e)
	}
	var total, served float64
	for n, r := range req {
		for j := range r {
			total += e[n][j]
			served += float64(r[j])
		}
	}
	if !near(total, served) {
		t.Fatalf("E totals %.1f, the trees served %.1f", total, served)
	}
}

func TestDeepL0Rate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rate       float64
		l0, urgent int64
		want       float64
	}{
		{"shallow L0 keeps the rate", mib, 31, 32, mib},
		{"urgent doubles it", mib, 32, 32, 2 * mib},
		{"between steps", mib, 34, 32, 2 * math.Sqrt2 * mib},
		{"one step deeper", mib, 36, 32, 4 * mib},
		{"at the write stop", mib, 64, 32, 512 * mib},
		{"unthrottled stays unthrottled", 0, 64, 32, 0},
		{"no urgent depth", mib, 64, 0, mib},
		{"bounded growth", mib, 1 << 40, 32, math.Exp2(33) * mib},
	} {
		if got := DeepL0Rate(tc.rate, tc.l0, tc.urgent); math.Abs(got-tc.want) > 1e-6*tc.want {
			t.Errorf("%s: DeepL0Rate(%g, %d, %d) = %g, want %g", tc.name, tc.rate, tc.l0, tc.urgent, got, tc.want)
		}
	}
	// Monotone in depth: a deeper L0 never compacts slower.
	prev := 0.0
	for l0 := int64(0); l0 <= 80; l0++ {
		r := DeepL0Rate(mib, l0, 32)
		if r < prev {
			t.Fatalf("rate falls from %g to %g at %d files", prev, r, l0)
		}
		prev = r
	}
}
