package cluster_test

import (
	"context"
	"errors"
	"flag"
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

var seeds = flag.Int("seeds", 50, "random seeds of the linearizability test")

// KV model for porcupine, partitioned by key.
type kvIn struct {
	Op  byte // 'g', 'p', 'd'
	Key string
	Val string
}

type kvOut struct {
	Val     string
	Found   bool
	Ver     uint64
	Unknown bool // a write whose outcome is unknown (its context ended)
}

type kvState struct {
	Val    string
	Exists bool
}

var kvModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		m := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(kvIn).Key
			if _, ok := m[k]; !ok {
				keys = append(keys, k)
			}
			m[k] = append(m[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, m[k])
		}
		return out
	},
	Init: func() any { return kvState{} },
	Step: func(st, in, out any) (bool, any) {
		s, i, o := st.(kvState), in.(kvIn), out.(kvOut)
		switch i.Op {
		case 'g':
			return o.Found == s.Exists && (!s.Exists || o.Val == s.Val), s
		case 'p':
			return true, kvState{Val: i.Val, Exists: true}
		default:
			return true, kvState{}
		}
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(kvIn), out.(kvOut)
		switch i.Op {
		case 'g':
			return fmt.Sprintf("get(%s) -> %q found=%v v%d", i.Key, o.Val, o.Found, o.Ver)
		case 'p':
			return fmt.Sprintf("put(%s, %q) -> v%d unknown=%v", i.Key, i.Val, o.Ver, o.Unknown)
		}
		return fmt.Sprintf("del(%s) -> v%d unknown=%v", i.Key, o.Ver, o.Unknown)
	},
}

type scenario struct {
	name   string
	faults cluster.Faults
	crash  bool
	hot    bool // a controller promotes and evicts the keys during the run
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

// runHistory drives clients concurrently over a few keys and records the
// history.
func runHistory(t *testing.T, c *cluster.Cluster, seed int, sc scenario) []porcupine.Operation {
	const clients, opsPer, nkeys = 4, 25, 3
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	var mu sync.Mutex
	var hist []porcupine.Operation
	var wg sync.WaitGroup
	clientSeeds := make([]uint64, clients)
	for i := range clientSeeds {
		clientSeeds[i] = rng.Uint64()
	}
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
	for ci := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(clientSeeds[ci], uint64(ci)))
			cl, err := c.Client(client.Options{Service: c.Service(), Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			for j := range opsPer {
				key := fmt.Sprintf("s%d-k%d", seed, r.IntN(nkeys))
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				var in kvIn
				var out kvOut
				call := now()
				switch x := r.IntN(100); {
				case x < 45:
					in = kvIn{Op: 'g', Key: key}
					v, ver, err := cl.Get(ctx, []byte(key))
					switch {
					case err == nil:
						out = kvOut{Val: string(v), Found: true, Ver: ver}
					case errors.Is(err, client.ErrNotFound):
						out = kvOut{Ver: ver}
					default:
						cancel()
						continue // a read with no answer constrains nothing
					}
				case x < 85:
					in = kvIn{Op: 'p', Key: key, Val: fmt.Sprintf("c%d-%d", ci, j)}
					ver, err := cl.Put(ctx, []byte(key), []byte(in.Val))
					out = kvOut{Ver: ver, Unknown: err != nil}
				default:
					in = kvIn{Op: 'd', Key: key}
					ver, err := cl.Delete(ctx, []byte(key))
					out = kvOut{Ver: ver, Unknown: err != nil}
				}
				cancel()
				ret := now()
				if out.Unknown {
					ret = 1 << 62 // may take effect at any time after its call
				}
				mu.Lock()
				hist = append(hist, porcupine.Operation{ClientId: ci, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stopCrash)
	<-crashDone
	<-ctlDone
	return hist
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

// checkVersions: a version names one value. Every acknowledged write has a
// distinct version per key, and every read of version v returns v's value.
func checkVersions(t *testing.T, hist []porcupine.Operation) {
	type kv struct {
		key string
		ver uint64
	}
	vals := map[kv]kvOut{}
	writes := map[kv]bool{}
	for _, op := range hist {
		in, out := op.Input.(kvIn), op.Output.(kvOut)
		if out.Unknown || in.Op == 'g' {
			continue
		}
		k := kv{in.Key, out.Ver}
		if writes[k] {
			t.Errorf("two acknowledged writes of %s got version %d", in.Key, out.Ver)
		}
		writes[k] = true
		vals[k] = kvOut{Val: in.Val, Found: in.Op == 'p'}
	}
	for _, op := range hist {
		in, out := op.Input.(kvIn), op.Output.(kvOut)
		if in.Op != 'g' || out.Ver == 0 {
			continue
		}
		if w, ok := vals[kv{in.Key, out.Ver}]; ok && (w.Found != out.Found || w.Val != out.Val) {
			t.Errorf("read of %s v%d = %q/%v, written %q/%v", in.Key, out.Ver, out.Val, out.Found, w.Val, w.Found)
		}
	}
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
	checkSeeds(t, c, func(seed int) scenario { return scenarioFor(seed) })
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
	checkSeeds(t, c, func(seed int) scenario {
		sc := scenarioFor(seed)
		sc.hot = seed%3 != 0
		sc.name += "+switch"
		if sc.hot {
			sc.name += "+hot"
		}
		return sc
	})
}

func checkSeeds(t *testing.T, c *cluster.Cluster, scen func(int) scenario) {
	n := *seeds
	if testing.Short() {
		n = min(n, 10)
	}
	var unknown int
	for seed := 1; seed <= n; seed++ {
		sc := scen(seed)
		c.SetFaults(sc.faults)
		hist := runHistory(t, c, seed, sc)
		res, info := porcupine.CheckOperationsVerbose(kvModel, hist, 20*time.Second)
		switch res {
		case porcupine.Illegal:
			path := fmt.Sprintf("%s/lin-seed-%d.html", t.TempDir(), seed)
			_ = porcupine.VisualizePath(kvModel, info, path)
			t.Fatalf("seed %d (%s): history of %d ops is not linearizable (visualization %s)", seed, sc.name, len(hist), path)
		case porcupine.Unknown:
			unknown++
			t.Logf("seed %d (%s): checker timed out", seed, sc.name)
		}
		checkVersions(t, hist)
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
