package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	randv2 "math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

func paretoSamples(n int, xm, alpha float64, seed uint64) []float64 {
	d := distuv.Pareto{Xm: xm, Alpha: alpha, Src: randv2.NewPCG(seed, 1)}
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = d.Rand()
	}
	return xs
}

func TestHillPareto(t *testing.T) {
	for _, alpha := range []float64{0.8, 1.5, 3} {
		xs := paretoSamples(100_000, 1, alpha, 42)
		// k = 5000: the estimate's standard deviation is α/√k ≈ 0.014·α.
		if h := Hill(xs, 0); math.Abs(h-alpha) > 0.08*alpha {
			t.Errorf("Hill on Pareto(α=%g) = %.3f", alpha, h)
		}
	}
}

func TestHillLightTails(t *testing.T) {
	r := randv2.New(randv2.NewPCG(7, 7))
	exp := make([]float64, 100_000)
	for i := range exp {
		exp[i] = r.ExpFloat64()
	}
	hExp := Hill(exp, 0)
	// Top 5% of Exp(1) starts near ln 20 ≈ 3, so α̂ ≈ 3.5 and grows with
	// the threshold: far above any heavy tail.
	if hExp < 3 {
		t.Errorf("Hill on exponential = %.3f, want a large index (> 3)", hExp)
	}
	// A deeper threshold makes the light tail look lighter still.
	if h := Hill(exp, 100); h <= hExp {
		t.Errorf("Hill(k=100) = %.3f not above Hill(k=5%%) = %.3f for an exponential tail", h, hExp)
	}
	// Uniform on [1,2] has a bounded tail.
	uni := make([]float64, 100_000)
	for i := range uni {
		uni[i] = 1 + r.Float64()
	}
	if h := Hill(uni, 0); h < 10 {
		t.Errorf("Hill on a bounded distribution = %.3f", h)
	}
}

func TestHillEdges(t *testing.T) {
	if h := Hill([]float64{1, 2, 3}, 0); h != 0 {
		t.Errorf("Hill on 3 samples = %g, want 0 (undefined)", h)
	}
	flat := make([]float64, 1000)
	for i := range flat {
		flat[i] = 5
	}
	if h := Hill(flat, 0); h != 0 {
		t.Errorf("Hill on constants = %g, want 0", h)
	}
	// Hand-computed: top k=2 of {8,4,2,1}: (ln 8/2 + ln 4/2)/2 = 1.5 ln 2.
	if h, want := Hill([]float64{1, 8, 2, 4}, 2), 1/(1.5*math.Ln2); math.Abs(h-want) > 1e-12 {
		t.Errorf("Hill = %g, want %g", h, want)
	}
	xs := []float64{3, 1, 2}
	Hill(xs, 1)
	if !reflect.DeepEqual(xs, []float64{3, 1, 2}) {
		t.Error("Hill reordered its input")
	}
	for n, k := range map[int]int{5: 0, 11: 10, 100: 10, 1000: 50, 100_000: 5000} {
		if got := HillK(n); got != k {
			t.Errorf("HillK(%d) = %d, want %d", n, got, k)
		}
	}
}

func TestHillHistogram(t *testing.T) {
	// Pareto latencies from 10 µs, α = 1.5, recorded in nanoseconds.
	xs := paretoSamples(100_000, 10_000, 1.5, 3)
	h := NewHistogram()
	for _, x := range xs {
		recordNS(h, time.Duration(x))
	}
	raw, hist := Hill(xs, 0), HillHistogram(h)
	if math.Abs(raw-hist) > 0.02*raw {
		t.Errorf("Hill over histogram %.4f, over samples %.4f", hist, raw)
	}
	if math.Abs(hist-1.5) > 0.12 {
		t.Errorf("Hill over histogram %.3f, want ≈ 1.5", hist)
	}
	if HillHistogram(NewHistogram()) != 0 {
		t.Error("Hill over an empty histogram is not 0")
	}
}

func TestCoVAndMaxOverMean(t *testing.T) {
	cases := []struct {
		xs            []float64
		cov, maxOverM float64
	}{
		{[]float64{1, 1, 1, 1}, 0, 1},
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 0.4, 1.8}, // mean 5, σ 2
		{[]float64{0, 0, 0, 4}, math.Sqrt(3), 4},      // mean 1, σ √3
		{[]float64{10}, 0, 1},
		{nil, 0, 0},
		{[]float64{0, 0}, 0, 0},
	}
	for _, c := range cases {
		if got := CoV(c.xs); math.Abs(got-c.cov) > 1e-12 {
			t.Errorf("CoV(%v) = %g, want %g", c.xs, got, c.cov)
		}
		if got := MaxOverMean(c.xs); math.Abs(got-c.maxOverM) > 1e-12 {
			t.Errorf("MaxOverMean(%v) = %g, want %g", c.xs, got, c.maxOverM)
		}
	}
}

