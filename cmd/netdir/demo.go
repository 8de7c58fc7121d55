package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/bench/system"
)

func demoCmd() *cobra.Command {
	var (
		f        benchFlags
		outDir   string
		workload string
		zipf     float64
		keys     int64
		openLoad float64
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole system in this process: a skewed workload with the directory off, then with netdir",
		Long: `Run netdir on this machine with no root, no switch and no configuration, all in
this process over loopback: storage nodes (Pebble in a temporary directory
on an emulated storage device and processor, --device ssd by default, whose
time is their capacity: every request pays processor time, and reads that
miss the block cache, WAL writes, flushes and compactions share the device's
queue; --device none --capacity N is the older model, a token bucket of N
requests/s), the software switch, the controller driving it
over P4Runtime gRPC (or the switch's Go API until the P4Info is built), and
clients sending to the switch.

The demo preloads keys, then runs a skewed, read-mostly workload (YCSB B: 95%
reads, 5% updates, zipf keys) first with the directory off (policy static: every
request to the key's chain head), then with netdir, each closed loop: as fast
as they serve it. Then it runs both again open loop at the same offered load
(--open-load of the ideal throughput, 70% by default, or of what netdir
served closed loop where the machine falls short of the ideal), so that
their latencies compare at equal load rather than each at its own
saturation. A live view
shows per-node load, throughput, p99 and the directory size each second. It
ends with a summary table, and writes a JSON file and an HTML report with
figures: latency CDF and tail (of the open-loop phases), per-node load, and
throughput and load max/mean over time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			n, err := strconv.Atoi(f.nodes)
			if err != nil || n < 1 || n > 32 {
				return fmt.Errorf("--nodes %q: want 1..32", f.nodes)
			}
			pols, err := parsePolicies(f.policies)
			if err != nil {
				return err
			}
			mix, err := bench.YCSB(workload)
			if err != nil {
				return fmt.Errorf("--workload: %w", err)
			}
			if zipf <= 0 || zipf > 3 {
				return fmt.Errorf("--zipf %g: want θ in (0, 3]", zipf)
			}
			live, err := liveFunc(out, f.live)
			if err != nil {
				return err
			}
			if outDir == "" {
				outDir = filepath.Join(os.TempDir(), "netdir-demo-"+time.Now().Format("20060102-150405"))
			}
			if f.jsonPath == "" {
				f.jsonPath = filepath.Join(outDir, "results.json")
			}
			if f.htmlPath == "" {
				f.htmlPath = filepath.Join(outDir, "report.html")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			fmt.Fprintln(out, "netdir demo: the whole system in this process, over loopback")
			cfg, err := f.systemConfig(cmd, n, f.dataDir, nil)
			if err != nil {
				return err
			}
			sys, err := system.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer sys.Close()
			w := bench.Workload{Name: strings.ToUpper(workload), Mix: mix, Dist: bench.DistZipf, Zipf: zipf,
				Keys: keys, ValueSize: f.valueSize, ParetoAlpha: f.pareto, Seed: f.seed}
			src, err := w.Build()
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "==> preloading %d keys (%s values) at their chain heads\n", keys, sizeName(f))
			if err := sys.Preload(ctx, src, preloadWorkers, func(done, total int64) {
				fmt.Fprintf(out, "    preload %6d/%d keys\n", done, total)
			}); err != nil {
				return err
			}
			ideal := ""
			if c := sys.NodeCapacity(0); c > 0 {
				ideal = fmt.Sprintf("; at most %.0f ops/s per node from memory, ideal %.0f ops/s", c, c*float64(n))
			}
			fmt.Fprintf(out, "==> workload: YCSB %s (%.0f%% reads), zipf %.2f over %d keys, %s%s\n",
				w.Name, 100*mix.ReadFraction(), zipf, keys, loopName(f, f.inFlight(n)), ideal)
			fmt.Fprintf(out, "==> nodes: %s\n", sys.CapacityName())
			var openPols []string
			for _, pol := range pols {
				if openLoad > 0 && (pol == "static" || pol == "netdir") {
					openPols = append(openPols, pol)
				}
			}
			phases := len(pols) + len(openPols)
			var res bench.Results
			// phase runs one policy and keeps its live frames as the run's
			// time series.
			phase := func(i int, pol string, rate float64) error {
				loop := "closed loop"
				if rate > 0 {
					loop = fmt.Sprintf("open loop at %.0f ops/s", rate)
				}
				fmt.Fprintf(out, "==> phase %d/%d: %s (%s), %s: %s warm-up, then %s measured\n",
					i, phases, pol, policyBlurb(pol), loop, f.warmup, f.duration)
				var series []bench.SeriesPoint
				record := func(s bench.LiveStats) {
					if live != nil {
						live(s)
					}
					if !strings.HasSuffix(s.Policy, system.WarmupSuffix) {
						series = append(series, bench.SeriesPoint{T: s.Elapsed.Seconds(), ThroughputOps: s.Throughput,
							LoadMaxOverMean: bench.MaxOverMean(s.NodeLoads)})
					}
				}
				run, err := sys.Run(ctx, pol, system.RunOptions{
					Workload: w, Workers: f.inFlight(n), Rate: rate,
					Warmup: f.warmup, Duration: f.duration, Live: record,
				})
				if err != nil && run.Policy == "" {
					return err
				}
				if err != nil {
					// Measured, then the clean-up failed: keep the run and
					// write what ran before the demo stops.
					run.Note = bench.JoinNote(run.Note, "clean-up after the run failed: "+err.Error())
				}
				// Run has returned, so the live goroutine has stopped.
				run.Series, run.OfferedOps = series, rate
				res.Runs = append(res.Runs, run)
				if err != nil {
					bench.WriteSummary(out, res.Runs)
					return errors.Join(err, writeOutputs(res, f.jsonPath, f.htmlPath, fmt.Sprintf("netdir demo: %d nodes", n)))
				}
				return nil
			}
			for i, pol := range pols {
				if err := phase(i+1, pol, f.rate); err != nil {
					return err
				}
			}
			if len(openPols) > 0 {
				rate, basis := openRate(res.Runs, openLoad)
				fmt.Fprintf(out, "==> open loop at %.0f ops/s: %.0f%% of %s\n", rate, 100*openLoad, basis)
				for i, pol := range openPols {
					if err := phase(len(pols)+i+1, pol, rate); err != nil {
						return err
					}
				}
			}
			fmt.Fprintf(out, "\nsummary (device %s)\n", sys.Device().Name)
			if err := bench.WriteSummary(out, res.Runs); err != nil {
				return err
			}
			comparison(out, res.Runs)
			fmt.Fprintf(out, "device %s: block reads per GET", sys.Device().Name)
			for _, r := range res.Runs {
				fmt.Fprintf(out, " %s %.2f", r.Policy, r.DeviceReadsPerGet)
			}
			fmt.Fprintln(out, " (about the fraction of GETs that missed the block cache)")
			title := fmt.Sprintf("netdir demo: %d nodes on device %s", n, sys.Device().Name)
			if err := writeOutputs(res, f.jsonPath, f.htmlPath, title); err != nil {
				return err
			}
			fmt.Fprintln(out, "\nJSON:  ", f.jsonPath)
			fmt.Fprintln(out, "report:", f.htmlPath)
			return nil
		},
	}
	f.register(cmd, true)
	fl := cmd.Flags()
	fl.DurationVar(&f.duration, "duration", 20*time.Second, "measured time of each phase")
	fl.DurationVar(&f.warmup, "warmup", 5*time.Second, "unmeasured time before each phase (the controller promotes hot keys)")
	fl.StringVar(&outDir, "out", "", "directory for results.json and report.html (default: a new netdir-demo-<time> directory in $TMPDIR)")
	fl.StringVar(&workload, "workload", "B", "YCSB core workload (A–F); B is read-mostly")
	fl.Float64Var(&zipf, "zipf", 1.2, "zipf θ of the key popularity")
	fl.Int64Var(&keys, "keys", 10_000, "keys preloaded and drawn from")
	fl.StringVar(&f.policies, "policies", "static,netdir", "policies to run, in order ("+strings.Join(bench.Policies, ",")+")")
	fl.Float64Var(&openLoad, "open-load", 0.7, "then run static and netdir open loop at this fraction of the ideal throughput, or of netdir's closed-loop one if lower (0: don't)")
	return cmd
}

// openRate is the open-loop phases' offered load: frac of the ideal
// throughput (nodes × nominal capacity, bench.Run.CapacityOps, of the
// netdir run if there is one), or of the netdir run's closed-loop
// throughput where the machine did not reach the ideal (a loaded machine,
// or nodes with no nominal capacity): past what netdir serves, both
// phases would run saturated and their latencies say nothing. basis says
// which.
func openRate(runs []bench.Run, frac float64) (rate float64, basis string) {
	var ideal, served float64
	for _, r := range runs {
		if r.OfferedOps > 0 {
			continue
		}
		if c := r.CapacityOps * float64(r.Nodes); c > 0 && (ideal == 0 || r.Policy == "netdir") {
			ideal = c
		}
		if r.Policy == "netdir" || served == 0 {
			served = max(served, r.ThroughputOps)
		}
	}
	if ideal > 0 && ideal <= served {
		return frac * ideal, fmt.Sprintf("the ideal %.0f ops/s", ideal)
	}
	if ideal > 0 {
		return frac * served, fmt.Sprintf("netdir's closed-loop %.0f ops/s (short of the ideal %.0f on this machine)", served, ideal)
	}
	return frac * served, fmt.Sprintf("netdir's closed-loop %.0f ops/s (the nodes have no nominal capacity)", served)
}

func sizeName(f benchFlags) string {
	if f.pareto > 0 {
		return fmt.Sprintf("Pareto(α=%g, xm=%d B)", f.pareto, f.valueSize)
	}
	return fmt.Sprintf("%d B", f.valueSize)
}

func policyBlurb(p string) string {
	switch p {
	case "static":
		return "directory off, every request to the chain head"
	case "replicas":
		return "directory off, uniform over the chain"
	case "c3":
		return "C3 replica ranking on the client"
	case "pegasus":
		return "directory, least-loaded copy"
	case "netdir":
		return "directory, weighted split and fine score"
	}
	return p
}

// comparison prints netdir against the baseline (the first closed-loop
// run of another policy), and against the ideal: every node at netdir's
// run's nominal capacity (bench.Run.CapacityOps, at that run's block reads
// per GET). Then, if they ran open loop, their latencies at equal load.
func comparison(w io.Writer, runs []bench.Run) {
	base, nd := pair(runs, false)
	if base == nil || nd == nil {
		return
	}
	fmt.Fprintf(w, "\nnetdir vs %s: load max/mean %.2f vs %.2f; throughput %.0f vs %.0f ops/s (%.2f×)",
		base.Policy, nd.LoadMaxOverMean, base.LoadMaxOverMean, nd.ThroughputOps, base.ThroughputOps,
		ratio(nd.ThroughputOps, base.ThroughputOps))
	if ideal := nd.CapacityOps * float64(nd.Nodes); ideal > 0 {
		fmt.Fprintf(w, ", %.2f of the ideal %.0f", nd.ThroughputOps/ideal, ideal)
	}
	fmt.Fprintf(w, "; p99 %s vs %s\n", fmtDuration(time.Duration(nd.P99us*1e3)), fmtDuration(time.Duration(base.P99us*1e3)))
	if base, nd = pair(runs, true); base == nil || nd == nil {
		return
	}
	fmt.Fprintf(w, "at equal offered load (%.0f ops/s, open loop): netdir vs %s: p50 %s vs %s, p99 %s vs %s; served %.0f vs %.0f ops/s, dropped %d vs %d\n",
		nd.OfferedOps, base.Policy, fmtDuration(time.Duration(nd.P50us*1e3)), fmtDuration(time.Duration(base.P50us*1e3)),
		fmtDuration(time.Duration(nd.P99us*1e3)), fmtDuration(time.Duration(base.P99us*1e3)),
		nd.ThroughputOps, base.ThroughputOps, nd.Dropped, base.Dropped)
}

// pair finds the first run of a policy other than netdir and the last
// netdir run, among the open-loop runs or the closed-loop ones.
func pair(runs []bench.Run, open bool) (base, nd *bench.Run) {
	for i := range runs {
		r := &runs[i]
		if (r.OfferedOps > 0) != open {
			continue
		}
		switch {
		case base == nil && r.Policy != "netdir":
			base = r
		case r.Policy == "netdir":
			nd = r
		}
	}
	return base, nd
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
