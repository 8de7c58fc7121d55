package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/bench/system"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/storagenode/device"
)

// benchFlags are the flags that demo and bench share.
type benchFlags struct {
	nodes       string
	capacity    float64
	device      string
	replicas    int
	keys        int64
	valueSize   int
	pareto      float64
	concurrency int
	rate        float64
	duration    time.Duration
	warmup      time.Duration
	policies    string
	seed        int64
	jsonPath    string
	htmlPath    string
	p4info      string
	dataDir     string
	live        string
	verbose     bool
	cpuProfile  string
	freePreload bool
}

func (f *benchFlags) register(cmd *cobra.Command, demo bool) {
	fl := cmd.Flags()
	if demo {
		fl.StringVar(&f.nodes, "nodes", "8", "storage nodes")
	} else {
		fl.StringVar(&f.nodes, "nodes", "8", "storage nodes; a comma list sweeps (a fresh cluster each)")
	}
	// Demo and bench run on the emulated ssd: a node's processor serves
	// what hits the block cache (the hot keys), its device what misses
	// (device.Profile; README, BENCHMARKS.md).
	fl.StringVar(&f.device, "device", "ssd", "each node's emulated storage device and processor, whose time is its capacity: "+
		"ssd, hdd or none (I/O and requests cost nothing)")
	fl.Float64Var(&f.capacity, "capacity", 0,
		"also cap each node's client requests/s with a token bucket, the capacity model before --device (0: none)")
	fl.BoolVar(&f.freePreload, "free-preload", true, "preload with the devices' time off (setup, not measured; the runs pay the device); "+
		"false preloads through the device (about 150 keys/s on 8 ssd nodes)")
	fl.IntVar(&f.replicas, "replicas", 3, "chain length R")
	fl.IntVar(&f.valueSize, "value-size", defaultValueSize, "value size in bytes (the Pareto scale x_m with --pareto)")
	fl.Float64Var(&f.pareto, "pareto", 0, "Pareto(α) value sizes with this α (0: fixed --value-size)")
	fl.IntVar(&f.concurrency, "concurrency", 0, fmt.Sprintf("closed loop: operations in flight; open loop: the most in flight "+
		"(0: %d per storage node; %d for --experiment)", inFlightPerNode, experimentInFlight))
	fl.Float64Var(&f.rate, "rate", 0, "open loop: Poisson arrivals at this many ops/s (0: closed loop)")
	fl.Int64Var(&f.seed, "seed", 1, "workload seed (the same for every policy)")
	fl.StringVar(&f.jsonPath, "json", "", "write the results JSON here")
	fl.StringVar(&f.htmlPath, "html", "", "write the HTML report here")
	fl.StringVar(&f.p4info, "p4info", "", "P4Info file for the controller's P4Runtime path (default: the one built into netdir, "+
		"p4/build/netdir.p4info.txtpb); \"none\" programs the switch through its Go API instead")
	fl.StringVar(&f.dataDir, "data-dir", "", "keep the nodes' Pebble data here (default: a temporary directory in /dev/shm if present, removed at the end)")
	fl.StringVar(&f.live, "live", "auto", "live view: on (redrawn in place), lines (a line a second), off; auto: on for a terminal")
	fl.BoolVar(&f.verbose, "verbose", false, "log the components (controller promotions, nodes) to stderr")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole process here")
}

// inFlightPerNode is the closed loop's default depth per storage node. The
// ideal throughput assumes every node's processor saturated, and on the
// device an operation takes tens of milliseconds (a block read 16 ms, a
// write three WAL syncs): a fixed 128 left netdir's nodes at 0.6-0.9 of
// their processors at N=8 and 16, so that the loop, not the nodes or their
// balance, bound the run. Deeper than 24, at N=16 (512 and 768 in flight)
// the hottest key's chain head fell into a Pebble write stall that outlived
// the run by minutes (BENCHMARKS.md, "netdir demo on the device").
const inFlightPerNode = 24

// experimentInFlight is the experiments' default depth, the one their
// BENCHMARKS.md sections were measured at.
const experimentInFlight = 64

// inFlight is the operations in flight for a run on nodes storage nodes:
// --concurrency if given, else inFlightPerNode per node.
func (f *benchFlags) inFlight(nodes int) int {
	if f.concurrency > 0 {
		return f.concurrency
	}
	return inFlightPerNode * max(1, nodes)
}

// experimentWorkers is the operations in flight of an experiment's runs.
func (f *benchFlags) experimentWorkers() int {
	if f.concurrency > 0 {
		return f.concurrency
	}
	return experimentInFlight
}

