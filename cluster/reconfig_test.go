package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

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
		hist, acked := killHistory(t, c, round, victim)
		res, info := porcupine.CheckOperationsVerbose(kvModel, hist, 20*time.Second)
		if res == porcupine.Illegal {
			path := fmt.Sprintf("%s/reconf-%s.html", t.TempDir(), role)
			_ = porcupine.VisualizePath(kvModel, info, path)
			t.Fatalf("killing the %s (node %d): history of %d ops is not linearizable (%s)", role, victim+1, len(hist), path)
		}
		checkVersions(t, hist)
		waitFor(t, fmt.Sprintf("node %d spliced out", victim+1), func() bool {
			return slices.Contains(pl.Controller.Layout().Down(), ch[pos]) && c.CurrentLayout().Epoch() > lay.Epoch()
		})
		after := pl.Controller.Layout()
		if after.Epoch() <= lay.Epoch() || slices.Contains(after.ChainOf(wire.HashKey([]byte(key0))), ch[pos]) {
			t.Fatalf("killing the %s (node %d): layout epoch %d→%d, chain %v→%v", role, victim+1, lay.Epoch(), after.Epoch(),
				ch, after.ChainOf(wire.HashKey([]byte(key0))))
		}
		checkAcked(t, c, acked)
		// Back: the node catches up and rejoins as tail.
		if err := c.Restart(victim); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("node %d rejoins", victim+1), func() bool {
			m := pl.Controller.Layout()
			n := c.Node(victim)
			return !slices.Contains(m.Down(), ch[pos]) && n != nil && n.Layout().Epoch() == m.Epoch() && n.Ready()
		})
		checkAcked(t, c, acked)
		t.Logf("%s (node %d) killed: %d ops linearizable, %d acknowledged writes kept; epoch now %d",
			role, victim+1, len(hist), len(acked), pl.Controller.Layout().Epoch())
	}
}

// killHistory runs clients over a few keys and crashes node victim early
// in the run; it returns the history and each key's last acknowledged
// write version.
func killHistory(t *testing.T, c *cluster.Cluster, round, victim int) ([]porcupine.Operation, map[string]uint64) {
	const clients, opsPer, nkeys = 4, 40, 3
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	var mu sync.Mutex
	var hist []porcupine.Operation
	acked := map[string]uint64{}
	var wg sync.WaitGroup
	go func() {
		time.Sleep(50 * time.Millisecond)
		if err := c.Crash(victim); err != nil {
			t.Errorf("crash: %v", err)
		}
	}()
	for ci := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(round), uint64(ci)))
			cl, err := c.Client(client.Options{Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			for j := range opsPer {
				key := fmt.Sprintf("reconf-r%d-k%d", round, r.IntN(nkeys))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				var in kvIn
				var out kvOut
				call := now()
				if r.IntN(100) < 45 {
					in = kvIn{Op: 'g', Key: key}
					v, ver, err := cl.Get(ctx, []byte(key))
					switch {
					case err == nil:
						out = kvOut{Val: string(v), Found: true, Ver: ver}
					case errors.Is(err, client.ErrNotFound):
						out = kvOut{Ver: ver}
					default:
						cancel()
						continue
					}
				} else {
					in = kvIn{Op: 'p', Key: key, Val: fmt.Sprintf("r%d-c%d-%d", round, ci, j)}
					ver, err := cl.Put(ctx, []byte(key), []byte(in.Val))
					out = kvOut{Ver: ver, Unknown: err != nil}
					if err == nil {
						mu.Lock()
						acked[key] = max(acked[key], ver)
						mu.Unlock()
					}
				}
				cancel()
				ret := now()
				if out.Unknown {
					ret = 1 << 62
				}
				mu.Lock()
				hist = append(hist, porcupine.Operation{ClientId: ci, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return hist, acked
}

// checkAcked reads every key and fails if its version is below the last
// acknowledged write's: that write was lost.
func checkAcked(t *testing.T, c *cluster.Cluster, acked map[string]uint64) {
	t.Helper()
	cl, err := c.Client(client.Options{Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for key, want := range acked {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, ver, err := cl.Get(ctx, []byte(key))
		cancel()
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("read %s: %v", key, err)
		}
		if ver < want {
			t.Fatalf("%s: version %d, but version %d was acknowledged: a write was lost", key, ver, want)
		}
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
