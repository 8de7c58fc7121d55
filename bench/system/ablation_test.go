package system

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/sched"
)

func ablationConfig(name string, repeat int) ExperimentConfig {
	w := bench.Workload{Name: "B", Mix: bench.Mix{Read: 0.95, Update: 0.05}, Keys: 100, ValueSize: 16, Seed: 1}
	return ExperimentConfig{Name: name, Nodes: 4, Workloads: []bench.Workload{w}, Repeat: repeat, DeviceBudget: 1 << 20}
}

// TestAblationABBA: the ablation's passes run its steps forward, then in
// reverse, and so on; compaction is live on half the nodes in every step
// and paced only in the full system's.
func TestAblationABBA(t *testing.T) {
	steps, err := ExperimentSteps(ablationConfig(ExpAblation, 3))
	if err != nil {
		t.Fatal(err)
	}
	n := len(AblationSteps)
	if len(steps) != 3*n {
		t.Fatalf("%d steps, want %d", len(steps), 3*n)
	}
	for i, st := range steps {
		pass, j := i/n, i%n
		want := AblationSteps[j]
		if pass%2 == 1 {
			want = AblationSteps[n-1-j]
		}
		if st.Name != want.Name || st.Policy != want.Policy {
			t.Fatalf("step %d: %s (%s), want %s (%s)", i, st.Name, st.Policy, want.Name, want.Policy)
		}
		if len(st.Phase.Fill) != 2 || (st.Phase.Budget > 0) != want.Paced {
			t.Fatalf("step %d (%s): fill %v, budget %d", i, st.Name, st.Phase.Fill, st.Phase.Budget)
		}
		if (st.Phase.Turn == sched.DefaultTurn) != want.Paced || (!want.Paced && st.Phase.Turn != 0) {
			t.Fatalf("step %d (%s): compaction turn %v; only the paced step is staggered", i, st.Name, st.Phase.Turn)
		}
	}
	if steps, _ := ExperimentSteps(ablationConfig(ExpAblation, 0)); len(steps) != AblationRepeat*n {
		t.Fatalf("default: %d steps, want %d passes", len(steps), AblationRepeat)
	}
	p, err := ProbeStep(steps, ExpAblation)
	if err != nil || p.Policy != "static" {
		t.Fatalf("probe %+v, %v", p, err)
	}
}

