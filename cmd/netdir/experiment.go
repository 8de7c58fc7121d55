package main

import (
	"context"
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
	histories  int
	load       float64
	probe      time.Duration
}

func (e *experimentFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&e.name, "experiment", "", "run a named experiment instead of the policy sweep: "+
		system.ExpCompactionBalance+" (request vs latency balance while node 1 compacts), "+
		system.ExpCompactionPacing+" (read throughput, compaction unthrottled vs paced), "+
		"both on the first --nodes, --workload and --zipf and the first of --policies (default replicas); or "+
		system.ExpAblation+" (static, coarse, coarse+fine, coarse+fine+compaction, c3 and replicas on every --workload, "+
		"the first --nodes and --zipf, compaction live, each on a fresh cluster, in ABBA passes, open loop at --load of "+
		"static's probed capacity); or "+system.ExpSLO+" (throughput at the same p99 SLO: c3 and coarse+fine+compaction "+
		"at open-loop rates rising from --load of c3's probed capacity until p99 exceeds twice c3's at the first rate); or "+
		system.ExpQoS+" (per-tenant dmClock: tenants with different triples, one on 2 nodes, rank-local against global); or "+
		system.ExpChaos+" (Porcupine-checked histories while a node, the switch or the raft leader is killed, with datagram faults; a node kill under load; a switch restart; a controller failover)")
	fl.IntVar(&e.histories, "histories", 100, system.ExpChaos+": Porcupine-checked histories (seeded by --seed)")
	fl.Float64Var(&e.fillMiB, "fill-mib", 0, "experiments: background writes per compacting node (MiB/s), which keep its compactions busy "+
		fmt.Sprintf("(0: %g × the device's compaction budget)", float64(system.DefaultFillBudgets)))
	fl.Float64Var(&e.budgetMiB, "compaction-mib", 0,
		"experiments: the nodes' compaction budget in the paced phase (MiB/s; 0: the device's, HATS's 64 MiB/s scaled like the device)")
	fl.DurationVar(&e.lead, "fill-lead", 3*time.Second, "experiments: background writes start this long before the workload")
	fl.StringVar(&e.fillTrees, "fill-trees", "", "experiments: chain positions the background writes go to (comma list; default every tree)")
	fl.Float64Var(&e.lbaseMiB, "lbase-mib", 2, "experiments: Pebble's base level size per tree (MiB; Pebble's default is 64): "+
		"a small data set gets the levels, and so the non-L0 compactions that pacing acts on, of a large one")
	fl.IntVar(&e.repeat, "repeat", 1, "experiments: run the compared phases this many times, in ABBA order "+
		"(A B, B A, A B, …), so that a drift of the shared machine's load cancels; the summary averages them "+
		fmt.Sprintf("(%s: passes over its steps, every other one reversed; default %d)", system.ExpAblation, system.AblationRepeat))
	fl.Float64Var(&e.load, "load", 0, fmt.Sprintf("%s and %s: the offered load as a fraction of a closed-loop capacity probe run first "+
		"(0: %g for %s, %g for %s's first rate); --rate fixes it instead", system.ExpAblation, system.ExpSLO,
		system.DefaultAblationLoad, system.ExpAblation, system.DefaultSLOLoad, system.ExpSLO))
	fl.DurationVar(&e.probe, "probe", system.DefaultProbe, "the capacity probe's measured time")
	fl.IntVar(&e.compactors, "compacting-nodes", 0, "experiments: how many nodes write in the background (default 1 for "+
		system.ExpCompactionBalance+", every node for "+system.ExpCompactionPacing+", half of them for "+system.ExpAblation+")")
}

