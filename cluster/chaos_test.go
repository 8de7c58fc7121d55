package cluster_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/storagenode"
)

var chaosSeed = flag.Uint64("chaos-seed", 1, "seed of TestChaos")

// TestChaos is the bounded chaos suite (issue 15, item 6; the long form is
// `netdir bench --experiment chaos`): histories of clients through the
// switch while one of these, picked at random, is killed and restarted:
// the node at the head, the middle, the tail of a key's chain or its
// extra, the switch (which comes back empty), or the leader of the three
// raft-replicated controllers; with datagram loss, delay and reordering on
// every node's traffic and the leader pinning and unpinning the keys. No
// history may be non-linearizable and no acknowledged write may be lost.
// The first 6 histories kill each of the six once.
func TestChaos(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, pl := startReplicatedPlane(t, ctx, *chaosSeed, true)
	histories := 8
	if testing.Short() {
		histories = 6
	}
	res, err := c.Chaos(ctx, cluster.ChaosConfig{Histories: histories, Seed: *chaosSeed, Plane: pl,
		History: cluster.HistoryConfig{Clients: 4, OpsPer: 30, Keys: 3, Gets: 45, Puts: 40, OpTimeout: 5 * time.Second,
			Client: client.Options{Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond}},
		Faults: cluster.ChaosFaults, Down: [2]time.Duration{100 * time.Millisecond, 2 * time.Second},
		Settle: 20 * time.Second, Visualize: t.ArtifactDir(), Log: t.Logf})
	if err != nil {
		t.Fatalf("seed %d: %v", *chaosSeed, err)
	}
	for _, f := range res.Failures {
		t.Error(f)
	}
	if res.Violations > 0 || res.Lost > 0 {
		t.Fatalf("seed %d: %d violations, %d acknowledged writes lost (rerun with -chaos-seed %d)", *chaosSeed, res.Violations, res.Lost, *chaosSeed)
	}
	t.Logf("seed %d: %d histories, %d ops linearizable (%d undecided), %d keys' acknowledged writes kept, %d pins; kills %v of %v",
		*chaosSeed, res.Histories, res.Ops, res.Undecided, res.Acked, res.Pins, res.Kills, cluster.ChaosRoles)
}

// startReplicatedPlane starts 4 nodes in chains of 3, with proxies (the
// datagram faults) if asked, and a switch programmed over P4Runtime by
// three raft-replicated controllers, as deployed: every splice and rejoin
// re-syncs the switch's tables. Both stop when the test ends.
func startReplicatedPlane(t *testing.T, ctx context.Context, seed uint64, proxy bool) (*cluster.Cluster, *cluster.Plane) {
	t.Helper()
	c, err := cluster.Start(cluster.Options{N: 4, R: 3, Dir: t.TempDir(), Proxy: proxy, Seed: seed,
		Controller: true, Controllers: 3, Round: 100 * time.Millisecond,
		Node: func(o *storagenode.Options) { o.RetransmitAfter = 30 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	schema, err := p4rt.LoadSchema("../p4/build/netdir.p4info.txtpb")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := c.StartPlane(ctx, cluster.PlaneConfig{Schema: schema,
		Controller: cluster.ControllerConfig{Round: 100 * time.Millisecond, CoarseEpoch: time.Minute}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	return c, pl
}
