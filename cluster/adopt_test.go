package cluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/wire"
)

// TestControllerRestartAdoptsEpoch: a lone controller splices a dead node
// out (epoch 2), then dies; started again from its YAML (epoch 1, nobody
// down), it must adopt the nodes' epoch from their gossip before it
// programs the switch or serves the layout, never push the older one.
func TestControllerRestartAdoptsEpoch(t *testing.T) {
	c, err := cluster.Start(cluster.Options{N: 4, R: 3, Dir: t.TempDir(), Controller: true, Round: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	cc := cluster.ControllerConfig{Round: 100 * time.Millisecond, CoarseEpoch: time.Minute}
	pl, err := c.StartPlane(ctx, cluster.PlaneConfig{Controller: cc})
	if err != nil {
		t.Fatal(err)
	}
	const victim = 2 // node 3
	if err := c.Crash(victim); err != nil {
		t.Fatal(err)
	}
	// Every live node holds the splice before the controller dies, so that
	// the end can tell a node pushed back from one not yet reached.
	waitFor(t, "node 3 spliced out at every live node", func() bool {
		if !slices.Contains(pl.Controller.Layout().Down(), victim+1) {
			return false
		}
		for i := range c.N() {
			if n := c.Node(i); n != nil && n.Layout().Epoch() != pl.Controller.Layout().Epoch() {
				return false
			}
		}
		return true
	})
	held := pl.Controller.Layout()
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	if c.Layout.Epoch() >= held.Epoch() {
		t.Fatalf("the YAML's epoch %d is not older than the nodes' %d: nothing to test", c.Layout.Epoch(), held.Epoch())
	}
	pl, err = c.StartPlane(ctx, cluster.PlaneConfig{Controller: cc})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	got := pl.Controller.Layout()
	if got.Epoch() != held.Epoch() || !slices.Equal(got.Down(), held.Down()) {
		t.Fatalf("restarted controller serves epoch %d down %v, the nodes hold epoch %d down %v", got.Epoch(), got.Down(), held.Epoch(), held.Down())
	}
	// The switch was programmed with the nodes' chains, not the YAML's.
	for p := range got.Partitions() {
		if pt, ok := pl.Switch.Partition(uint32(p)); !ok || slices.Contains(pt.Chain[:pt.R], wire.NodeID(victim+1)) {
			t.Fatalf("partition %d installed as %+v: routes to node %d, spliced out", p, pt, victim+1)
		}
	}
	// And the nodes keep the epoch: no older layout was gossiped over it.
	for i := range c.N() {
		if n := c.Node(i); n != nil && n.Layout().Epoch() != held.Epoch() {
			t.Fatalf("node %d at epoch %d, want %d", i+1, n.Layout().Epoch(), held.Epoch())
		}
	}
}
