package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/bench/system"
	"github.com/netdir/netdir/storagenode"
)

// The named experiments of `netdir bench --experiment` (issue 8, HATS).
const (
	// ExpCompactionBalance: request balance against latency balance while
	// one node compacts (HATS: 4.24× latency spread at 18.9% request
	// spread).
	ExpCompactionBalance = "compaction-balance"
	// ExpCompactionPacing: read throughput with compaction unthrottled
	// against paced by read share (HATS: 3.6× drop when unchecked).
	ExpCompactionPacing = "compaction-pacing"
	// ExpAblation: static → coarse → +fine → +compaction on each workload,
	// beside c3 and replicas, with compaction live (HATS: P99 −59% against
	// C3 on YCSB-B with compaction).
	ExpAblation = "ablation"
)

// ablationSteps are the runs of the ablation per workload, in order: the
// steps that add one HATS scheduler each, then the baselines. Each names
// its data path's policy (system.StartPlane) and whether the nodes pace
// compaction by read share at --compaction-mib (else unthrottled).
var ablationSteps = []struct {
	name, policy string
	paced        bool
}{
	{"static", "static", false},                // the chain head only
	{"coarse", "coarse", false},                // directory and coarse epoch weights, the first weighted choice
	{"coarse+fine", "netdir", false},           // and the fine score
	{"coarse+fine+compaction", "netdir", true}, // and compaction paced by read share
	{"c3", system.PolicyC3, false},             // C3 on the client, over the chain
	{"replicas", "replicas", false},            // uniform over the chain
}

// ablationFull is the step with every scheduler, set against c3 in the
// summary.
const ablationFull = "coarse+fine+compaction"

// experimentStep is one policy run of an experiment: a compaction phase of a
// policy on a workload.
type experimentStep struct {
	name     string // the run's policy in the results: the policy, or the ablation's step
	policy   string
	workload bench.Workload
	phase    system.CompactionPhase
}

// experimentFlags are the flags of the named experiments.
type experimentFlags struct {
	name       string
	fillMiB    float64
	budgetMiB  float64
	lead       time.Duration
	fillTrees  string
	compactors int
	lbaseMiB   float64
	repeat     int
}

func (e *experimentFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&e.name, "experiment", "", "run a named experiment instead of the policy sweep: "+
		ExpCompactionBalance+" (request vs latency balance while node 1 compacts), "+
		ExpCompactionPacing+" (read throughput, compaction unthrottled vs paced), "+
		"both on the first --nodes, --workload and --zipf and the first of --policies (default replicas); or "+
		ExpAblation+" (static, coarse, coarse+fine, coarse+fine+compaction, c3 and replicas on every --workload "+
		"(default A,B,C), the first --nodes and --zipf, compaction live)")
	fl.Float64Var(&e.fillMiB, "fill-mib", 16, "experiments: background writes per compacting node (MiB/s), which keep its compactions busy")
	fl.Float64Var(&e.budgetMiB, "compaction-mib", float64(storagenode.DefaultCompactionBudget>>20),
		"experiments: the nodes' compaction budget in the paced phase (MiB/s)")
	fl.DurationVar(&e.lead, "fill-lead", 3*time.Second, "experiments: background writes start this long before the workload")
	fl.StringVar(&e.fillTrees, "fill-trees", "", "experiments: chain positions the background writes go to (comma list; default every tree)")
	fl.Float64Var(&e.lbaseMiB, "lbase-mib", 2, "experiments: Pebble's base level size per tree (MiB; Pebble's default is 64): "+
		"a small data set gets the levels, and so the non-L0 compactions that pacing acts on, of a large one")
	fl.IntVar(&e.repeat, "repeat", 1, "experiments: run the compared phases this many times, in ABBA order "+
		"(A B, B A, A B, …), so that a drift of the shared machine's load cancels; the summary averages them")
	fl.IntVar(&e.compactors, "compacting-nodes", 0, "experiments: how many nodes write in the background (default 1 for "+
		ExpCompactionBalance+", every node for "+ExpCompactionPacing+", half of them for "+ExpAblation+")")
}

// experimentResults is the JSON of an experiment: the runs as `netdir
// bench` writes them, and each phase's per-node figures.
type experimentResults struct {
	Experiment string               `json:"experiment"`
	Command    string               `json:"command"`
	Runs       []bench.Run          `json:"runs"`
	Phases     []system.PhaseResult `json:"phases"`
	Summary    map[string]float64   `json:"summary"`
}