// startProfile starts a CPU profile if asked; the returned func stops it.
func (f *benchFlags) startProfile() (func(), error) {
	if f.cpuProfile == "" {
		return func() {}, nil
	}
	out, err := os.Create(f.cpuProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}, nil
}

// parseList splits a comma list.
func parseList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func parseInts(name, s string) ([]int, error) {
	var out []int
	for _, x := range parseList(s) {
		n, err := strconv.Atoi(x)
		if err != nil || n < 1 || n > 32 {
			return nil, fmt.Errorf("--%s %q: want integers 1..32", name, x)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s: empty", name)
	}
	return out, nil
}

func parsePolicies(s string) ([]string, error) {
	ps := parseList(s)
	if len(ps) == 0 {
		return nil, errors.New("--policies: empty")
	}
	for _, p := range ps {
		ok := false
		for _, q := range bench.Policies {
			ok = ok || p == q
		}
		if !ok {
			return nil, fmt.Errorf("--policies: unknown %q (want %s)", p, strings.Join(bench.Policies, ","))
		}
	}
	return ps, nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// liveFunc returns the live-view callback for mode (auto, on, lines, off).
func liveFunc(w io.Writer, mode string) (func(bench.LiveStats), error) {
	switch mode {
	case "auto":
		mode = "lines"
		if f, ok := w.(*os.File); ok && isTerminal(f) {
			mode = "on"
		}
	case "on", "lines", "off":
	default:
		return nil, fmt.Errorf("--live %q: want auto, on, lines or off", mode)
	}
	var clock liveClock
	switch mode {
	case "on":
		lines, last := 0, ""
		return func(s bench.LiveStats) {
			s.Elapsed = clock.next(s.Policy, s.Elapsed)
			frame := bench.LiveView(s, 40)
			// Redraw over the previous frame of the same policy (its warm-up
			// included); a new policy's first frame goes below, so that
			// the lines printed between runs stay.
			pol := strings.TrimSuffix(s.Policy, system.WarmupSuffix)
			if lines > 0 && pol == last {
				fmt.Fprintf(w, "\x1b[%dA\x1b[J", lines)
			}
			fmt.Fprint(w, frame)
			lines, last = strings.Count(frame, "\n"), pol
		}, nil
	case "lines":
		return func(s bench.LiveStats) {
			s.Elapsed = clock.next(s.Policy, s.Elapsed)
			fmt.Fprintf(w, "  %-18s t=%-4s %8.0f ops/s  p99 %-8s dir %-4d load max/mean %.2f\n",
				s.Policy, s.Elapsed, s.Throughput, fmtDuration(s.P99), s.DirSize,
				bench.MaxOverMean(s.NodeLoads))
		}, nil
	}
	return nil, nil
}

// liveClock numbers a phase's live frames in whole seconds. Frames come
// about once a second, with jitter, so the elapsed time truncated (or
// rounded) to seconds can repeat a second; the clock shows each frame's
// rounded time, but always at least a second past the previous frame's.
// A new label, or a time that goes back, starts a new phase.
type liveClock struct {
	label string
	last  time.Duration // raw elapsed time of the previous frame
	sec   int
}

func (c *liveClock) next(label string, elapsed time.Duration) time.Duration {
	if label != c.label || elapsed < c.last {
		c.label, c.sec = label, 0
	}
	c.last = elapsed
	c.sec = max(c.sec+1, int(elapsed.Round(time.Second)/time.Second))
	return time.Duration(c.sec) * time.Second
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0fµs", float64(d)/1e3)
}

// systemConfig is the in-process system of n nodes that the flags ask for,
// with its data under dir ("" for a temporary directory).
func (f *benchFlags) systemConfig(cmd *cobra.Command, n int, dir string, nodeOptions func(*storagenode.Options)) (system.Config, error) {
	dev, err := device.Parse(f.device)
	if err != nil {
		return system.Config{}, fmt.Errorf("--device: %w", err)
	}
	out := cmd.OutOrStdout()
	return system.Config{
		Nodes: n, Replicas: min(f.replicas, n), Device: dev, Capacity: f.capacity, Dir: dir,
		P4Info: f.p4info, Log: componentLog(cmd.ErrOrStderr(), f.verbose),
		Progress:    func(s string) { fmt.Fprintln(out, "==>", s) },
		NodeOptions: nodeOptions, FreePreload: f.freePreload,
	}, nil
}

func componentLog(w io.Writer, verbose bool) *slog.Logger {
	if !verbose {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// writeOutputs writes the JSON and HTML files that are asked for.
func writeOutputs(res bench.Results, jsonPath, htmlPath, title string) error {
	write := func(path string, f func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		if dir := filepath.Dir(path); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		out, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := f(out); err != nil {
			out.Close()
			return fmt.Errorf("%s: %w", path, err)
		}
		return out.Close()
	}
	if err := write(jsonPath, func(w io.Writer) error { return bench.WriteJSON(w, res) }); err != nil {
		return err
	}
	return write(htmlPath, func(w io.Writer) error { return bench.WriteHTML(w, res, title) })
}

func benchCmd() *cobra.Command {
	var (
		f          benchFlags
		workloads  string
		zipfs      string
		writeRatio string
		keys       int64
		exp        experimentFlags
		remote     remoteFlags
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure policies side by side on the in-process system (YCSB, skew, node and write-ratio sweeps)",
		Long: `Run the whole system in this process (storage nodes on an emulated storage
device, --device, whose time is their capacity; the software switch programmed
by the controller; clients) and measure the routing policies side by side on
the same cluster and the same seeds:

  static    the chain head only (the directory off)
  replicas  uniform over the chain
  c3        C3 replica ranking on the client, over the chain
  pegasus   the directory, least-loaded copy (verified at a non-fresh extra)
  netdir    the directory, weighted split and fine score

For every node count (a fresh cluster each, preloaded with --keys keys), every
workload (YCSB letters, or read/update mixes of --write-ratio) and every key
distribution (--zipf θ values, or "uniform"), each policy runs --warmup
unmeasured and then --duration measured. Each run gives one row: throughput,
p50/p99/p999, per-node load max/mean and CoV, node latency CoV, directory hit
rate, the Hill tail index (beside α−1 with --pareto), CPU and RSS.

With --service ADDR --controller ADDR it measures a running deployment (the
BMv2 testbed: bmv2-testbed/run.sh --bench) instead: the keys are preloaded and
the clients send through the data plane's service address, node loads come
from the nodes' stats op, and the controller's API sets up each policy:
static pauses its loops, evicts every key and puts every partition's weights
on the chain head; netdir resumes the loops from even weights. The switch's
counters are not read there (no directory hit rate).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := remote.check(cmd, &f); err != nil {
				return err
			}
			if exp.name != "" {
				return runExperiment(cmd, f, exp, workloads, zipfs, keys)
			}
			out := cmd.OutOrStdout()
			nodeCounts, err := remote.nodeCounts(&f)
			if err != nil {
				return err
			}
			pols, err := parsePolicies(f.policies)
			if err != nil {
				return err
			}
			var mixes []struct {
				name string
				mix  bench.Mix
			}
			if writeRatio != "" {
				for _, x := range parseList(writeRatio) {
					wr, err := strconv.ParseFloat(x, 64)
					if err != nil || wr < 0 || wr > 1 {
						return fmt.Errorf("--write-ratio %q: want fractions in [0, 1]", x)
					}
					mixes = append(mixes, struct {
						name string
						mix  bench.Mix
					}{fmt.Sprintf("rw%g", wr*100), bench.WriteMix(wr)})
				}
			} else {
				for _, x := range parseList(workloads) {
					m, err := bench.YCSB(x)
					if err != nil {
						return fmt.Errorf("--workload: %w", err)
					}
					mixes = append(mixes, struct {
						name string
						mix  bench.Mix
					}{strings.ToUpper(x), m})
				}
			}
			if len(mixes) == 0 {
				return errors.New("--workload: empty")
			}
			type dist struct {
				name  string
				theta float64
			}
			var dists []dist
			for _, x := range parseList(zipfs) {
				if x == "uniform" {
					dists = append(dists, dist{bench.DistUniform, 0})
					continue
				}
				th, err := strconv.ParseFloat(x, 64)
				if err != nil || th <= 0 || th > 3 {
					return fmt.Errorf("--zipf %q: want θ in (0, 3] or \"uniform\"", x)
				}
				dists = append(dists, dist{bench.DistZipf, th})
			}
			if len(dists) == 0 {
				return errors.New("--zipf: empty")
			}
			live, err := liveFunc(out, f.live)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopProfile, err := f.startProfile()
			if err != nil {
				return err
			}
			defer stopProfile()
			var res bench.Results
			for _, n := range nodeCounts {
				sys, err := remote.start(ctx, cmd, &f, n)
				if err != nil {
					return err
				}
				base := bench.Workload{Name: "load", Mix: bench.WriteMix(1), Keys: keys, ValueSize: f.valueSize, ParetoAlpha: f.pareto, Seed: f.seed}
				src, err := base.Build()
				if err != nil {
					sys.Close()
					return err
				}
				fmt.Fprintf(out, "==> preloading %d keys\n", keys)
				if err := sys.Preload(ctx, src, preloadWorkers, func(done, total int64) {
					fmt.Fprintf(out, "    preload %d/%d\n", done, total)
				}); err != nil {
					sys.Close()
					return err
				}
				for _, m := range mixes {
					for _, d := range dists {
						w := bench.Workload{Name: m.name, Mix: m.mix, Dist: d.name, Zipf: d.theta, Keys: keys,
							ValueSize: f.valueSize, ParetoAlpha: f.pareto, Seed: f.seed}
						for _, pol := range pols {
							workers := f.inFlight(sys.N())
							fmt.Fprintf(out, "==> %s: workload %s, %s, %d nodes, %s\n", pol, m.name, distName(d.name, d.theta), sys.N(), loopName(f, workers))
							run, err := sys.Run(ctx, pol, system.RunOptions{
								Workload: w, Workers: workers, Rate: f.rate,
								Warmup: f.warmup, Duration: f.duration, Live: live,
							})
							if err != nil && run.Policy == "" {
								sys.Close()
								return err
							}
							if err != nil {
								// Measured, then the clean-up failed: keep the
								// run, say why the sweep stops, write what ran.
								run.Note = bench.JoinNote(run.Note, "clean-up after the run failed: "+err.Error())
								bench.WriteSummary(out, []bench.Run{run})
								fmt.Fprintln(out, "    note:", run.Note)
								sys.Close()
								res.Runs = append(res.Runs, run)
								return errors.Join(err, writeOutputs(res, f.jsonPath, f.htmlPath, "netdir bench"))
							}
							res.Runs = append(res.Runs, run)
							if err := bench.WriteSummary(out, []bench.Run{run}); err != nil {
								sys.Close()
								return err
							}
							if run.Note != "" {
								fmt.Fprintln(out, "    note:", run.Note)
							}
						}
					}
				}
				if err := sys.Close(); err != nil {
					return err
				}
			}
			fmt.Fprintln(out, "\nsummary")
			if err := bench.WriteSummary(out, res.Runs); err != nil {
				return err
			}
			if err := writeOutputs(res, f.jsonPath, f.htmlPath, "netdir bench"); err != nil {
				return err
			}
			for _, p := range []string{f.jsonPath, f.htmlPath} {
				if p != "" {
					fmt.Fprintln(out, "wrote", p)
				}
			}
			return nil
		},
	}
	f.register(cmd, false)
	fl := cmd.Flags()
	fl.StringVar(&workloads, "workload", "B", "YCSB core workloads, a comma list of A–F")
	fl.StringVar(&writeRatio, "write-ratio", "", "instead of --workload: read/update mixes with these write fractions (e.g. 0,0.05,0.5)")
	fl.StringVar(&zipfs, "zipf", "0.99", "key distributions: zipf θ values (0.9–1.2 are typical) and/or \"uniform\"")
	fl.Int64Var(&keys, "keys", 10_000, "keys preloaded and drawn from (a device preloads a few hundred keys/s per node: each write syncs three WALs)")
	fl.StringVar(&f.policies, "policies", strings.Join(bench.Policies, ","), "policies to run, in order")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "measured time per run")
	fl.DurationVar(&f.warmup, "warmup", 5*time.Second, "unmeasured time before each run (the controller promotes hot keys)")
	exp.register(cmd)
	remote.register(cmd)
	return cmd
}

func nodeDir(root string, n int) string {
	if root == "" {
		return ""
	}
	return filepath.Join(root, fmt.Sprintf("nodes-%d-%d", n, time.Now().UnixNano()))
}

func distName(d string, theta float64) string {
	if d == bench.DistUniform {
		return "uniform keys"
	}
	return fmt.Sprintf("zipf %.2f", theta)
}

func loopName(f benchFlags, workers int) string {
	if f.rate > 0 {
		return fmt.Sprintf("open loop %.0f ops/s (≤%d in flight)", f.rate, workers)
	}
	return fmt.Sprintf("closed loop, %d in flight", workers)
}

// defaultValueSize: values of 1000 random bytes, four to a 4 KiB block, so
// that ten thousand keys are several times a node's memory on a device
// (block cache and memtables, about 1 MiB) and GETs beyond the hottest keys
// read the device.
const defaultValueSize = 1000

// preloadWorkers is how many preload writes are in flight. On a device
// more writers let Pebble commit in groups, but 256 queued for over the
// 10 s write timeout behind the preload's own flushes and compactions.
const preloadWorkers = 64
