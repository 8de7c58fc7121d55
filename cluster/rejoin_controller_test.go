package cluster_test

import (
	"context"
	"testing"
	"time"
)

// TestRestartedControllerJoinsAtOnce: after every node restarted (each
// now gossips on a new port, so the addresses the controllers started
// with are gone), a killed raft leader that is started again joins gossip
// through the other controllers at once: it holds every node's gossiped
// state when its start returns, rather than after the nodes' next rejoin.
func TestRestartedControllerJoinsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, pl := startReplicatedPlane(t, ctx, 1, false)
	for i := range c.N() {
		if err := c.Crash(i); err != nil {
			t.Fatal(err)
		}
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Settle(ctx, pl, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	i, err := pl.KillLeader()
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.RestartController(ctx, i); err != nil {
		t.Fatal(err)
	}
	restarted := pl.Replica(i)
	if got := len(restarted.NodeStats()); got != c.N() {
		t.Fatalf("the restarted controller holds the gossiped stats of %d nodes of %d", got, c.N())
	}
}