func runExperiment(cmd *cobra.Command, f benchFlags, e experimentFlags, workload, zipf string, keys int64) error {
	out := cmd.OutOrStdout()
	nodes, err := parseInts("nodes", f.nodes)
	if err != nil {
		return err
	}
	n := nodes[0]
	var dist string
	var theta float64
	switch z := parseList(zipf)[0]; z {
	case "uniform":
		dist = bench.DistUniform
	default:
		if _, err := fmt.Sscan(z, &theta); err != nil || theta <= 0 || theta > 3 {
			return fmt.Errorf("--zipf %q", z)
		}
		dist = bench.DistZipf
	}
	workloads := parseList(workload)
	if len(workloads) == 0 {
		return errors.New("--workload: empty")
	}
	if e.name == ExpAblation {
		if !cmd.Flags().Changed("workload") {
			workloads = []string{"A", "B", "C"}
		}
	} else {
		workloads = workloads[:1]
	}
	var ws []bench.Workload
	for _, x := range workloads {
		mix, err := bench.YCSB(x)
		if err != nil {
			return fmt.Errorf("--workload: %w", err)
		}
		ws = append(ws, bench.Workload{Name: strings.ToUpper(x), Mix: mix, Keys: keys, ValueSize: f.valueSize, Seed: f.seed, Dist: dist, Zipf: theta})
	}
	var trees []int
	for _, x := range parseList(e.fillTrees) {
		var t int
		if _, err := fmt.Sscan(x, &t); err != nil || t < 0 || t >= f.replicas {
			return fmt.Errorf("--fill-trees %q: want chain positions 0..%d", x, f.replicas-1)
		}
		trees = append(trees, t)
	}
	fill := e.fillMiB * (1 << 20)
	budget := int64(e.budgetMiB * (1 << 20))
	compactors := e.compactors
	var steps []experimentStep
	switch e.name {
	case ExpCompactionBalance, ExpCompactionPacing:
		policy := "replicas"
		if cmd.Flags().Changed("policies") {
			ps, err := parsePolicies(f.policies)
			if err != nil {
				return err
			}
			policy = ps[0]
		}
		var phases []system.CompactionPhase
		if e.name == ExpCompactionBalance {
			if compactors == 0 {
				compactors = 1
			}
			phases = abba(e.repeat,
				system.CompactionPhase{Name: "idle", Budget: storagenode.Unthrottled},
				system.CompactionPhase{Name: "compacting", Fill: firstNodes(compactors, n), FillRate: fill, FillTrees: trees, Budget: storagenode.Unthrottled, Lead: e.lead})
		} else {
			if compactors == 0 {
				compactors = n
			}
			phases = append([]system.CompactionPhase{{Name: "idle", Budget: budget}}, abba(e.repeat,
				system.CompactionPhase{Name: "unthrottled", Fill: firstNodes(compactors, n), FillRate: fill, FillTrees: trees, Budget: storagenode.Unthrottled, Lead: e.lead},
				system.CompactionPhase{Name: "paced", Fill: firstNodes(compactors, n), FillRate: fill, FillTrees: trees, Budget: budget, Lead: e.lead})...)
		}
		for _, ph := range phases {
			steps = append(steps, experimentStep{name: policy, policy: policy, workload: ws[0], phase: ph})
		}
	case ExpAblation:
		if cmd.Flags().Changed("policies") || e.repeat > 1 {
			return errors.New("--experiment " + ExpAblation + ": runs its own steps (no --policies or --repeat)")
		}
		if compactors == 0 {
			compactors = (n + 1) / 2
		}
		for _, w := range ws {
			for _, st := range ablationSteps {
				ph := system.CompactionPhase{Name: st.name, Fill: firstNodes(compactors, n), FillRate: fill, FillTrees: trees,
					Budget: storagenode.Unthrottled, Lead: e.lead}
				if st.paced {
					ph.Budget = budget
				}
				steps = append(steps, experimentStep{name: st.name, policy: st.policy, workload: w, phase: ph})
			}
		}
		if f.warmup < 2*system.CoarseEpoch {
			fmt.Fprintf(out, "==> note: coarse weights from measured load are installed %s after a plane starts; with --warmup %s the measurement starts before them\n",
				2*system.CoarseEpoch, f.warmup)
		}
	default:
		return fmt.Errorf("--experiment %q: want %s, %s or %s", e.name, ExpCompactionBalance, ExpCompactionPacing, ExpAblation)
	}
	live, err := liveFunc(out, f.live)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	capacity := f.capacity
	if capacity == 0 {
		capacity = -1
	}
	sys, err := system.Start(ctx, system.Config{
		Nodes: n, Replicas: min(f.replicas, n), Capacity: capacity, Dir: nodeDir(f.dataDir, n),
		P4Info: f.p4info, Log: componentLog(cmd.ErrOrStderr(), f.verbose),
		Progress: func(s string) { fmt.Fprintln(out, "==>", s) },
		NodeOptions: func(o *storagenode.Options) {
			o.LBaseMaxBytes = int64(e.lbaseMiB * (1 << 20))
		},
	})
	if err != nil {
		return err
	}
	defer sys.Close()
	src, err := bench.Workload{Name: "load", Mix: bench.WriteMix(1), Keys: keys, ValueSize: f.valueSize, Seed: f.seed}.Build()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "==> preloading %d keys\n", keys)
	if err := sys.Preload(ctx, src, 64, nil); err != nil {
		return err
	}
	res := experimentResults{Experiment: e.name, Command: strings.Join(os.Args, " "), Summary: map[string]float64{}}
	for _, st := range steps {
		ph := st.phase
		fmt.Fprintf(out, "==> %s, phase %s: %s on %s, %s, %d nodes, %s; background writes %.0f MiB/s on nodes %v, compaction budget %s\n",
			e.name, ph.Name, st.policy, st.workload.Name, distName(dist, theta), n, loopName(f), ph.FillRate/(1<<20), oneBasedList(ph.Fill), system.BudgetName(ph.Budget))
		run, pr, err := sys.RunCompactionPhase(ctx, st.policy, system.RunOptions{
			Workload: st.workload, Workers: f.concurrency, Rate: f.rate, Warmup: f.warmup, Duration: f.duration, Live: live,
		}, ph)
		if err != nil {
			return err
		}
		if st.name != st.policy {
			run.Note = fmt.Sprintf("data path %s; %s", st.policy, run.Note)
			run.Policy = st.name
		}
		res.Runs = append(res.Runs, run)
		res.Phases = append(res.Phases, pr)
		if err := bench.WriteSummary(out, []bench.Run{run}); err != nil {
			return err
		}
		writePhase(out, pr)
		fmt.Fprintf(out, "    fine score switched %.1f%% of routed requests; compaction %s\n", run.SwitchedFraction*100, pacedName(pr.Paced))
	}
	if e.name == ExpAblation {
		summariseAblation(&res)
		fmt.Fprintln(out)
		if err := bench.WriteSummary(out, res.Runs); err != nil {
			return err
		}
	} else {
		summarise(&res)
	}
	fmt.Fprintln(out, "\nsummary")
	for _, k := range slices.Sorted(maps.Keys(res.Summary)) {
		fmt.Fprintf(out, "  %-50s %.3f\n", k, res.Summary[k])
	}
	if f.jsonPath != "" {
		if err := writeJSONFile(f.jsonPath, res); err != nil {
			return err
		}
		fmt.Fprintln(out, "wrote", f.jsonPath)
	}
	if f.htmlPath != "" {
		if err := writeOutputs(bench.Results{Runs: res.Runs}, "", f.htmlPath, "netdir bench --experiment "+e.name); err != nil {
			return err
		}
		fmt.Fprintln(out, "wrote", f.htmlPath)
	}
	return nil
}