func runExperiment(cmd *cobra.Command, f benchFlags, e experimentFlags, workload, zipf string, keys int64) error {
	switch e.name {
	case system.ExpQoS:
		return runQoSExperiment(cmd, f)
	case system.ExpChaos:
		return runChaosExperiment(cmd, f, e.histories)
	}
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
	if e.name != system.ExpAblation {
		workloads = workloads[:1]
	}
	sc, err := f.systemConfig(cmd, n, nodeDir(f.dataDir, n), func(o *storagenode.Options) {
		o.LBaseMaxBytes = int64(e.lbaseMiB * (1 << 20))
	})
	if err != nil {
		return err
	}
	repeat := e.repeat
	if e.name == system.ExpAblation && !cmd.Flags().Changed("repeat") {
		repeat = 0 // the ablation's default passes
	}
	cfg := system.ExperimentConfig{Name: e.name, Nodes: n, Repeat: repeat, FillRate: e.fillMiB * (1 << 20),
		Lead: e.lead, Compactors: e.compactors, Budget: int64(e.budgetMiB * (1 << 20)), DeviceBudget: sc.Device.CompactionBudget}
	for _, x := range workloads {
		mix, err := bench.YCSB(x)
		if err != nil {
			return fmt.Errorf("--workload: %w", err)
		}
		cfg.Workloads = append(cfg.Workloads, bench.Workload{Name: strings.ToUpper(x), Mix: mix, Keys: keys, ValueSize: f.valueSize, Seed: f.seed, Dist: dist, Zipf: theta})
	}
	for _, x := range parseList(e.fillTrees) {
		var t int
		if _, err := fmt.Sscan(x, &t); err != nil || t < 0 || t >= f.replicas {
			return fmt.Errorf("--fill-trees %q: want chain positions 0..%d", x, f.replicas-1)
		}
		cfg.FillTrees = append(cfg.FillTrees, t)
	}
	if cmd.Flags().Changed("policies") {
		ps, err := parsePolicies(f.policies)
		if err != nil {
			return err
		}
		cfg.Policy = ps[0]
	}
	steps, err := system.ExperimentSteps(cfg)
	if err != nil {
		return err
	}
	fresh := e.name == system.ExpAblation || e.name == system.ExpSLO
	if fresh && f.warmup < 2*system.CoarseEpoch {
		fmt.Fprintf(out, "==> note: coarse weights from measured load are installed %s after a plane starts; with --warmup %s the measurement starts before them\n",
			2*system.CoarseEpoch, f.warmup)
	}
	live, err := liveFunc(out, f.live)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if fresh {
		return runFreshExperiment(ctx, cmd, f, e, sc, steps, keys, live)
	}
	sys, err := system.Start(ctx, sc)
	if err != nil {
		return err
	}
	defer sys.Close()
	src, err := bench.Workload{Name: "load", Mix: bench.WriteMix(1), Keys: keys, ValueSize: f.valueSize, Seed: f.seed}.Build()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "==> preloading %d keys\n", keys)
	if err := sys.Preload(ctx, src, preloadWorkers, nil); err != nil {
		return err
	}
	res := system.ExperimentResults{Experiment: e.name, Command: strings.Join(os.Args, " ")}
	for _, st := range steps {
		ph := st.Phase
		fmt.Fprintf(out, "==> %s, phase %s: %s on %s, %s, %d nodes, %s; background writes %.3g MiB/s on nodes %v, compaction budget %s\n",
			e.name, ph.Name, st.Policy, st.Workload.Name, distName(dist, theta), n, loopName(f, f.experimentWorkers()), ph.FillRate/(1<<20), oneBasedList(ph.Fill), system.BudgetName(ph.Budget))
		run, pr, err := sys.RunStep(ctx, st, system.RunOptions{
			Workers: f.experimentWorkers(), Rate: f.rate, Warmup: f.warmup, Duration: f.duration, Live: live,
		})
		if err != nil {
			return err
		}
		res.Runs = append(res.Runs, run)
		res.Phases = append(res.Phases, pr)
		if err := bench.WriteSummary(out, []bench.Run{run}); err != nil {
			return err
		}
		writePhase(out, pr)
		fmt.Fprintf(out, "    fine score switched %.1f%% of routed requests; compaction %s\n", run.SwitchedFraction*100, pacedName(pr.Paced))
	}
	res.Summarise()
	return writeExperiment(out, f, e, res)
}

