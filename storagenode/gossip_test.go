package storagenode

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/layout"
)

// TestRunGossip: a node gossips its trees' stats (versions rising, debt
// included), and the controller's expected load for it reaches its
// compaction scheduler.
func TestRunGossip(t *testing.T) {
	m, err := layout.New(layout.Config{PartitionBits: 2, Replicas: 1, Nodes: []layout.Node{{ID: 1, Addr: "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := Start(Options{ID: 1, Dir: filepath.Join(t.TempDir(), "n"), Layout: m, Workers: 1, MaxOps: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctl, err := gossip.Start(gossip.Config{Name: "controller", Bind: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	g, err := gossip.Start(gossip.Config{Name: "node-1", Bind: "127.0.0.1:0", Seeds: []string{ctl.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	n.trees[0].reads.Add(10)
	n.trees[0].readNanos.Add(10_000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.RunGossip(ctx, g, 50*time.Millisecond)
	var first uint64
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, ok := ctl.Stats()[1]
		if ok && first == 0 {
			first = s.Version
		}
		if ok && s.Version > first {
			if len(s.Trees) != 1 || s.Trees[0].Reads != 10 || s.Trees[0].ReadNanos != 10_000 || s.Capacity != 500 {
				t.Fatalf("gossiped %+v", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controller's member has %+v", ctl.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := ctl.PublishExpected(gossip.Expected{Node: 1, Version: gossip.NextVersion(), Trees: []float64{42}}); err != nil {
		t.Fatal(err)
	}
	for {
		n.sched.mu.Lock()
		e, ok := n.sched.expected[0]
		n.sched.mu.Unlock()
		if ok && e == 42 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expected load never reached the compaction scheduler")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