func pacedName(paced bool) string {
	if paced {
		return "paced by read share"
	}
	return "unthrottled"
}

// summariseAblation puts, per workload, each step's p99, throughput and
// node latency CoV in res.Summary, and the full system's p99 over c3's (the
// goal: at most 0.40 on YCSB-B).
func summariseAblation(res *experimentResults) {
	s := res.Summary
	p99 := map[[2]string]float64{}
	for _, r := range res.Runs {
		s[r.Workload+" "+r.Policy+" p99 us"] = r.P99us
		s[r.Workload+" "+r.Policy+" throughput ops/s"] = r.ThroughputOps
		s[r.Workload+" "+r.Policy+" node latency CoV"] = r.NodeLatencyCoV
		p99[[2]string{r.Workload, r.Policy}] = r.P99us
	}
	for _, r := range res.Runs {
		if r.Policy != ablationFull {
			continue
		}
		if c3 := p99[[2]string{r.Workload, system.PolicyC3}]; c3 > 0 {
			s[r.Workload+" p99 "+ablationFull+"/c3 x"] = r.P99us / c3
		}
	}
}

func firstNodes(k, n int) []int {
	out := make([]int, min(k, n))
	for i := range out {
		out[i] = i
	}
	return out
}

func oneBasedList(idx []int) string {
	if len(idx) == 0 {
		return "none"
	}
	var s []string
	for _, i := range idx {
		s = append(s, fmt.Sprint(i+1))
	}
	return strings.Join(s, ",")
}

