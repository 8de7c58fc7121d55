package sim

import (
	"bytes"
	"testing"
	"time"

	"github.com/netdir/netdir/bench"
)

func smallConfig(seed uint64) Config {
	return Config{Nodes: 8, Capacity: 1000, Workload: bench.Workload{Name: "B", Keys: 5000, Zipf: 1.2, Seed: 1},
		Warmup: 6 * time.Second, Requests: 40_000, Seed: seed}
}

func runJSON(t *testing.T, cfg Config) []byte {
	t.Helper()
	run, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := bench.WriteJSON(&b, bench.Results{Runs: []bench.Run{run}}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestSameSeedSameJSON: a run is a function of its configuration, seed
// included, down to the byte; another seed gives another run. Both with
// one directory and layered (three racks of four under a spine).
func TestSameSeedSameJSON(t *testing.T) {
	layered := smallConfig(7)
	layered.Nodes, layered.RackSize, layered.Concurrency = 12, 4, 192
	for name, cfg := range map[string]Config{"flat": smallConfig(7), "layered": layered} {
		cfg.Service = ServiceExponential // draws service times from the PCG too
		a, b := runJSON(t, cfg), runJSON(t, cfg)
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: two runs of the same seed wrote different JSON", name)
		}
		cfg.Seed = 8
		if bytes.Equal(a, runJSON(t, cfg)) {
			t.Fatalf("%s: runs of seeds 7 and 8 wrote the same JSON", name)
		}
	}
}

// TestNetdirBalancesWhereStaticDoesNot: at zipf 1.2 on 8 nodes the chain
// head of the hottest key limits static hashing; netdir's directory and
// weights spread it, so throughput reaches the ideal N×C.
func TestNetdirBalancesWhereStaticDoesNot(t *testing.T) {
	runs := map[string]bench.Run{}
	for _, pol := range []string{"static", "netdir"} {
		cfg := smallConfig(1)
		cfg.Policy = pol
		run, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		runs[pol] = run
	}
	ideal := 8 * 1000.0
	if n := runs["netdir"]; n.ThroughputOps < 0.95*ideal || n.LoadMaxOverMean > 1.05 || n.DirHitRate < 0.3 {
		t.Errorf("netdir: %.0f ops/s of %.0f, max/mean %.3f, hit rate %.2f; want ≥ 0.95 of ideal, ≤ 1.05, hits", n.ThroughputOps, ideal,
			n.LoadMaxOverMean, n.DirHitRate)
	}
	if s := runs["static"]; s.LoadMaxOverMean < 1.5 || s.ThroughputOps > 0.7*ideal {
		t.Errorf("static: %.0f ops/s, max/mean %.3f; want the hot chain head to limit it", s.ThroughputOps, s.LoadMaxOverMean)
	}
}

// TestOpenLoopServesTheOfferedRate: under half the capacity every arrival
// is served and none is dropped.
func TestOpenLoopServesTheOfferedRate(t *testing.T) {
	cfg := smallConfig(3)
	cfg.Rate, cfg.Concurrency, cfg.Requests = 4000, 512, 20_000
	run, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if run.Dropped != 0 || run.Errors != 0 || run.ThroughputOps < 3800 || run.ThroughputOps > 4200 {
		t.Errorf("open loop at 4000/s: %.0f ops/s, %d dropped, %d errors", run.ThroughputOps, run.Dropped, run.Errors)
	}
}

// TestBadConfigIsAnError: bad input is refused, not a panic.
func TestBadConfigIsAnError(t *testing.T) {
	for name, cfg := range map[string]Config{
		"nodes":    {Nodes: 5000},
		"rack":     {RackSize: 33},
		"policy":   {Policy: "best"},
		"service":  {Service: "gamma"},
		"capacity": {Capacity: -1},
		"replicas": {Nodes: 2, Replicas: 3},
		"workload": {Workload: bench.Workload{Name: "Z"}},
		"epoch":    {Epoch: time.Second},
	} {
		if _, err := Run(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestEventsPopInTimeThenSchedulingOrder: the heap returns events by
// time, and events of one time in the order they were pushed.
func TestEventsPopInTimeThenSchedulingOrder(t *testing.T) {
	var q events
	times := []uint64{5, 3, 9, 3, 1, 5, 5, 0, 7, 3}
	for i, tm := range times {
		q.push(event{t: tm, a: int32(i)})
	}
	var prev event
	for n := 0; q.len() > 0; n++ {
		e := q.pop()
		if n > 0 && (e.t < prev.t || e.t == prev.t && e.a < prev.a) {
			t.Fatalf("popped (t=%d, #%d) after (t=%d, #%d)", e.t, e.a, prev.t, prev.a)
		}
		prev = e
	}
}

// TestSpineSpreadsAKeyHotterThanARack: on 64 nodes in two racks at zipf
// 1.2 the hottest key draws a fifth of the reads, more than its rack's
// 32 nodes can serve within their share; the spine spreads it over both
// racks, and the cluster reaches the ideal throughput balanced.
func TestSpineSpreadsAKeyHotterThanARack(t *testing.T) {
	cfg := Config{Nodes: 64, Capacity: 1000, Workload: bench.Workload{Name: "C", Keys: 20_000, Zipf: 1.2, Seed: 1},
		Concurrency: 1024, Warmup: 6 * time.Second, Requests: 150_000, Seed: 1}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	if s.spine == nil || s.spine.Len() == 0 || s.spine.Counters().Remote == 0 {
		t.Fatal("the spine spread no key, or sent no read to a remote rack")
	}
	if ideal := 64 * 1000.0; run.ThroughputOps < 0.95*ideal || run.LoadMaxOverMean > 1.1 {
		t.Errorf("%.0f ops/s of %.0f, max/mean %.3f; want ≥ 0.95 and ≤ 1.1", run.ThroughputOps, ideal, run.LoadMaxOverMean)
	}
}

// TestDirectoryNeedsTakesTheSmallestDirectoryThatMetTheGoal.
func TestDirectoryNeedsTakesTheSmallestDirectoryThatMetTheGoal(t *testing.T) {
	run := func(n, dir int, ops float64) bench.Run {
		return bench.Run{Nodes: n, DirSize: dir, ThroughputOps: ops, CapacityOps: 100}
	}
	needs := DirectoryNeeds([]bench.Run{
		run(16, 64, 1590), run(16, 8, 1400), run(16, 16, 1540), run(32, 10, 3000),
	}, BalanceGoal)
	if len(needs) != 2 || needs[0].Nodes != 16 || needs[1].Nodes != 32 {
		t.Fatalf("needs %+v, want 16 and 32 nodes in order", needs)
	}
	if !needs[0].Met || needs[0].Keys != 16 {
		t.Errorf("16 nodes need %+v, want 16 keys (8 reached 0.875, 16 0.9625)", needs[0])
	}
	if needs[1].Met {
		t.Errorf("32 nodes at 0.9375 of the ideal met the goal: %+v", needs[1])
	}
	var b bytes.Buffer
	if err := PlotNeeds(&b, "needs.svg", "R=3", needs); err != nil || !bytes.Contains(b.Bytes(), []byte("<svg")) {
		t.Errorf("PlotNeeds: %v, %d bytes", err, b.Len())
	}
}
