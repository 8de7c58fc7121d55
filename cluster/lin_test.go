package cluster_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

var seeds = flag.Int("seeds", 50, "random seeds of the linearizability test")

type scenario struct {
	name   string
	faults cluster.Faults
	crash  bool
	hot    bool // a controller promotes and evicts the keys during the run
	// keys and clients of the history: 3 and 4 if 0.
	keys, clients int
}

func scenarioFor(seed int) scenario {
	switch seed % 6 {
	case 0:
		return scenario{name: "clean"}
	case 1:
		return scenario{name: "loss", faults: cluster.Faults{Loss: 0.05}}
	case 2:
		return scenario{name: "dup+reorder", faults: cluster.Faults{Dup: 0.1, Reorder: 0.2, Jitter: 3 * time.Millisecond}}
	case 3:
		return scenario{name: "delay+loss", faults: cluster.Faults{Loss: 0.03, Delay: 200 * time.Microsecond, Reorder: 0.1}}
	case 4:
		return scenario{name: "crash+loss", faults: cluster.Faults{Loss: 0.02, Dup: 0.05}, crash: true}
	default:
		return scenario{name: "all", faults: cluster.Faults{Loss: 0.05, Dup: 0.05, Reorder: 0.2, Jitter: 2 * time.Millisecond}}
	}
}

// runHistory drives clients concurrently over a few keys, with the
// scenario's crash and promotions alongside, and records the history.
func runHistory(t *testing.T, c *cluster.Cluster, seed int, sc scenario) cluster.History {
	nkeys, clients := cmp.Or(sc.keys, 3), cmp.Or(sc.clients, 4)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	stopCrash := make(chan struct{})
	ctlDone := make(chan struct{})
	if sc.hot {
		ctlSeed := rng.Uint64()
		go func() {
			defer close(ctlDone)
			controller(t, c, seed, nkeys, stopCrash, ctlSeed)
		}()
	} else {
		close(ctlDone)
	}
	crashDone := make(chan struct{})
	if sc.crash {
		victim := rng.IntN(c.N())
		delay := time.Duration(rng.IntN(30)) * time.Millisecond
		down := time.Duration(20+rng.IntN(60)) * time.Millisecond
		go func() {
			defer close(crashDone)
			select {
			case <-time.After(delay):
			case <-stopCrash:
				return
			}
			if err := c.Crash(victim); err != nil {
				t.Errorf("crash: %v", err)
			}
			time.Sleep(down)
			if err := c.Restart(victim); err != nil {
				t.Errorf("restart: %v", err)
			}
		}()
	} else {
		close(crashDone)
	}
	h, err := c.RunHistory(cluster.HistoryConfig{Clients: clients, OpsPer: 25, Keys: nkeys, Prefix: fmt.Sprintf("s%d", seed),
		Seed: rng.Uint64(), Gets: 45, Puts: 40, OpTimeout: 3 * time.Second,
		Client: client.Options{Service: c.Service(), Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond}})
	if err != nil {
		t.Error(err)
	}
	close(stopCrash)
	<-crashDone
	<-ctlDone
	return h
}

// controller promotes keys to an extra node outside their chain and evicts
// them again, at random, while the clients run (bounded in count).
func controller(t *testing.T, c *cluster.Cluster, seed, nkeys int, stop <-chan struct{}, rs uint64) {
	r := rand.New(rand.NewPCG(rs, 3))
	cl, err := c.Client(client.Options{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	hot := map[int]bool{}
	defer func() {
		for k := range hot {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := c.Evict(ctx, cl, []byte(fmt.Sprintf("s%d-k%d", seed, k))); err != nil {
				t.Errorf("evict: %v", err)
			}
			cancel()
		}
	}()
	for range 40 {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(2+r.IntN(10)) * time.Millisecond):
		}
		k := r.IntN(nkeys)
		key := []byte(fmt.Sprintf("s%d-k%d", seed, k))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if hot[k] {
			if err := c.Evict(ctx, cl, key); err != nil {
				t.Errorf("evict: %v", err)
			}
			delete(hot, k)
		} else {
			ch := c.Layout.ChainOf(wire.HashKey(key))
			var extras []wire.NodeID
			for _, id := range c.Layout.Nodes() {
				if !slices.Contains(ch, id) {
					extras = append(extras, id)
				}
			}
			if err := c.Promote(ctx, cl, key, extras); err != nil {
				t.Errorf("promote: %v", err)
			} else {
				hot[k] = true
			}
		}
		cancel()
	}
}