func TestRecorder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := NewRecorder(t0)
	for i := 1; i <= 100; i++ {
		r.Record(OpRead, time.Duration(i)*time.Microsecond, nil)
	}
	r.Record(OpUpdate, time.Millisecond, nil)
	r.Record(OpUpdate, time.Hour, errors.New("x")) // failed: counted, not recorded
	iv := r.Interval(t0.Add(2 * time.Second))
	if iv.Ops != 101 || iv.Errors != 1 || iv.Throughput != 50.5 {
		t.Errorf("interval %+v", iv)
	}
	if iv.P99 < 99*time.Microsecond || iv.P99 > 101*time.Microsecond {
		t.Errorf("interval p99 %v", iv.P99)
	}
	r.Record(OpRead, 5*time.Microsecond, nil)
	iv = r.Interval(t0.Add(3 * time.Second))
	if iv.Ops != 1 || iv.Errors != 0 || iv.Elapsed != time.Second {
		t.Errorf("second interval %+v", iv)
	}
	s := r.Snapshot()
	if s.Ops != 102 || s.Errors != 1 || s.Latency.TotalCount() != 102 {
		t.Errorf("snapshot ops=%d errs=%d count=%d", s.Ops, s.Errors, s.Latency.TotalCount())
	}
	if k := s.Kinds["update"]; k.Ops != 1 || k.Errors != 1 || k.Latency.Max() < int64(time.Millisecond)*999/1000 {
		t.Errorf("update kind %+v", k)
	}
	if _, ok := s.Kinds["insert"]; ok {
		t.Error("snapshot lists a kind with no operations")
	}
	if q := Quantile(s.Latency, 50); q < 50*time.Microsecond || q > 52*time.Microsecond {
		t.Errorf("p50 %v", q)
	}
}

func TestSummarize(t *testing.T) {
	r := NewRecorder(time.Unix(0, 0))
	for i := 1; i <= 1000; i++ {
		r.Record(OpRead, time.Duration(i)*time.Microsecond, nil)
	}
	res := r.Snapshot()
	// The writes' p99 alone: 100 updates of 5 ms, beside the reads.
	w := NewRecorder(time.Unix(0, 0))
	for range 100 {
		w.Record(OpUpdate, 5*time.Millisecond, nil)
	}
	res.Kinds["update"] = w.Snapshot().Kinds["update"]
	res.Elapsed = 2 * time.Second
	src := build(t, Workload{Name: "B", Keys: 10, Zipf: 1.2, ParetoAlpha: 1.5})
	run := Summarize(RunInfo{
		Policy:   "netdir",
		Workload: src.Workload(),
		Nodes: []NodeStat{
			{Requests: 100, MeanLatency: 100 * time.Microsecond},
			{Requests: 300, MeanLatency: 300 * time.Microsecond, CPUBusy: 0.9, CPUWait: 2 * time.Millisecond, DeviceBusy: 0.5},
		},
		DirHitRate: 0.75,
		CPU:        ProcStats{CPUSeconds: 4, RSSBytes: 1 << 20}.Since(ProcStats{CPUSeconds: 2.5, RSSBytes: 1 << 10}),
	}, res)
	if run.Policy != "netdir" || run.Workload != "B" || run.Zipf != 1.2 || run.Nodes != 2 {
		t.Errorf("identity fields %+v", run)
	}
	if run.ThroughputOps != 500 || run.Ops != 1000 || run.DurationS != 2 {
		t.Errorf("throughput %g ops %d duration %g", run.ThroughputOps, run.Ops, run.DurationS)
	}
	if math.Abs(run.P50us-500) > 1 || math.Abs(run.P99us-990) > 2 || math.Abs(run.P999us-999) > 2 {
		t.Errorf("quantiles %g %g %g", run.P50us, run.P99us, run.P999us)
	}
	if run.LoadMaxOverMean != 1.5 || run.LoadCoV != 0.5 || run.NodeLatencyCoV != 0.5 {
		t.Errorf("balance %g %g %g", run.LoadMaxOverMean, run.LoadCoV, run.NodeLatencyCoV)
	}
	// Every node's processor and device figures, the idle one's as zeros.
	if !reflect.DeepEqual(run.NodeCPUBusy, []float64{0, 0.9}) || !reflect.DeepEqual(run.NodeCPUWaitUs, []float64{0, 2000}) ||
		!reflect.DeepEqual(run.NodeDeviceBusy, []float64{0, 0.5}) {
		t.Errorf("node time: processor %v wait %v device %v", run.NodeCPUBusy, run.NodeCPUWaitUs, run.NodeDeviceBusy)
	}
	// A node without reads has no latency: it is not a latency of 0.
	starved := Summarize(RunInfo{Policy: "c3", Workload: src.Workload(), Nodes: []NodeStat{
		{Requests: 100, MeanLatency: 100 * time.Microsecond},
		{Requests: 300, MeanLatency: 300 * time.Microsecond},
		{Requests: 5},
	}}, res)
	if starved.NodeCPUBusy != nil || starved.NodeDeviceBusy != nil {
		t.Errorf("no device, yet node time %v %v", starved.NodeCPUBusy, starved.NodeDeviceBusy)
	}
	if starved.NodeLatencyCoV != 0.5 || starved.LoadCoV == 0 {
		t.Errorf("a node without reads: latency CoV %g (want 0.5), load CoV %g", starved.NodeLatencyCoV, starved.LoadCoV)
	}
	if run.DirHitRate != 0.75 || run.CPUSeconds != 1.5 || run.RSSBytes != 1<<20 {
		t.Errorf("inputs not carried: %+v", run)
	}
	if math.Abs(run.WriteP99us-5000) > 10 {
		t.Errorf("write p99 %g µs, want 5000", run.WriteP99us)
	}
	if run.ParetoAlpha != 1.5 || run.TailIndexExpected != 0.5 {
		t.Errorf("Pareto fields %g %g", run.ParetoAlpha, run.TailIndexExpected)
	}
	// Uniform latencies on [1, 1000] µs: a bounded tail, large index.
	if run.TailIndex < 5 {
		t.Errorf("tail index %g", run.TailIndex)
	}
	if n := len(run.Latency); n < 20 || run.Latency[0].Q != 0 || run.Latency[n-1].Q != 1 {
		t.Fatalf("latency points %v", run.Latency)
	}
	if !sort.SliceIsSorted(run.Latency, func(i, j int) bool { return run.Latency[i].Q < run.Latency[j].Q }) {
		t.Error("latency points not sorted by quantile")
	}
	for i := 1; i < len(run.Latency); i++ {
		if run.Latency[i].Us < run.Latency[i-1].Us {
			t.Fatalf("latency CDF decreases at %d: %v", i, run.Latency[i-1:i+1])
		}
	}
	// No result: zeros, no NaN.
	empty := Summarize(RunInfo{Policy: "static", Workload: src.Workload()}, nil)
	if empty.ThroughputOps != 0 || empty.LoadCoV != 0 {
		t.Errorf("empty run %+v", empty)
	}
}

