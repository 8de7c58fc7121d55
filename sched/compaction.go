package sched

import (
	"fmt"
	"math"

	"github.com/netdir/netdir/wire"
)

// CompactionPlan is how a node's compaction budget is split among its trees
// (HATS §4.4): each tree above the floor is paced at its own rate, in
// proportion to its read share; the trees whose share would fall below the
// floor are pooled, and share one rate first come, first served, so that
// write-heavy trees that few read still progress.
type CompactionPlan struct {
	Rates  []float64 // bytes/s per tree; 0 for pooled trees
	Pooled []bool    // trees served from the pool
	Pool   float64   // bytes/s the pooled trees share; 0 when none is pooled
}

// Total is the sum of the plan's rates: every tree's and the pool's.
func (p CompactionPlan) Total() float64 {
	t := p.Pool
	for _, r := range p.Rates {
		t += r
	}
	return t
}

// CompactionRates splits budget bytes/s among trees by weight (a tree's read
// share E/Q: the expected load the coarse scheduler gives it, or its observed
// reads). Negative and NaN weights count as 0; all zero means equal shares.
// A tree whose proportional rate is below floor (or zero) joins the pool,
// whose rate is the pooled trees' proportional rates together, raised to
// floor (and at most budget); what the pool does not take is split again
// among the rest, until no tree left falls below the floor.
//
// Invariants, for budget > 0 and at least one tree: the rates and the pool
// sum to budget exactly (up to rounding); every unpooled tree gets at least
// floor; the unpooled trees' rates are in the ratio of their weights; the
// pool gets at least min(floor, budget) when it is not empty. A floor ≤ 0
// counts as 1 byte/s.
func CompactionRates(budget, floor float64, weights []float64) CompactionPlan {
	n := len(weights)
	p := CompactionPlan{Rates: make([]float64, n), Pooled: make([]bool, n)}
	if n == 0 || !(budget > 0) {
		return p
	}
	if !(floor > 0) {
		floor = 1
	}
	w := make([]float64, n)
	var total float64
	for i, x := range weights {
		if x > 0 && !math.IsInf(x, 1) {
			w[i] = x
			total += x
		}
	}
	if total == 0 {
		for i := range w {
			w[i] = 1
		}
		total = float64(n)
	}
	// The pool only grows, so this ends within n rounds.
	for range n + 1 {
		var pooledW, activeW float64
		for i := range w {
			if p.Pooled[i] {
				pooledW += w[i]
			} else {
				activeW += w[i]
			}
		}
		p.Pool = 0
		if pooledW > 0 || anyTrue(p.Pooled) {
			p.Pool = min(budget, max(floor, pooledW/total*budget))
		}
		rest := budget - p.Pool
		moved := false
		for i := range w {
			if p.Pooled[i] {
				continue
			}
			r := 0.0
			if activeW > 0 {
				r = w[i] / activeW * rest
			}
			if r < floor || r == 0 {
				p.Pooled[i] = true
				moved = true
			}
			p.Rates[i] = r
		}
		if !moved {
			break
		}
	}
	for i := range p.Rates {
		if p.Pooled[i] {
			p.Rates[i] = 0
		}
	}
	if !anyTrue(p.Pooled) {
		p.Pool = 0
	} else if allTrue(p.Pooled) {
		p.Pool = budget
	}
	return p
}

func anyTrue(b []bool) bool {
	for _, x := range b {
		if x {
			return true
		}
	}
	return false
}

func allTrue(b []bool) bool {
	for _, x := range b {
		if !x {
			return false
		}
	}
	return true
}

// TreeExpected splits the expected load E over each node's trees (chain
// positions), for compaction shares: every chain group (the partitions with
// one chain) carries the requests its members served at their positions in
// the epoch (requests[node][position], C), and E moves them by the group's
// split weights (weights[p] per chain member, as installed; nil or a zero
// total is even). A node that holds one position for several groups (not
// with ring placement) has its requests there divided among them by their
// partition counts. The result is requests per epoch, per node and
// position.
func TreeExpected(chains [][]wire.NodeID, weights [][]uint32, requests map[wire.NodeID][]uint64) map[wire.NodeID][]float64 {
	type slot struct {
		node wire.NodeID
		pos  int
	}
	// Partitions per (node, position) and per group.
	held := map[slot]int{}
	type group struct {
		chain []wire.NodeID
		parts []int
	}
	groups := map[string]*group{}
	var order []string
	for p, ch := range chains {
		key := fmt.Sprint(ch)
		g, ok := groups[key]
		if !ok {
			g = &group{chain: ch}
			groups[key] = g
			order = append(order, key)
		}
		g.parts = append(g.parts, p)
		for j, n := range ch {
			held[slot{n, j}]++
		}
	}
	out := map[wire.NodeID][]float64{}
	for _, ch := range chains {
		for j, n := range ch {
			if len(out[n]) <= j {
				out[n] = append(out[n], make([]float64, j+1-len(out[n]))...)
			}
		}
	}
	for _, key := range order {
		g := groups[key]
		var load float64
		for j, n := range g.chain {
			if r := requests[n]; j < len(r) && held[slot{n, j}] > 0 {
				load += float64(r[j]) * float64(len(g.parts)) / float64(held[slot{n, j}])
			}
		}
		// The group's mean split over its partitions.
		split := make([]float64, len(g.chain))
		for _, p := range g.parts {
			var w []uint32
			if p < len(weights) {
				w = weights[p]
			}
			var t float64
			for _, x := range w {
				t += float64(x)
			}
			for j := range split {
				if t > 0 && j < len(w) {
					split[j] += float64(w[j]) / t
				} else {
					split[j] += 1 / float64(len(split))
				}
			}
		}
		for j, n := range g.chain {
			out[n][j] += load * split[j] / float64(len(g.parts))
		}
	}
	return out
}

// DeepL0DoublingFiles is how many L0 files beyond the urgent depth double a
// tree's paced rate (DeepL0Rate).
const DeepL0DoublingFiles = 4

// DeepL0Rate is the paced rate of a tree whose L0 holds l0 files, urgent or
// more (the depth at which writes would soon stall): its rate, doubled at
// urgent and again every DeepL0DoublingFiles files beyond. A budget that
// cannot keep up with a tree's flushes then gives way by as much as the
// flushes need, not all at once: once L0 is deep the compactions take
// twice the tree's rate, and each step deeper twice again, so L0 stays
// within a few steps of urgent (the rate reaches any device's bandwidth
// within log2(bandwidth/rate) steps) while compaction's device time stays
// near the budget. Below urgent, and for rate ≤ 0 (unthrottled), it is
// rate.
func DeepL0Rate(rate float64, l0, urgent int64) float64 {
	if !(rate > 0) || urgent <= 0 || l0 < urgent {
		return rate
	}
	steps := float64(l0-urgent) / DeepL0DoublingFiles
	return rate * math.Exp2(1+min(steps, 32))
}