// runFreshExperiment runs the ablation or the SLO sweep: a template
// preloaded once, each step a fresh cluster from it (system.Fresh).
func runFreshExperiment(ctx context.Context, cmd *cobra.Command, f benchFlags, e experimentFlags, sc system.Config,
	steps []system.ExperimentStep, keys int64, live func(bench.LiveStats)) error {
	out := cmd.OutOrStdout()
	src, err := bench.Workload{Name: "load", Mix: bench.WriteMix(1), Keys: keys, ValueSize: f.valueSize, Seed: f.seed}.Build()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "==> preloading %d keys into a template (without device cost); every step starts a fresh cluster from it\n", keys)
	fr, err := system.NewFresh(ctx, sc, src, preloadWorkers)
	if err != nil {
		return err
	}
	defer fr.Close()
	x := system.FreshExperiment{Name: e.name, Steps: steps, Load: e.load, Probe: e.probe,
		Run: system.RunOptions{Workers: f.experimentWorkers(), Rate: f.rate, Warmup: f.warmup, Duration: f.duration, Live: live},
		OnRun: func(st system.ExperimentStep, run bench.Run, pr system.PhaseResult) {
			ph := st.Phase
			fmt.Fprintf(out, "==> %s, %s: %s on %s, %d nodes; background writes %.3g MiB/s on nodes %v, compaction budget %s\n",
				e.name, run.Policy, st.Policy, st.Workload.Name, len(pr.NodeRequests), ph.FillRate/(1<<20), oneBasedList(ph.Fill),
				system.BudgetName(ph.Budget))
			if err := bench.WriteSummary(out, []bench.Run{run}); err != nil {
				fmt.Fprintln(out, "   ", err)
			}
			writePhase(out, pr)
			fmt.Fprintf(out, "    fine score switched %.1f%% of routed requests; compaction %s\n", run.SwitchedFraction*100, pacedName(pr.Paced))
		}}
	res, err := fr.Run(ctx, x)
	if err != nil {
		return err
	}
	res.Command = strings.Join(os.Args, " ")
	fmt.Fprintln(out)
	if err := bench.WriteSummary(out, res.Runs); err != nil {
		return err
	}
	return writeExperiment(out, f, e, res)
}

// writeExperiment prints the summary and writes the JSON and HTML files.
func writeExperiment(out io.Writer, f benchFlags, e experimentFlags, res system.ExperimentResults) error {
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
	row("  of which deep L0 (MiB)", p.NodeDeepL0MiB, "%8.1f")
	row("node max L0 files", p.NodeMaxL0Files, "%8.0f")
	row("node throttled (s)", p.NodeThrottledS, "%8.2f")
	row("node max debt (MiB)", p.NodeMaxDebtMiB, "%8.1f")
	row("node data (MiB)", p.NodeDataMiB, "%8.1f")
	row("node cache (MiB)", p.NodeCacheMiB, "%8.2f")
	row("cache miss ratio", p.NodeCacheMiss, "%8.2f")
	row("device reads per GET", p.NodeReadsPerGet, "%8.2f")
	row("page cache hits per GET", p.NodePageHitsPerGet, "%8.2f")
	row("compaction dev share", p.NodeCompactionShare, "%8.2f")
	row("read device share", p.NodeReadShare, "%8.2f")
	row("node writes", p.NodeWrites, "%8.0f")
	row("node ERR replies", p.NodeErrors, "%8.0f")
	row("  duplicate writes", p.NodeDupWrites, "%8.0f")
	row("  no-op versions", p.NodeNoops, "%8.0f")
	fmt.Fprintf(w, "    %.0f s, compaction %.1f MiB/s over all nodes, background writes %.2f MiB/s per filling node\n", p.Seconds, p.CompactionMiBps, p.FillMiBps)
	fmt.Fprintf(w, "    request spread %.1f%%, latency spread %.2f×, Pebble read latency spread %.2f×\n",
		(p.RequestSpread-1)*100, p.LatencySpread, p.PebbleLatSpread)
}

// writeResultsJSON writes an experiment's results, with the command that
// produced them, to path (nothing when path is empty).
func writeResultsJSON(out io.Writer, path, experiment string, results any) error {
	if path == "" {
		return nil
	}
	v := struct {
		Experiment string `json:"experiment"`
		Command    string `json:"command"`
		Results    any    `json:"results"`
	}{experiment, strings.Join(os.Args, " "), results}
	if err := writeJSONFile(path, v); err != nil {
		return err
	}
	fmt.Fprintln(out, "wrote", path)
	return nil
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