// The JSON field names fixed by issue 6.
var requiredFields = []string{"policy", "workload", "zipf", "nodes", "throughput_ops", "p50_us", "p99_us",
	"p999_us", "load_max_over_mean", "load_cov", "node_latency_cov", "dir_hit_rate", "tail_index"}

func TestJSONShape(t *testing.T) {
	in := Results{Runs: []Run{{
		Policy: "netdir", Workload: "B", Zipf: 0.99, Nodes: 8, ThroughputOps: 123456.5,
		P50us: 10.5, P99us: 99.5, P999us: 999.5, LoadMaxOverMean: 1.04, LoadCoV: 0.02,
		NodeLatencyCoV: 0.03, DirHitRate: 0.9, TailIndex: 2.5,
		Dist: "zipf", ParetoAlpha: 1.5, TailIndexExpected: 0.5, Ops: 1000, Errors: 2,
		DurationS: 10, CPUSeconds: 3.5, RSSBytes: 1 << 30, NodeLoads: []float64{1, 2},
		NodeLatencyUs: []float64{3, 4}, Latency: []QuantilePoint{{0, 1}, {1, 2}},
	}, {Policy: "static", Workload: "B", Nodes: 8, TailIndex: math.Inf(1), LoadCoV: math.NaN()}}}
	var b bytes.Buffer
	if err := WriteJSON(&b, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadJSON(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	in.Runs[1].TailIndex, in.Runs[1].LoadCoV = 0, 0 // sanitized: JSON has no Inf/NaN
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n in %+v\nout %+v", in, out)
	}
	var raw map[string][]map[string]any
	if err := json.Unmarshal(b.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 1 || len(raw["runs"]) != 2 {
		t.Fatalf("top level %v", raw)
	}
	for _, f := range requiredFields {
		for i, r := range raw["runs"] {
			if _, ok := r[f]; !ok {
				t.Errorf("run %d lacks %q", i, f)
			}
		}
	}
	if raw["runs"][0]["policy"] != "netdir" || raw["runs"][0]["throughput_ops"] != 123456.5 ||
		raw["runs"][0]["load_max_over_mean"] != 1.04 {
		t.Errorf("values %v", raw["runs"][0])
	}
	var e bytes.Buffer
	if err := WriteJSON(&e, Results{}); err != nil || strings.TrimSpace(e.String()) != `{
  "runs": []
}` {
		t.Errorf("empty results %q, %v", e.String(), err)
	}
}

func TestReadProcStats(t *testing.T) {
	// Burn a little CPU so the counter has moved.
	x := 0.0
	for i := 0; i < 2_000_000; i++ {
		x += math.Sqrt(float64(i))
	}
	ps, err := ReadProcStats()
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if ps.RSSBytes < 1<<20 || ps.CPUSeconds < 0 || x == 0 {
		t.Errorf("proc stats %+v", ps)
	}
}