// checkHistory fails t if h is not linearizable or its versions disagree;
// what names the run in the failure.
func checkHistory(t *testing.T, h cluster.History, what string) porcupine.CheckResult {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(cluster.KVModel, h.Ops, 20*time.Second)
	if res == porcupine.Illegal {
		path := fmt.Sprintf("%s/lin.html", t.TempDir())
		_ = porcupine.VisualizePath(cluster.KVModel, info, path)
		t.Fatalf("%s: history of %d ops is not linearizable (visualization %s)", what, len(h.Ops), path)
	}
	if err := h.CheckVersions(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return res
}

// TestLinearizable: clients talk to the nodes directly (through fault
// proxies that also carry all chain traffic).
func TestLinearizable(t *testing.T) {
	c, err := cluster.Start(cluster.Options{N: 3, Dir: t.TempDir(), Proxy: true, Seed: 1,
		Node: func(o *storagenode.Options) { o.RetransmitAfter = 30 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkSeeds(t, c, *seeds, func(seed int) scenario { return scenarioFor(seed) })
}

// TestLinearizableSwitch: clients talk to the software data plane
// (model.Switch, behind a fault proxy); a controller promotes keys to an
// extra node and evicts them from the directory while the clients run, so
// writes are stamped, extras serve reads when fresh, and eviction races
// with writes.
func TestLinearizableSwitch(t *testing.T) {
	c, err := cluster.Start(cluster.Options{N: 4, R: 3, Dir: t.TempDir(), Proxy: true, Switch: true, Seed: 2,
		Node: func(o *storagenode.Options) { o.RetransmitAfter = 30 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkSeeds(t, c, *seeds, func(seed int) scenario {
		sc := scenarioFor(seed)
		sc.hot = seed%3 != 0
		sc.name += "+switch"
		if sc.hot {
			sc.name += "+hot"
		}
		return sc
	})
}

// TestLinearizableWriteGroups: 8 clients write and read one hot key through
// a chain of 3 whose nodes admit 200 client requests a second, so that its
// head applies the writes waiting together as one version (write groups):
// an absorbed write is acknowledged only once its group's version commits,
// and linearized just before the group's last write. The scenarios'
// faults and crashes as in TestLinearizable.
func TestLinearizableWriteGroups(t *testing.T) {
	c, err := cluster.Start(cluster.Options{N: 3, Dir: t.TempDir(), Proxy: true, Seed: 3,
		Node: func(o *storagenode.Options) { o.RetransmitAfter, o.MaxOps = 30*time.Millisecond, 200 }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkSeeds(t, c, min(*seeds, 12), func(seed int) scenario {
		sc := scenarioFor(seed)
		sc.keys, sc.clients = 1, 8
		return sc
	})
	var groups, absorbed uint64
	for i := range c.N() {
		st := c.Node(i).Stats()
		groups, absorbed = groups+st.WriteGroups, absorbed+st.GroupedWrites
	}
	if absorbed == 0 {
		t.Fatal("no write was grouped: the test checked nothing of write groups")
	}
	t.Logf("%d write groups absorbed %d writes", groups, absorbed)
}

// checkSeeds checks the histories of n seeds (at most 10 with -short).
func checkSeeds(t *testing.T, c *cluster.Cluster, n int, scen func(int) scenario) {
	if testing.Short() {
		n = min(n, 10)
	}
	var unknown int
	for seed := 1; seed <= n; seed++ {
		sc := scen(seed)
		c.SetFaults(sc.faults)
		hist := runHistory(t, c, seed, sc)
		if checkHistory(t, hist, fmt.Sprintf("seed %d (%s)", seed, sc.name)) == porcupine.Unknown {
			unknown++
			t.Logf("seed %d (%s): checker timed out", seed, sc.name)
		}
		if t.Failed() {
			t.Fatalf("seed %d (%s) failed", seed, sc.name)
		}
	}
	var dropped, dup uint64
	for i := range c.N() {
		dropped += c.Proxy(i).Dropped.Load()
		dup += c.Proxy(i).Duplicated.Load()
	}
	t.Logf("%d seeds linearizable (%d undecided); proxies dropped %d and duplicated %d packets", n, unknown, dropped, dup)
}