func writePhase(w io.Writer, p system.PhaseResult) {
	row := func(name string, xs []float64, format string) {
		fmt.Fprintf(w, "    %-22s", name)
		for _, x := range xs {
			fmt.Fprintf(w, " "+format, x)
		}
		fmt.Fprintln(w)
	}
	row("node requests", p.NodeRequests, "%8.0f")
	row("node latency (µs)", p.NodeLatencyUs, "%8.0f")
	row("node Pebble read (µs)", p.NodePebbleReadUs, "%8.1f")
	row("node compaction (MiB)", p.NodeCompactionMiB, "%8.1f")
	row("  of which unpaced (MiB)", p.NodeUnpacedMiB, "%8.1f")
	row("node throttled (s)", p.NodeThrottledS, "%8.2f")
	row("node max debt (MiB)", p.NodeMaxDebtMiB, "%8.1f")
	row("node writes", p.NodeWrites, "%8.0f")
	row("node ERR replies", p.NodeErrors, "%8.0f")
	row("  duplicate writes", p.NodeDupWrites, "%8.0f")
	row("  no-op versions", p.NodeNoops, "%8.0f")
	fmt.Fprintf(w, "    %.0f s, compaction %.1f MiB/s over all nodes\n", p.Seconds, p.CompactionMiBps)
	fmt.Fprintf(w, "    request spread %.1f%%, latency spread %.2f×, Pebble read latency spread %.2f×\n",
		(p.RequestSpread-1)*100, p.LatencySpread, p.PebbleLatSpread)
}

// abba repeats phases a and b n times in ABBA order.
func abba(n int, a, b system.CompactionPhase) []system.CompactionPhase {
	var out []system.CompactionPhase
	for i := range max(n, 1) {
		if i%2 == 0 {
			out = append(out, a, b)
		} else {
			out = append(out, b, a)
		}
	}
	return out
}

// phaseMeans averages the headline figures of the phases of each name.
type phaseMeans struct {
	n                                      float64
	throughput, p99, reqSpread, latSpread  float64
	pebbleSpread, compactionMiB, throttled float64
	compactionRate                         float64
}

// summarise puts the headline figures of the experiment, averaged over the
// phases of each name, in res.Summary.
func summarise(res *experimentResults) {
	ph := map[string]*phaseMeans{}
	for _, p := range res.Phases {
		m := ph[p.Phase]
		if m == nil {
			m = &phaseMeans{}
			ph[p.Phase] = m
		}
		m.n++
		m.throughput += p.ThroughputOps
		m.p99 += p.P99us
		m.reqSpread += p.RequestSpread
		m.latSpread += p.LatencySpread
		m.pebbleSpread += p.PebbleLatSpread
		m.compactionRate += p.CompactionMiBps
		for i := range p.NodeCompactionMiB {
			m.compactionMiB += p.NodeCompactionMiB[i]
			m.throttled += p.NodeThrottledS[i]
		}
	}
	for _, m := range ph {
		for _, x := range []*float64{&m.throughput, &m.p99, &m.reqSpread, &m.latSpread, &m.pebbleSpread, &m.compactionMiB, &m.throttled, &m.compactionRate} {
			*x /= m.n
		}
	}
	s := res.Summary
	for name, m := range ph {
		s[name+" throughput ops/s"] = m.throughput
		s[name+" p99 us"] = m.p99
		s[name+" request spread %"] = (m.reqSpread - 1) * 100
		s[name+" latency spread x"] = m.latSpread
		s[name+" Pebble read latency spread x"] = m.pebbleSpread
		s[name+" compaction MiB"] = m.compactionMiB
		s[name+" throttled s"] = m.throttled
		s[name+" compaction MiB/s"] = m.compactionRate
	}
	if idle, un, paced := ph["idle"], ph["unthrottled"], ph["paced"]; idle != nil && un != nil && paced != nil {
		if un.throughput > 0 {
			s["drop idle/unthrottled x"] = idle.throughput / un.throughput
			s["gain paced/unthrottled x"] = paced.throughput / un.throughput
		}
		if paced.throughput > 0 {
			s["drop idle/paced x"] = idle.throughput / paced.throughput
		}
	}
}

func writeJSONFile(path string, v any) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
