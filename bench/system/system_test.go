package system

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/storagenode/device"
	"github.com/netdir/netdir/wire"
)

func startSystem(t *testing.T, nodes int, p4info string) *System {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{Nodes: nodes, Capacity: -1, PartitionBits: 6, Dir: t.TempDir(),
		Round: 100 * time.Millisecond, Clients: 1, P4Info: p4info})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPutGetThroughSwitch: a value written through the switch is read back
// through it, for every data-plane policy, and the switch saw the requests.
func TestPutGetThroughSwitch(t *testing.T) {
	s := startSystem(t, 3, "")
	if ok, err := s.P4Runtime(); !ok {
		t.Fatalf("the controller does not use P4Runtime: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, pol := range []string{"static", "replicas", "pegasus", "netdir", PolicyC3} {
		p, err := s.StartPlane(ctx, pol)
		if err != nil {
			t.Fatalf("%s: %v", pol, err)
		}
		tg := p.Target()
		key := []byte(fmt.Sprintf("key-%d", i))
		val := []byte(fmt.Sprintf("value of %s", pol))
		ver, err := tg.Put(ctx, key, val)
		if err != nil || ver == 0 {
			t.Fatalf("%s: put: version %d, %v", pol, ver, err)
		}
		got, gver, err := tg.Get(ctx, key)
		if err != nil || string(got) != string(val) || gver != ver {
			t.Fatalf("%s: get: %q version %d, %v; want %q version %d", pol, got, gver, err, val, ver)
		}
		if _, _, err := tg.Get(ctx, []byte("never-written")); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("%s: get of an absent key: %v, want not found", pol, err)
		}
		smp := p.Sample()
		if pol != PolicyC3 {
			if smp.Hits+smp.Misses < 3 {
				t.Errorf("%s: switch routed %d requests, want at least 3", pol, smp.Hits+smp.Misses)
			}
		}
		var reads uint64
		for _, r := range smp.Reads {
			reads += r
		}
		if reads != 2 {
			t.Errorf("%s: %d reads accounted to nodes, want 2", pol, reads)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("%s: close: %v", pol, err)
		}
	}
}

// TestHotKeyPromoted: under netdir a key read far more than any other is
// promoted by the controller from the clients' reports, gets extra copies,
// and reads of it are then served by more nodes than its chain; with the
// controller on P4Runtime and on the switch's Go API alike.
func TestHotKeyPromoted(t *testing.T) {
	for _, tc := range []struct{ name, p4info string }{{"p4runtime", ""}, {"control-api", "none"}} {
		t.Run(tc.name, func(t *testing.T) { testHotKeyPromoted(t, tc.p4info) })
	}
}

