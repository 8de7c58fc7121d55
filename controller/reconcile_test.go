package controller

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/netdir/netdir/wire"
)

// TestReconcile: the leader's reconciliation splices out the nodes last
// known dead that are still in the chains, adds back the spliced-out nodes
// last known alive, and leaves the nodes it has no news of, so a death
// that a follower heard (and could not apply) is applied by the next
// leader.
func TestReconcile(t *testing.T) {
	m, err := ringLayout(t, 5).Without(4)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = m.Without(5); err != nil {
		t.Fatal(err)
	}
	alive := map[wire.NodeID]bool{1: true, 2: false, 4: true, 5: false}
	got := Reconcile(m, alive)
	want := []LivenessChange{{Node: 2, Alive: false}, {Node: 4, Alive: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("Reconcile = %v, want %v", got, want)
	}
	// Applied, nothing is left to do.
	if m, err = m.Without(2); err != nil {
		t.Fatal(err)
	}
	if m, err = m.WithTail(4); err != nil {
		t.Fatal(err)
	}
	if got := Reconcile(m, alive); len(got) != 0 {
		t.Fatalf("after applying: %v, want nothing", got)
	}
	if got := Reconcile(m, nil); len(got) != 0 {
		t.Fatalf("no news: %v, want nothing", got)
	}
}

// TestSettled: a node seen up for less than the hold is left out (its
// liveness unknown, so Reconcile leaves it spliced out); a node seen dead
// counts at once, and one up long enough counts as alive.
func TestSettled(t *testing.T) {
	now := time.Unix(100, 0)
	alive := map[wire.NodeID]bool{1: true, 2: true, 3: false}
	up := map[wire.NodeID]time.Time{1: now.Add(-2 * time.Second), 2: now.Add(-300 * time.Millisecond)}
	got := Settled(alive, up, now, time.Second)
	want := map[wire.NodeID]bool{1: true, 3: false}
	if !maps.Equal(got, want) {
		t.Fatalf("Settled = %v, want %v", got, want)
	}
	if got := Settled(alive, up, now.Add(time.Second), time.Second); !maps.Equal(got, alive) {
		t.Fatalf("a second later: %v, want %v", got, alive)
	}
}
