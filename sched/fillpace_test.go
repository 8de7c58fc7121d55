package sched

import (
	"testing"
	"time"
)

// TestFillPace: the rate climbs to Max while chunks see no queueing, halves
// when their delay passes the base by more than Target (once per Target),
// never leaves [Min, Max], and climbs again when the queues drain.
func TestFillPace(t *testing.T) {
	const hi, lo = 4 << 20, 128 << 10
	p := NewFillPace(hi, lo, 2*time.Millisecond)
	now := time.Unix(0, 0)
	step := func(d time.Duration) float64 {
		now = now.Add(d)
		return p.Observe(now, d)
	}
	if r := p.Rate(); r != hi/4 {
		t.Fatalf("first rate %v, want max/4", r)
	}
	for range 20 {
		step(time.Millisecond)
	}
	if r := p.Rate(); r != hi {
		t.Fatalf("unloaded: rate %v, want max %v", r, float64(hi))
	}
	if r := step(10 * time.Millisecond); r != hi/2 {
		t.Fatalf("a chunk 9 ms above the base: rate %v, want max/2", r)
	}
	// Within Target of the cut: no second halving for the same queue.
	now = now.Add(-9 * time.Millisecond)
	if r := p.Observe(now.Add(time.Millisecond), 10*time.Millisecond); r != hi/2 {
		t.Fatalf("second slow chunk within Target: rate %v, want max/2", r)
	}
	for range 50 {
		step(20 * time.Millisecond)
	}
	if r := p.Rate(); r != lo {
		t.Fatalf("loaded: rate %v, want min %v", r, float64(lo))
	}
	for range 40 {
		step(time.Millisecond)
	}
	if r := p.Rate(); r != hi {
		t.Fatalf("drained: rate %v, want max", r)
	}
	if r := NewFillPace(hi, 2*hi, time.Millisecond).Observe(now, -time.Second); r > hi {
		t.Fatalf("min above max: rate %v", r)
	}
}

// TestFillPaceBaseFollows: a delay that lasts past two base windows is the
// new base, so the rate climbs again on a slower machine.
func TestFillPaceBaseFollows(t *testing.T) {
	p := NewFillPace(1<<20, 1<<10, time.Millisecond)
	now := time.Unix(0, 0)
	p.Observe(now, time.Millisecond)
	for now.Before(time.Unix(0, 0).Add(3 * FillBaseWindow)) {
		now = now.Add(50 * time.Millisecond)
		p.Observe(now, 50*time.Millisecond)
	}
	if r := p.Rate(); r != 1<<20 {
		t.Fatalf("after %v at 50 ms: rate %v, want max", 3*FillBaseWindow, r)
	}
}
