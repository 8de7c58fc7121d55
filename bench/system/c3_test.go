package system

import (
	"math"
	"testing"
	"time"

	"github.com/netdir/netdir/wire"
)

func newTestC3(n int) *c3Target {
	return &c3Target{servers: make([]c3Server, n)}
}

// TestC3Score checks C3's score Ψ = R − 1/μ + q̂³/μ with q̂ = 1 + os·n + q on
// learnt values, and the EWMA with α = 0.9.
func TestC3Score(t *testing.T) {
	var s c3Server
	if !math.IsInf(s.score(), -1) {
		t.Fatalf("unlearnt score %g, want -Inf (explored first)", s.score())
	}
	s.learn(400*time.Microsecond, 3) // R = 400 µs, q = 3, service 400/(1+3) = 100 µs
	want := 400e3 - 100e3 + 4*4*4*100e3
	if got := s.score(); math.Abs(got-want) > 1e-6 {
		t.Fatalf("score %g, want %g", got, want)
	}
	s.outstanding.Add(2) // q̂ = 1 + 2 + 3
	want = 400e3 - 100e3 + 6*6*6*100e3
	if got := s.score(); math.Abs(got-want) > 1e-6 {
		t.Fatalf("score with 2 outstanding %g, want %g", got, want)
	}
	s.learn(1400*time.Microsecond, 13) // EWMA: R = 0.9·400 + 0.1·1400 µs, q = 0.9·3 + 0.1·13
	if r, q := s.r, s.q; math.Abs(r-500e3) > 1e-6 || math.Abs(q-4) > 1e-9 {
		t.Fatalf("EWMA R %g q %g, want 500000 and 4", r, q)
	}
}

// TestC3Choose: the replica with the shorter queue wins, unexplored replicas
// are tried first, and ties spread over the tied replicas.
func TestC3Choose(t *testing.T) {
	c := newTestC3(3)
	chain := []wire.NodeID{1, 2, 3}
	for i := range 3 {
		c.servers[i].learn(time.Millisecond, 0)
	}
	c.servers[0].learn(time.Millisecond, 50) // node 1 reports a long queue
	counts := map[wire.NodeID]int{}
	for range 3000 {
		counts[c.choose(chain)]++
	}
	if counts[1] != 0 {
		t.Errorf("node with the long queue chosen %d times", counts[1])
	}
	for _, id := range []wire.NodeID{2, 3} {
		if counts[id] < 1200 {
			t.Errorf("tied node %d chosen %d of 3000 times, want about half", id, counts[id])
		}
	}
	c2 := newTestC3(3)
	c2.servers[0].learn(time.Microsecond, 0)
	c2.servers[1].learn(time.Microsecond, 0)
	if got := c2.choose(chain); got != 3 {
		t.Errorf("chose %d, want the unexplored node 3", got)
	}
	// Outstanding requests count against a replica (concurrency compensation).
	c3 := newTestC3(2)
	c3.servers[0].learn(time.Millisecond, 0)
	c3.servers[1].learn(time.Millisecond, 0)
	c3.servers[0].outstanding.Add(4)
	if got := c3.choose([]wire.NodeID{1, 2}); got != 2 {
		t.Errorf("chose %d, want 2 (node 1 has 4 outstanding)", got)
	}
}
