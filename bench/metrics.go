package bench

import (
	"encoding/json"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/procfs"
)

// Latency histograms record nanoseconds from 1 ns to one minute with three
// significant digits (0.1% resolution).
const (
	histMin     = 1
	histMax     = int64(time.Minute)
	histSigFigs = 3
)

// NewHistogram returns an empty latency histogram in nanoseconds, the
// geometry every Recorder uses.
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMin, histMax, histSigFigs)
}

func recordNS(h *hdrhistogram.Histogram, d time.Duration) {
	v := int64(d)
	if v < histMin {
		v = histMin
	}
	if v > histMax {
		v = histMax
	}
	_ = h.RecordValue(v) // in range by the clamp above
}

// Recorder collects the latencies and counts of one run. It is safe for
// concurrent use by the drivers' workers and a live-view reader.
type Recorder struct {
	mu       sync.Mutex
	total    *hdrhistogram.Histogram
	byKind   [numOpKinds]*hdrhistogram.Histogram
	interval *hdrhistogram.Histogram
	ops      int64
	errs     int64
	ivOps    int64
	ivErrs   int64
	ivStart  time.Time
	kindOps  [numOpKinds]int64
	kindErrs [numOpKinds]int64
}

// NewRecorder returns an empty recorder; now starts its first live interval.
func NewRecorder(now time.Time) *Recorder {
	r := &Recorder{total: NewHistogram(), interval: NewHistogram(), ivStart: now}
	for i := range r.byKind {
		r.byKind[i] = NewHistogram()
	}
	return r
}

// Record adds one completed operation. Failed operations are counted but
// their latency is not recorded.
func (r *Recorder) Record(kind OpKind, lat time.Duration, err error) {
	if kind >= numOpKinds {
		kind = OpRead
	}
	r.mu.Lock()
	if err != nil {
		r.errs++
		r.ivErrs++
		r.kindErrs[kind]++
	} else {
		r.ops++
		r.ivOps++
		r.kindOps[kind]++
		recordNS(r.total, lat)
		recordNS(r.byKind[kind], lat)
		recordNS(r.interval, lat)
	}
	r.mu.Unlock()
}

// Interval is what the live view shows for the last interval.
type Interval struct {
	Ops, Errors int64
	Elapsed     time.Duration
	Throughput  float64 // successful ops per second
	P99         time.Duration
}

// Interval returns the counts and p99 since the previous call (or since
// NewRecorder) and starts a new interval at now.
func (r *Recorder) Interval(now time.Time) Interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	iv := Interval{Ops: r.ivOps, Errors: r.ivErrs, Elapsed: now.Sub(r.ivStart)}
	if iv.Elapsed > 0 {
		iv.Throughput = float64(iv.Ops) / iv.Elapsed.Seconds()
	}
	iv.P99 = time.Duration(r.interval.ValueAtQuantile(99))
	r.interval.Reset()
	r.ivOps, r.ivErrs, r.ivStart = 0, 0, now
	return iv
}

// Snapshot copies the recorder's totals.
func (r *Recorder) Snapshot() *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{Ops: r.ops, Errors: r.errs, Latency: r.total.Clone()}
	res.Kinds = make(map[string]KindResult)
	for k := OpKind(0); k < numOpKinds; k++ {
		if r.kindOps[k]+r.kindErrs[k] == 0 {
			continue
		}
		res.Kinds[k.String()] = KindResult{Ops: r.kindOps[k], Errors: r.kindErrs[k], Latency: r.byKind[k].Clone()}
	}
	return res
}

// Result is the outcome of one driver run.
type Result struct {
	Ops     int64 // successful operations
	Errors  int64 // failed operations
	Dropped int64 // open loop: arrivals not issued because the backlog was full
	Elapsed time.Duration
	// Latency of successful operations in nanoseconds. Open-loop latency is
	// measured from each arrival's scheduled time, so queueing counts.
	Latency *hdrhistogram.Histogram
	Kinds   map[string]KindResult // by OpKind.String()
}

// KindResult is the share of a Result for one operation kind.
type KindResult struct {
	Ops, Errors int64
	Latency     *hdrhistogram.Histogram
}

