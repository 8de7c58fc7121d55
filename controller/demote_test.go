package controller

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// deafHead is a head that does not answer: its promotes fail, and so do
// its demotes until deaf runs out. It records what it holds promoted, as a
// head does when the promote went through but its answer was lost.
type deafHead struct {
	mu       sync.Mutex
	deaf     int // demotes that fail before one is answered
	promoted map[string]bool
	promote  error
}

func (s *deafHead) Promote(_ context.Context, _ layout.Node, key []byte, _ []layout.Node, _ uint16) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.promoted[string(key)] = true
	return 0, s.promote
}

func (s *deafHead) Demote(_ context.Context, _ layout.Node, key []byte, _ []layout.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deaf > 0 {
		s.deaf--
		return errors.New("no answer after 5 tries")
	}
	delete(s.promoted, string(key))
	return nil
}

func (s *deafHead) holds(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.promoted[key]
}

// deafController is a controller whose heads answer no promote and the
// first deaf demotes.
func deafController(t *testing.T, deaf int) (*Controller, *deafHead) {
	st := &deafHead{deaf: deaf, promoted: map[string]bool{}, promote: errors.New("no answer after 5 tries")}
	c, err := New(Config{Layout: ringLayout(t, 8), PromoteMin: 10}, []DataPlane{newCorePlane(t)}, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, st
}

// promoteHot promotes the key "hot" as a hot-key round would.
func promoteHot(ctx context.Context, c *Controller) error {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	_, err := c.promote(ctx, []byte("hot"), 0.5, map[wire.NodeID]float64{}, false)
	return err
}

// A head that missed both a promote's answer and the demote that undoes
// it would refuse the key's unstamped writes for good: the controller asks
// it again each round until it answers.
func TestUnansweredDemoteRetried(t *testing.T) {
	ctx := context.Background()
	c, st := deafController(t, 3)
	err := promoteHot(ctx, c)
	if err == nil || !st.holds("hot") {
		t.Fatalf("promote: err %v, head holds it %v: want a failed promote the head went through", err, st.holds("hot"))
	}
	// undoPromote took one failed demote; two more rounds fail, the third
	// demotes.
	for round := 1; round <= 3; round++ {
		if err := c.HotKeyRound(ctx); err != nil {
			t.Fatal(err)
		}
		if want := round < 3; st.holds("hot") != want {
			t.Fatalf("after round %d the head holds the key promoted: %v, want %v", round, st.holds("hot"), want)
		}
	}
	if len(c.demotes) != 0 {
		t.Fatalf("demotes still owed: %v", c.demotes)
	}
}

// A promotion that goes through supersedes a demote still owed for the
// key: retried after it, the demote would undo the new promotion.
func TestPromoteSupersedesOwedDemote(t *testing.T) {
	ctx := context.Background()
	c, st := deafController(t, 2)
	if err := promoteHot(ctx, c); err == nil {
		t.Fatal("promote answered; want it failed")
	}
	st.mu.Lock()
	st.promote = nil // the head answers again
	st.mu.Unlock()
	if err := promoteHot(ctx, c); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.HotKeyRound(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !st.holds("hot") || !slices.ContainsFunc(c.Entries(), func(e Entry) bool { return string(e.Key) == "hot" }) {
		t.Fatalf("head holds it %v, entries %v: want the second promotion to stand", st.holds("hot"), c.Entries())
	}
}

// A head the layout marks down owes its demote until it is back: asking it
// each round would only wait out the retries.
func TestOwedDemoteWaitsForDownHead(t *testing.T) {
	ctx := context.Background()
	c, st := deafController(t, 1)
	err := promoteHot(ctx, c)
	if err == nil || len(c.demotes) != 1 {
		t.Fatalf("promote: err %v, demotes owed %d: want a failed promote owing one", err, len(c.demotes))
	}
	var head wire.NodeID
	for _, d := range c.demotes {
		head = d.head
	}
	if err := c.NodeDown(ctx, head); err != nil {
		t.Fatal(err)
	}
	if err := c.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	if !st.holds("hot") || len(c.demotes) != 1 {
		t.Fatalf("head %d is down: it was asked (holds the key: %v, owed: %d)", head, st.holds("hot"), len(c.demotes))
	}
	if err := c.NodeUp(ctx, head); err != nil {
		t.Fatal(err)
	}
	if err := c.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	if st.holds("hot") || len(c.demotes) != 0 {
		t.Fatalf("head %d is back: holds the key %v, owed %d; want it demoted", head, st.holds("hot"), len(c.demotes))
	}
}
