package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// TestChainReconfiguration kills, in turn, the head, a middle member and
// the tail of a key's chain while clients write and read it; the
// controller, hearing of the death through gossip, splices the node out
// with a new epoch and adds it back as tail once it restarts. Every
// history must be linearizable, and every acknowledged write must survive.
func TestChainReconfiguration(t *testing.T) {
	c, err := cluster.Start(cluster.Options{N: 4, R: 3, Dir: t.TempDir(), Controller: true, Round: 100 * time.Millisecond,
		Node: func(o *storagenode.Options) { o.RetransmitAfter = 30 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	pl, err := c.StartPlane(ctx, cluster.PlaneConfig{
		Controller: cluster.ControllerConfig{Round: 100 * time.Millisecond, CoarseEpoch: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	for round, role := range []string{"head", "middle", "tail"} {
		key0 := fmt.Sprintf("reconf-r%d-k0", round) // fresh keys: the model starts empty
		lay := pl.Controller.Layout()
		ch := lay.ChainOf(wire.HashKey([]byte(key0)))
		pos := map[string]int{"head": 0, "middle": 1, "tail": len(ch) - 1}[role]
		victim := int(ch[pos]) - 1
		hist := killHistory(t, c, round, victim)
		checkHistory(t, hist, fmt.Sprintf("killing the %s (node %d)", role, victim+1))
		waitFor(t, fmt.Sprintf("node %d spliced out", victim+1), func() bool {
			return slices.Contains(pl.Controller.Layout().Down(), ch[pos]) && c.CurrentLayout().Epoch() > lay.Epoch()
		})
		after := pl.Controller.Layout()
		if after.Epoch() <= lay.Epoch() || slices.Contains(after.ChainOf(wire.HashKey([]byte(key0))), ch[pos]) {
			t.Fatalf("killing the %s (node %d): layout epoch %d→%d, chain %v→%v", role, victim+1, lay.Epoch(), after.Epoch(),
				ch, after.ChainOf(wire.HashKey([]byte(key0))))
		}
		checkAcked(t, c, hist.Acked)
		// Back: the node catches up and rejoins as tail.
		if err := c.Restart(victim); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("node %d rejoins", victim+1), func() bool {
			m := pl.Controller.Layout()
			n := c.Node(victim)
			return !slices.Contains(m.Down(), ch[pos]) && n != nil && n.Layout().Epoch() == m.Epoch() && n.Ready()
		})
		checkAcked(t, c, hist.Acked)
		t.Logf("%s (node %d) killed: %d ops linearizable, %d acknowledged writes kept; epoch now %d",
			role, victim+1, len(hist.Ops), len(hist.Acked), pl.Controller.Layout().Epoch())
	}
}

// killHistory runs clients over a few keys and crashes node victim early
// in the run.
func killHistory(t *testing.T, c *cluster.Cluster, round, victim int) cluster.History {
	crashed := make(chan struct{})
	go func() {
		defer close(crashed)
		time.Sleep(50 * time.Millisecond)
		if err := c.Crash(victim); err != nil {
			t.Errorf("crash: %v", err)
		}
	}()
	h, err := c.RunHistory(cluster.HistoryConfig{Clients: 4, OpsPer: 40, Keys: 3, Prefix: fmt.Sprintf("reconf-r%d", round),
		Seed: uint64(round), Gets: 45, Puts: 55, OpTimeout: 5 * time.Second, Client: chainClient})
	if err != nil {
		t.Error(err)
	}
	<-crashed
	return h
}

// chainClient talks to the nodes directly, with short retries.
var chainClient = client.Options{Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond}

// checkAcked fails t if a key's version is below its last acknowledged
// write's: that write was lost.
func checkAcked(t *testing.T, c *cluster.Cluster, acked map[string]uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lost, err := c.LostWrites(ctx, chainClient, acked)
	if err != nil {
		t.Fatal(err)
	}
	if len(lost) > 0 {
		t.Fatalf("acknowledged writes lost: %v", lost)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