// TestSLOSteps: the sweep compares c3 with the full system, c3 first at
// the first level (it sets the SLO), in alternating order after it.
func TestSLOSteps(t *testing.T) {
	steps, err := ExperimentSteps(ablationConfig(ExpSLO, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Policy != PolicyC3 || steps[1].Name != AblationFull {
		t.Fatalf("steps %+v", steps)
	}
	for lvl, want := range [][]string{{PolicyC3, AblationFull}, {AblationFull, PolicyC3}, {PolicyC3, AblationFull}} {
		var got []string
		for _, i := range sweepOrder(steps, lvl) {
			got = append(got, steps[i].Name)
		}
		if got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("level %d: %v, want %v", lvl, got, want)
		}
	}
	if p, _ := ProbeStep(steps, ExpSLO); p.Policy != PolicyC3 {
		t.Fatalf("probe %+v", p)
	}
}

// TestSummariseSLO: a policy's throughput at the SLO is its best among the
// rates where it met the p99 bound and served at least 90% of the rate.
func TestSummariseSLO(t *testing.T) {
	run := func(pol string, ops, p99 float64) bench.Run {
		return bench.Run{Policy: pol, Workload: "B", ThroughputOps: ops, P99us: p99}
	}
	res := ExperimentResults{Experiment: ExpSLO, SLOus: []float64{100},
		Runs: []bench.Run{
			run(PolicyC3, 100, 50), run(AblationFull, 100, 40), // 100 offered
			run(AblationFull, 200, 90), run(PolicyC3, 195, 99), // 200
			run(PolicyC3, 250, 150), run(AblationFull, 300, 80), // 300: c3 over the SLO
			run(AblationFull, 320, 90), // 400: too little served
		},
		Rates: []float64{100, 100, 200, 200, 300, 300, 400}}
	res.Summarise()
	s := res.Summary
	if s[PolicyC3+" throughput at SLO ops/s"] != 195 || s[AblationFull+" throughput at SLO ops/s"] != 300 {
		t.Fatalf("summary %v", s)
	}
	if x := s["throughput at SLO "+AblationFull+"/c3 x"]; x != 300.0/195 {
		t.Fatalf("ratio %.3f", x)
	}
	if s[AblationFull+" met the SLO at the last rate"] != 0 {
		t.Fatalf("summary %v", s)
	}
	// A second pass with its own SLO: each pass's figures, and their means.
	res.Runs = append(res.Runs, run(PolicyC3, 100, 60), run(AblationFull, 100, 70), run(AblationFull, 200, 130))
	res.Rates = append(res.Rates, 100, 100, 200)
	res.Passes = []int{0, 0, 0, 0, 0, 0, 0, 1, 1, 1}
	res.SLOus = append(res.SLOus, 120)
	res.Summary = nil
	res.Summarise()
	s = res.Summary
	if s["pass 2 "+PolicyC3+" throughput at SLO ops/s"] != 100 || s["pass 2 "+AblationFull+" throughput at SLO ops/s"] != 100 {
		t.Fatalf("pass 2: summary %v", s)
	}
	if x := s["pass 1 throughput at SLO "+AblationFull+"/c3 x"]; x != 300.0/195 {
		t.Fatalf("pass 1 ratio %.3f", x)
	}
	if x := s["throughput at SLO "+AblationFull+"/c3 x"]; math.Abs(x-200.0/147.5) > 1e-9 {
		t.Fatalf("mean ratio %.3f, want %.3f", x, 200.0/147.5)
	}
}

// TestSLOSweepStops: on a fresh cluster per run, the sweep runs c3 first,
// sets the SLO from it, raises the rate level by level and runs no policy
// again after a level where it missed the SLO.
func TestSLOSweepStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cfg := ablationConfig(ExpSLO, 0)
	cfg.Nodes, cfg.FillRate = 3, 1<<20
	steps, err := ExperimentSteps(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := bench.Workload{Name: "load", Mix: bench.WriteMix(1), Keys: 100, ValueSize: 16, Seed: 1}.Build()
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFresh(ctx, Config{Nodes: 3, Capacity: -1, PartitionBits: 6, Dir: t.TempDir(),
		Round: 100 * time.Millisecond, Clients: 1, P4Info: "none"}, src, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := f.Run(ctx, FreshExperiment{Name: ExpSLO, Steps: steps, Levels: 3, Growth: 4, Passes: 2,
		Run: RunOptions{Workers: 8, Rate: 50, Duration: 400 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.SLOus) != 2 || len(res.Passes) != len(res.Runs) {
		t.Fatalf("SLOs %v, passes %v of %d runs", res.SLOus, res.Passes, len(res.Runs))
	}
	var failed map[string]bool
	for i, r := range res.Runs {
		p := res.Passes[i]
		if i == 0 || p != res.Passes[i-1] { // a pass starts: c3 first, at the first rate, sets its SLO
			if r.Policy != PolicyC3 || res.Rates[i] != 50 || res.SLOus[p] != 2*r.P99us {
				t.Fatalf("run %d starts pass %d: %+v at %.0f ops/s, SLO %.0f µs", i, p, r, res.Rates[i], res.SLOus[p])
			}
			failed = map[string]bool{}
		} else if res.Rates[i] < res.Rates[i-1] {
			t.Fatalf("rates %v fall within pass %d", res.Rates, p)
		}
		if failed[r.Policy] {
			t.Fatalf("run %d: %s ran after missing the SLO", i, r.Policy)
		}
		failed[r.Policy] = !meetsSLO(r, res.Rates[i], res.SLOus[p])
	}
	if res.Passes[len(res.Passes)-1] != 1 {
		t.Fatalf("passes %v: want 2", res.Passes)
	}
	if _, ok := res.Summary["throughput at SLO "+AblationFull+"/c3 x"]; !ok && res.Summary[PolicyC3+" throughput at SLO ops/s"] > 0 {
		t.Fatalf("summary %v", res.Summary)
	}
}
