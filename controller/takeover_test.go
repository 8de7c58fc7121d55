package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// TestTakeOverGossipsLayout: a leader that committed a layout died before
// gossiping it, so the nodes still hold the older epoch (and would answer
// the new leader's re-sync with wrong-node). The controller that takes
// over, which holds the layout from the log, gossips it to the nodes.
func TestTakeOverGossipsLayout(t *testing.T) {
	c, _, _ := testController(t)
	epochs := gossipWithNode(t, c)
	// The layout reaches this controller's state as a follower's does:
	// from the log, never gossiped.
	m := applyLayoutWithout(t, c, 2)
	if err := c.TakeOver(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitEpoch(t, "the node", epochs, m.Epoch())
}

// TestLeaderCatchesUpLayout: the leader's layout command committed although
// its apply failed (a timeout, a lead lost and won back), so SetLayout
// stopped before the nodes and the data planes had it. The leader's
// reconfiguration loop notices that gossip carries an older layout and
// distributes it: to the nodes, then to every data plane.
func TestLeaderCatchesUpLayout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &layoutPlane{corePlane: newCorePlane(t), epochs: make(chan uint32, 16)}
	c, err := New(Config{Layout: ringLayout(t, 8)}, []DataPlane{p}, &recStorage{promoted: map[string][]wire.NodeID{}})
	if err != nil {
		t.Fatal(err)
	}
	epochs := gossipWithNode(t, c)
	m := applyLayoutWithout(t, c, 2)
	go c.RunReconfig(ctx)
	awaitEpoch(t, "the node", epochs, m.Epoch())
	awaitEpoch(t, "the data plane", p.epochs, m.Epoch())
}

// layoutPlane is a data plane that reports the epoch of every layout it is
// set up with.
type layoutPlane struct {
	*corePlane
	epochs chan uint32
}

func (p *layoutPlane) Setup(ctx context.Context, m *layout.Map, vsb []uint32) error {
	p.epochs <- m.Epoch()
	return p.corePlane.Setup(ctx, m, vsb)
}

// gossipWithNode attaches a gossip member to c and starts a node's that
// joins it; it returns the epochs of the layouts the node hears.
func gossipWithNode(t *testing.T, c *Controller) <-chan uint32 {
	t.Helper()
	cg, err := gossip.Start(gossip.Config{Name: "controller", Bind: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Close() })
	c.AttachGossip(cg)
	epochs := make(chan uint32, 16)
	ng, err := gossip.Start(gossip.Config{Name: "node-1", Bind: "127.0.0.1:0", Seeds: []string{cg.Addr()},
		OnLayout: func(b []byte) {
			if m, err := layout.Parse(b); err == nil {
				epochs <- m.Epoch()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ng.Close() })
	return epochs
}

// applyLayoutWithout commits c's layout without node id, as a command
// alone: nothing distributes it.
func applyLayoutWithout(t *testing.T, c *Controller, id wire.NodeID) *layout.Map {
	t.Helper()
	m, err := c.Layout().Without(id)
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.Config()
	if err := c.repl.apply(command{Op: opLayout, Layout: &cfg, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return m
}

// awaitEpoch waits up to 5 s for epoch on epochs.
func awaitEpoch(t *testing.T, who string, epochs <-chan uint32, epoch uint32) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e := <-epochs:
			if e == epoch {
				return
			}
		case <-timeout:
			t.Fatalf("%s never got layout epoch %d", who, epoch)
		}
	}
}

// TestNewLeaderKeepsSpareClock: a node spliced out a minute ago, with
// SpareAfter 30 s, is replaced by spares at the first check of a
// controller that takes over from a snapshot of the state, rather than
// 30 s after that controller first saw it down.
func TestNewLeaderKeepsSpareClock(t *testing.T) {
	ctx := context.Background()
	old, _, _ := testController(t)
	m, err := old.Layout().Without(2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.Config()
	spliced := time.Now().Add(-time.Minute)
	if err := old.repl.apply(command{Op: opLayout, Layout: &cfg, At: spliced}); err != nil {
		t.Fatal(err)
	}
	c, _, _ := testController(t)
	c.cfg.SpareAfter = 30 * time.Second
	restoreSnapshot(t, old, c)
	c.replaceDown(ctx, map[wire.NodeID]time.Time{}, time.Now())
	if n := c.Layout().Placed(2); n != 0 {
		t.Fatalf("node 2, down since %v, still placed in %d chains: the new leader restarted its clock", spliced, n)
	}
}

// TestSparesDue: a dated node is due SpareAfter after its date; an undated
// one from when the controller first saw it down; a node back up is
// forgotten.
func TestSparesDue(t *testing.T) {
	m, err := ringLayout(t, 6).Without(2)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = m.Without(5); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	since := map[wire.NodeID]time.Time{2: now.Add(-10 * time.Second)}
	seen := map[wire.NodeID]time.Time{4: now} // node 4 is up again
	if due := SparesDue(m, since, seen, now, 5*time.Second); !slices.Equal(due, []wire.NodeID{2}) {
		t.Fatalf("due %v, want [2]", due)
	}
	if _, ok := seen[4]; ok || !seen[5].Equal(now) {
		t.Fatalf("seen %v: want node 5 from now, node 4 forgotten", seen)
	}
	if due := SparesDue(m, since, seen, now.Add(5*time.Second), 5*time.Second); !slices.Equal(due, []wire.NodeID{2, 5}) {
		t.Fatalf("5 s later due %v, want [2 5]", due)
	}
}

// TestLayoutDatesDown: a layout command dates the nodes it newly marks
// down with its time, keeps the dates of nodes still down, and forgets
// nodes back up.
func TestLayoutDatesDown(t *testing.T) {
	c, _, _ := testController(t)
	apply := func(m *layout.Map, at time.Time) {
		t.Helper()
		cfg := m.Config()
		if err := c.repl.apply(command{Op: opLayout, Layout: &cfg, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Unix(1000, 0)
	m, err := c.Layout().Without(2)
	if err != nil {
		t.Fatal(err)
	}
	apply(m, t0)
	if m, err = m.Without(3); err != nil {
		t.Fatal(err)
	}
	apply(m, t0.Add(time.Second))
	if m, err = m.WithTail(2); err != nil {
		t.Fatal(err)
	}
	apply(m, t0.Add(2*time.Second))
	want := map[wire.NodeID]time.Time{3: t0.Add(time.Second)}
	if len(c.st.downSince) != 1 || !c.st.downSince[3].Equal(want[3]) {
		t.Fatalf("down since %v, want %v", c.st.downSince, want)
	}
}