func testHotKeyPromoted(t *testing.T, p4info string) {
	s := startSystem(t, 5, p4info)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := s.StartPlane(ctx, "netdir")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tg := p.Target()
	hot := []byte("hot")
	if _, err := tg.Put(ctx, hot, []byte("v")); err != nil {
		t.Fatal(err)
	}
	chain := s.Layout().ChainOf(wire.HashKey(hot))
	inChain := map[int]bool{}
	for _, id := range chain {
		inChain[int(id)-1] = true
	}
	// Read until the reads reach a node outside the chain (bounded in count
	// and by ctx). Extra copies become fresh only for a version the switch
	// saw complete after the promotion, so the key is written again once it
	// is in the directory.
	var outside, rewritten bool
	for i := 0; i < 200_000 && !outside && ctx.Err() == nil; i++ {
		if _, _, err := tg.Get(ctx, hot); err != nil {
			t.Fatal(err)
		}
		if !rewritten && i%100 == 99 && p.Sample().DirSize > 0 {
			if _, err := tg.Put(ctx, hot, []byte("v2")); err != nil {
				t.Fatal(err)
			}
			rewritten = true
		}
		if i%500 == 499 {
			smp := p.Sample()
			for n, r := range smp.Reads {
				if r > 0 && !inChain[n] {
					outside = true
				}
			}
		}
	}
	if !outside {
		t.Fatalf("reads of a hot key never left its chain %v; directory %d keys", chain, p.Sample().DirSize)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range s.N() {
		if n := len(s.Node(i).Promoted()); n != 0 {
			t.Errorf("node %d still heads %d promoted keys after the plane closed", i+1, n)
		}
	}
}

// TestRunPerPolicy: a short run of each policy yields one Run with the
// policy, the node count, requests on the nodes and a throughput.
func TestRunPerPolicy(t *testing.T) {
	s := startSystem(t, 4, "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	w := bench.Workload{Name: "B", Keys: 200, Zipf: 0.99, Seed: 7}
	w.Mix, _ = bench.YCSB("B")
	src, err := w.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Preload(ctx, src, 8, nil); err != nil {
		t.Fatal(err)
	}
	var runs []bench.Run
	for _, pol := range Policies() {
		r, err := s.Run(ctx, pol, RunOptions{Workload: w, Workers: 4, Duration: 300 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s: %v", pol, err)
		}
		runs = append(runs, r)
	}
	if len(runs) != len(Policies()) {
		t.Fatalf("%d runs for %d policies", len(runs), len(Policies()))
	}
	// Every request the runs sent has been served: no node holds one, so
	// the drain after a run has nothing to say.
	if d := s.drain(ctx, 0); d != "" {
		t.Errorf("after the runs: %s", d)
	}
	for i, r := range runs {
		if r.Policy != Policies()[i] || r.Nodes != 4 || r.Workload != "B" {
			t.Errorf("run %d: policy %q nodes %d workload %q", i, r.Policy, r.Nodes, r.Workload)
		}
		if r.Ops == 0 || r.ThroughputOps <= 0 {
			t.Errorf("%s: %d ops, %g ops/s", r.Policy, r.Ops, r.ThroughputOps)
		}
		var sum float64
		for _, l := range r.NodeLoads {
			sum += l
		}
		if sum == 0 || len(r.NodeLoads) != 4 {
			t.Errorf("%s: node loads %v", r.Policy, r.NodeLoads)
		}
		if r.Policy == "static" || r.Policy == "replicas" || r.Policy == PolicyC3 {
			if r.DirHitRate != 0 {
				t.Errorf("%s: directory hit rate %g, want 0", r.Policy, r.DirHitRate)
			}
		}
	}
}

// TestNodeCapacity: a node's nominal rate is the least of its token
// bucket, its processor and its device's random reads at the run's block
// reads per GET; the controller's bound is the bucket or the processor.
func TestNodeCapacity(t *testing.T) {
	ssd, _ := device.Parse("ssd")
	none, _ := device.Parse("none")
	cpu := float64(ssd.Cores) / ssd.RequestService.Seconds()
	reads := (&Config{Device: ssd}).deviceReads()
	if reads < 200 || reads > 300 || cpu < 2*reads {
		t.Fatalf("ssd: processor %.0f/s, device %.0f reads/s: want ~250 reads/s and a processor at least twice that", cpu, reads)
	}
	for _, c := range []struct {
		name        string
		cfg         Config
		readsPerGet float64
		want, bound float64
	}{
		{"ssd, all hits", Config{Device: ssd}, 0, cpu, cpu},
		{"ssd, a quarter miss", Config{Device: ssd}, 0.25, cpu, cpu},
		{"ssd, every GET misses", Config{Device: ssd}, 1, reads, cpu},
		{"ssd under a smaller bucket", Config{Device: ssd, Capacity: 100}, 0.25, 100, 100},
		{"bucket alone", Config{Device: none, Capacity: 200}, 1, 200, 200},
		{"nothing bounds it", Config{Device: none}, 1, 0, 0},
	} {
		s := &System{cfg: c.cfg}
		if got := s.NodeCapacity(c.readsPerGet); math.Abs(got-c.want) > 1e-6*c.want {
			t.Errorf("%s: NodeCapacity(%g) = %.1f, want %.1f", c.name, c.readsPerGet, got, c.want)
		}
		if got := c.cfg.boundRate(); math.Abs(got-c.bound) > 1e-6*c.bound {
			t.Errorf("%s: controller bound %.1f, want %.1f", c.name, got, c.bound)
		}
	}
}

// A node's processor and device figures over an interval: busy fractions
// of the interval (the device's over its slots), wait per request.
func TestNodeTimeStat(t *testing.T) {
	prev := nodeTime{cpuRequests: 10, cpuBusy: time.Second, cpuWait: 100 * time.Millisecond, deviceBusy: 2 * time.Second, slots: 4}
	cur := nodeTime{cpuRequests: 110, cpuBusy: 1500 * time.Millisecond, cpuWait: 300 * time.Millisecond, deviceBusy: 4 * time.Second, slots: 4}
	var n bench.NodeStat
	cur.stat(prev, time.Second, &n)
	if n.CPUBusy != 0.5 || n.CPUWait != 2*time.Millisecond || n.DeviceBusy != 0.5 {
		t.Errorf("got processor %g wait %v device %g, want 0.5, 2ms, 0.5", n.CPUBusy, n.CPUWait, n.DeviceBusy)
	}
	var idle bench.NodeStat
	cur.stat(cur, time.Second, &idle)
	cur.stat(prev, 0, &idle)
	if idle != (bench.NodeStat{}) {
		t.Errorf("no time or no change: %+v, want zeros", idle)
	}
}
