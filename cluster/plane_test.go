package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/directory"
)

// TestPlaneTelemetry: the controller of an in-process plane learns what it
// learns in a deployment only through the deployment's paths: the nodes'
// stats over gossip (its gossiped view fills), and their hot keys over its
// gRPC API (a key read far more than any other gets promoted, which needs
// the key's name from a node's report). The test never hands the
// controller anything directly. A second plane, with a new controller on
// the same addresses, hears from the nodes again: gossip recovers when a
// new member appears where the old one left.
func TestPlaneTelemetry(t *testing.T) {
	const n = 3
	c, err := cluster.Start(cluster.Options{N: n, Dir: t.TempDir(), Controller: true, Round: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for run := range 2 {
		p, err := c.StartPlane(ctx, cluster.PlaneConfig{
			Directory:  directory.Config{Policy: directory.PolicyNetdir},
			Controller: cluster.ControllerConfig{Round: 100 * time.Millisecond, PromoteMin: 5},
		})
		if err != nil {
			t.Fatalf("plane %d: %v", run, err)
		}
		ctl := p.Controller
		for len(ctl.NodeStats()) < n {
			if ctx.Err() != nil {
				t.Fatalf("plane %d: gossiped stats of %d nodes, want %d", run, len(ctl.NodeStats()), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Not only the table exchanged on joining: new versions keep coming.
		first := ctl.NodeStats()
		for id, s := range first {
			for ctl.NodeStats()[id].Version == s.Version {
				if ctx.Err() != nil {
					t.Fatalf("plane %d: node %d's gossiped stats stay at version %d", run, id, s.Version)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		cl, err := c.Client(client.Options{Service: c.DataPlane()})
		if err != nil {
			t.Fatal(err)
		}
		hot := []byte("hot")
		if _, err := cl.Put(ctx, hot, []byte("v")); err != nil {
			t.Fatal(err)
		}
		for promoted := false; !promoted; {
			if ctx.Err() != nil {
				t.Fatalf("plane %d: %q never promoted", run, hot)
			}
			for range 20 {
				if _, _, err := cl.Get(ctx, hot); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range ctl.Entries() {
				promoted = promoted || string(e.Key) == string(hot)
			}
		}
		ctl.StopLoops()
		if err := ctl.Unpin(ctx, hot); err != nil {
			t.Fatal(err)
		}
		cl.Close()
		if err := p.Close(); err != nil {
			t.Fatalf("plane %d: close: %v", run, err)
		}
	}
}