// Throughput is successful operations per second.
func (r *Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Quantile returns the latency at quantile q in [0, 100] (HdrHistogram's
// percentile convention).
func Quantile(h *hdrhistogram.Histogram, q float64) time.Duration {
	return time.Duration(h.ValueAtQuantile(q))
}

// Mean is the arithmetic mean of xs (0 for none).
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// CoV is the coefficient of variation of xs: population standard deviation
// over mean. It is 0 for fewer than two values or a zero mean.
func CoV(xs []float64) float64 {
	m := Mean(xs)
	if len(xs) < 2 || m == 0 {
		return 0
	}
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return math.Sqrt(v/float64(len(xs))) / m
}

// servedLatencies is the mean read latencies of the nodes that served
// reads: a node that served none (a policy that stopped choosing it, a
// node that only took writes) has no latency, and counting it as 0 made
// the CoV of a run that starved one node of 8 about twice its spread among
// the nodes that served (c3 in BENCHMARKS.md, HATS (c)).
func servedLatencies(us []float64) []float64 {
	out := make([]float64, 0, len(us))
	for _, x := range us {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

// MaxOverMean is max(xs)/mean(xs), 1 for perfect balance; 0 for none or a
// zero mean.
func MaxOverMean(xs []float64) float64 {
	m := Mean(xs)
	if m == 0 {
		return 0
	}
	mx := xs[0]
	for _, x := range xs[1:] {
		mx = max(mx, x)
	}
	return mx / m
}

// HillK is the number of upper order statistics the Hill estimator uses for n
// samples: the top 5%, at least 10 and at most n−1 (0 when n < 11).
func HillK(n int) int {
	if n < 11 {
		return 0
	}
	k := n / 20
	k = max(k, 10)
	return min(k, n-1)
}

// Hill estimates the tail index α of samples from their k largest values:
// α̂ = k / Σ_{i=1..k} ln(X_(i) / X_(k+1)), with X_(1) ≥ X_(2) ≥ … the order
// statistics. For Pareto(α) samples α̂ → α; light tails (exponential,
// normal) give large values. k ≤ 0 picks HillK(len(xs)). It returns 0 when
// the estimate is undefined (too few positive samples, or a flat tail).
// xs is not modified.
func Hill(xs []float64, k int) float64 {
	pos := make([]float64, 0, len(xs))
	for _, x := range xs {
		if x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) {
			pos = append(pos, x)
		}
	}
	if k <= 0 {
		k = HillK(len(pos))
	}
	if k <= 0 || k >= len(pos) {
		return 0
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(pos)))
	return hillSorted(pos, k)
}

func hillSorted(desc []float64, k int) float64 {
	t := math.Log(desc[k])
	s := 0.0
	for _, x := range desc[:k] {
		s += math.Log(x) - t
	}
	if s <= 0 {
		return 0
	}
	return float64(k) / s
}

// HillHistogram is Hill over a latency histogram, with k = HillK(count):
// each recorded value stands at its bucket's midpoint (0.1% resolution), so
// the estimate matches Hill over the raw samples to about that precision.
func HillHistogram(h *hdrhistogram.Histogram) float64 {
	n := h.TotalCount()
	k := HillK(int(min(n, math.MaxInt32)))
	if k <= 0 {
		return 0
	}
	// Walk the bars from the top, expanding the k+1 largest values.
	bars := h.Distribution()
	top := make([]float64, 0, k+1)
	for i := len(bars) - 1; i >= 0 && len(top) < k+1; i-- {
		b := bars[i]
		if b.Count == 0 {
			continue
		}
		v := float64(b.From+b.To) / 2
		for c := int64(0); c < b.Count && len(top) < k+1; c++ {
			top = append(top, v)
		}
	}
	if len(top) < k+1 {
		return 0
	}
	return hillSorted(top, k)
}

// ProcStats is the resource use of a process.
type ProcStats struct {
	CPUSeconds float64 // user + system CPU time
	RSSBytes   int64   // resident set size
}

// Since is the resource use between an earlier read and p: the CPU seconds
// spent in between, and p's RSS.
func (p ProcStats) Since(before ProcStats) ProcStats {
	return ProcStats{CPUSeconds: p.CPUSeconds - before.CPUSeconds, RSSBytes: p.RSSBytes}
}

// ReadProcStats reads this process's CPU time and RSS from /proc/self (the
// demo runs the system under test in-process).
func ReadProcStats() (ProcStats, error) { return ReadProcStatsOf(os.Getpid()) }

// ReadProcStatsOf reads process pid's CPU time and RSS from /proc.
func ReadProcStatsOf(pid int) (ProcStats, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return ProcStats{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return ProcStats{}, err
	}
	return ProcStats{CPUSeconds: st.CPUTime(), RSSBytes: int64(st.ResidentMemory())}, nil
}

// Run is one row of the results: a policy on a workload at one skew and
// cluster size. The first fields are the shape fixed by issue 6 (scripts read
// them); the rest are extras. Undefined metrics are 0 (JSON has no NaN).
type Run struct {
	Policy          string  `json:"policy"`
	Workload        string  `json:"workload"`
	Zipf            float64 `json:"zipf"`
	Nodes           int     `json:"nodes"`
	ThroughputOps   float64 `json:"throughput_ops"`
	P50us           float64 `json:"p50_us"`
	P99us           float64 `json:"p99_us"`
	P999us          float64 `json:"p999_us"`
	LoadMaxOverMean float64 `json:"load_max_over_mean"`
	LoadCoV         float64 `json:"load_cov"`
	NodeLatencyCoV  float64 `json:"node_latency_cov"`
	DirHitRate      float64 `json:"dir_hit_rate"`
	TailIndex       float64 `json:"tail_index"`

	// Extras.
	Dist string `json:"dist,omitempty"` // zipf or uniform (Zipf is 0 for uniform)
	// Pareto value sizes: α, and α−1, the optimal latency tail index that
	// TailIndex is set against.
	ParetoAlpha       float64         `json:"pareto_alpha,omitempty"`
	TailIndexExpected float64         `json:"tail_index_expected,omitempty"`
	Ops               int64           `json:"ops"`
	Errors            int64           `json:"errors"`
	Dropped           int64           `json:"dropped,omitempty"`
	DurationS         float64         `json:"duration_s"`
	CPUSeconds        float64         `json:"cpu_seconds"`
	RSSBytes          int64           `json:"rss_bytes"`
	MeanUs            float64         `json:"mean_us"`
	MaxUs             float64         `json:"max_us"`
	NodeLoads         []float64       `json:"node_loads,omitempty"`      // requests per node
	NodeLatencyUs     []float64       `json:"node_latency_us,omitempty"` // mean latency per node
	DirSize           int             `json:"dir_size,omitempty"`
	Latency           []QuantilePoint `json:"latency,omitempty"` // CDF points for the report
	Note              string          `json:"note,omitempty"`
	// The system under test: each node's nominal capacity in ops/s (0:
	// none), its token bucket's or, on a device, the least of its
	// processor's and its device's at the run's DeviceReadsPerGet
	// (system.System.NodeCapacity), so the ideal throughput is Nodes ×
	// CapacityOps; and how the
	// data plane was programmed ("p4runtime", "control-api", or "client" for
	// client-side policies).
	CapacityOps float64 `json:"capacity_ops,omitempty"`
	Control     string  `json:"control,omitempty"`
	// Device is the nodes' emulated storage device profile ("ssd", "hdd",
	// "none"), whose time is their capacity.
	Device string `json:"device,omitempty"`
	// DeviceReadsPerGet is the block reads the nodes' devices served per
	// GET over the run: about the fraction of GETs that missed the block
	// cache (a GET may read more than one block).
	DeviceReadsPerGet float64 `json:"device_reads_per_get"`

	// SwitchedFraction is the fraction of the requests the data plane
	// routed that the fine score sent to its second candidate (HATS §4.3):
	// requests that left the first weighted choice.
	SwitchedFraction float64 `json:"switched_fraction"`

	// The workload's hottest key (index 0), as the clients saw its reads
	// served (issue 18): its locations (its LocationList at the end of the
	// run, or its chain when not in the directory, and any other node that
	// served it), max/mean of the reads each served, and the share the
	// locations beyond the chain (extras) served.
	HotKeyLocations       int     `json:"hot_key_locations,omitempty"`
	HotKeyReadMaxOverMean float64 `json:"hot_key_read_max_over_mean,omitempty"`
	HotKeyExtraShare      float64 `json:"hot_key_extra_share,omitempty"`
	// WriteP99us is the p99 latency of the writes (update, insert, rmw)
	// alone.
	WriteP99us float64 `json:"write_p99_us,omitempty"`
	// WriteGroups is the versions chain heads made of two writes of one
	// key or more (write groups, session 12), and GroupedWrites the
	// writes they absorbed (all but each group's last): the chain writes
	// saved, as storagenode's stats count them.
	WriteGroups   int64 `json:"write_groups,omitempty"`
	GroupedWrites int64 `json:"grouped_writes,omitempty"`

	// OfferedOps is the open-loop rate the run was offered (ops/s; 0:
	// closed loop), so runs of different policies compare at equal load.
	OfferedOps float64 `json:"offered_ops,omitempty"`
	// Series is the run's throughput and load balance second by second.
	Series []SeriesPoint `json:"series,omitempty"`

	// Per node, on a device (NodeStat): its processor's busy fraction, a
	// request's mean wait for it, and its device's busy fraction. They say
	// whether the nodes bind, or the load in front of them.
	NodeCPUBusy    []float64 `json:"node_cpu_busy,omitempty"`
	NodeCPUWaitUs  []float64 `json:"node_cpu_wait_us,omitempty"`
	NodeDeviceBusy []float64 `json:"node_device_busy,omitempty"`
}

// SeriesPoint is one second of a run: its throughput and its per-node
// load's max over mean.
type SeriesPoint struct {
	T               float64 `json:"t_s"`
	ThroughputOps   float64 `json:"throughput_ops"`
	LoadMaxOverMean float64 `json:"load_max_over_mean"`
}

// QuantilePoint is one point of a latency CDF: the fraction Q of operations
// at or below Us microseconds.
type QuantilePoint struct {
	Q  float64 `json:"q"`
	Us float64 `json:"us"`
}

// Results is the JSON file that demo and bench write: {"runs":[…]}.
type Results struct {
	Runs []Run `json:"runs"`
}

// NodeStat is one storage node's share of a run, as the caller reads it from
// the data plane's or the nodes' stats.
type NodeStat struct {
	// Requests is the client requests the node served (or per second; only
	// ratios matter), a write group counting once: its load is what its
	// capacity was spent on, and a group costs one admission
	// (docs/architecture.md, "Write groups"). Counted per request, a hot
	// key's head looked 3-10 times as loaded as the mean at 1024 nodes while
	// serving its capacity like every other node.
	Requests    float64
	MeanLatency time.Duration // mean service latency
	// On a device (zero without one): the fraction of the run the node's
	// processor was busy and a client request's mean wait in its queue;
	// the fraction of its device's slots busy.
	CPUBusy    float64
	CPUWait    time.Duration
	DeviceBusy float64
}

// RunInfo is what the caller knows about a run beyond the driver's Result.
type RunInfo struct {
	Policy     string
	Workload   Workload // as built (Source.Workload()), for name, skew and sizes
	Nodes      []NodeStat
	DirHitRate float64 // fraction of requests that hit the directory
	DirSize    int
	CPU        ProcStats // resource use during the run: after.Since(before)
	Note       string

	SwitchedFraction float64 // Run.SwitchedFraction
}

// Summarize turns a driver result and the caller's node stats into a Run.
func Summarize(info RunInfo, res *Result) Run {
	w := info.Workload
	run := Run{
		Policy:     info.Policy,
		Workload:   w.Name,
		Zipf:       w.Zipf,
		Dist:       w.Dist,
		Nodes:      len(info.Nodes),
		DirHitRate: info.DirHitRate,
		DirSize:    info.DirSize,
		CPUSeconds: info.CPU.CPUSeconds,
		RSSBytes:   info.CPU.RSSBytes,
		Note:       info.Note,
	}
	run.SwitchedFraction = info.SwitchedFraction
	if w.Dist == DistUniform {
		run.Zipf = 0
	}
	if res != nil {
		run.Ops, run.Errors, run.Dropped = res.Ops, res.Errors, res.Dropped
		run.DurationS = res.Elapsed.Seconds()
		run.ThroughputOps = res.Throughput()
		if h := res.Latency; h != nil && h.TotalCount() > 0 {
			run.P50us = us(Quantile(h, 50))
			run.P99us = us(Quantile(h, 99))
			run.P999us = us(Quantile(h, 99.9))
			run.MeanUs = h.Mean() / 1e3
			run.MaxUs = float64(h.Max()) / 1e3
			run.TailIndex = HillHistogram(h)
			run.Latency = CDFPoints(h)
		}
		if w := writeLatency(res.Kinds); w != nil && w.TotalCount() > 0 {
			run.WriteP99us = us(Quantile(w, 99))
		}
	}
	if w.ParetoAlpha > 0 {
		run.ParetoAlpha = w.ParetoAlpha
		run.TailIndexExpected = w.ParetoAlpha - 1
	}
	if len(info.Nodes) > 0 {
		run.NodeLoads = make([]float64, len(info.Nodes))
		run.NodeLatencyUs = make([]float64, len(info.Nodes))
		for i, n := range info.Nodes {
			run.NodeLoads[i] = n.Requests
			run.NodeLatencyUs[i] = us(n.MeanLatency)
		}
		if slices.ContainsFunc(info.Nodes, func(n NodeStat) bool { return n.CPUBusy > 0 || n.DeviceBusy > 0 }) {
			for _, n := range info.Nodes {
				run.NodeCPUBusy = append(run.NodeCPUBusy, n.CPUBusy)
				run.NodeCPUWaitUs = append(run.NodeCPUWaitUs, us(n.CPUWait))
				run.NodeDeviceBusy = append(run.NodeDeviceBusy, n.DeviceBusy)
			}
		}
		run.LoadMaxOverMean = MaxOverMean(run.NodeLoads)
		run.LoadCoV = CoV(run.NodeLoads)
		run.NodeLatencyCoV = CoV(servedLatencies(run.NodeLatencyUs))
	}
	run.sanitize()
	return run
}

// writeLatency merges the latencies of the write kinds (nil if none ran).
func writeLatency(kinds map[string]KindResult) *hdrhistogram.Histogram {
	var w *hdrhistogram.Histogram
	for _, k := range []OpKind{OpUpdate, OpInsert, OpReadModifyWrite} {
		kr, ok := kinds[k.String()]
		if !ok || kr.Latency == nil {
			continue
		}
		if w == nil {
			w = NewHistogram()
		}
		w.Merge(kr.Latency)
	}
	return w
}

// JoinNote appends more to a run's note (Run.Note), after a semicolon.
func JoinNote(note, more string) string {
	if note == "" {
		return more
	}
	return note + "; " + more
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

func (r *Run) sanitize() {
	for _, p := range []*float64{&r.Zipf, &r.ThroughputOps, &r.P50us, &r.P99us, &r.P999us,
		&r.LoadMaxOverMean, &r.LoadCoV, &r.NodeLatencyCoV, &r.DirHitRate, &r.TailIndex,
		&r.ParetoAlpha, &r.TailIndexExpected, &r.DurationS, &r.CPUSeconds, &r.MeanUs, &r.MaxUs,
		&r.HotKeyReadMaxOverMean, &r.HotKeyExtraShare, &r.WriteP99us} {
		*p = finite(*p)
	}
	for _, s := range [][]float64{r.NodeLoads, r.NodeLatencyUs, r.NodeCPUBusy, r.NodeCPUWaitUs, r.NodeDeviceBusy} {
		for i := range s {
			s[i] = finite(s[i])
		}
	}
}

// CDFPoints samples the latency CDF of h at quantiles spaced evenly in
// log(1−q), from the median out to the last recorded value, so that the
// report can draw both the CDF and the log-log tail from the JSON alone.
func CDFPoints(h *hdrhistogram.Histogram) []QuantilePoint {
	n := h.TotalCount()
	if n == 0 {
		return nil
	}
	var pts []QuantilePoint
	for i := 0; i <= 10; i++ {
		q := float64(i) / 20
		pts = append(pts, QuantilePoint{Q: q, Us: us(Quantile(h, q*100))})
	}
	// 1−q from 0.5 down to 1/n, ten points per decade.
	last := 1 / float64(n)
	for i := 1; i <= 200; i++ {
		tail := 0.5 * math.Pow(10, -float64(i)/10)
		if tail < last {
			break
		}
		q := 1 - tail
		pts = append(pts, QuantilePoint{Q: q, Us: us(Quantile(h, q*100))})
	}
	pts = append(pts, QuantilePoint{Q: 1, Us: float64(h.Max()) / 1e3})
	return pts
}

// WriteJSON writes results as indented JSON.
func WriteJSON(w io.Writer, r Results) error {
	for i := range r.Runs {
		r.Runs[i].sanitize()
	}
	if r.Runs == nil {
		r.Runs = []Run{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads results written by WriteJSON.
func ReadJSON(rd io.Reader) (Results, error) {
	var r Results
	err := json.NewDecoder(rd).Decode(&r)
	return r, err
}
