package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/sim"
)

func simCmd() *cobra.Command {
	var (
		cfg                         sim.Config
		nodes, workloads, zipfs     string
		policies, jsonPath, htmlPth string
		dirSizes, needsPath, from   string
		keys                        int64
		seed                        uint64
		jobs                        int
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate netdir at up to thousands of nodes, deterministically, on the same policy code",
		Long: `Run a deterministic discrete-event simulation of netdir (package sim): the
data plane's routing, stamps, replies and VSBs, and the controller's hot-key
rounds and HATS epochs are the real directory and sched code; storage nodes
are queues with a service time of 1/--capacity (deterministic, as netdir
bench's token bucket, or exponential), links a fixed latency, clients a
closed loop (--concurrency in flight) or an open loop (--rate).

Over --rack-size nodes the directory is layered: one rack directory per
rack (LocationLists of at most 32 nodes) and a spine that spreads the
hottest keys over racks (two choices by in-flight requests, DistCache).
--flat keeps one directory over every node instead.

The same --seed gives byte-identical --json output. Flags as netdir bench:
comma lists of --nodes, --workload, --zipf and --policies sweep.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			var ns []int
			for _, x := range parseList(nodes) {
				n, err := strconv.Atoi(x)
				if err != nil || n < 1 || n > 4095 {
					return fmt.Errorf("--nodes %q: want integers 1..4095", x)
				}
				ns = append(ns, n)
			}
			if len(ns) == 0 {
				return errors.New("--nodes: empty")
			}
			sizes := []int{0}
			if dirSizes != "" {
				sizes = nil
				for _, x := range parseList(dirSizes) {
					d, err := strconv.Atoi(x)
					if err != nil || d < 1 {
						return fmt.Errorf("--dir-size %q: want positive integers", x)
					}
					sizes = append(sizes, d)
				}
			}
			var res bench.Results
			if from != "" {
				ns = nil // no simulation: the runs come from the files
				for _, path := range parseList(from) {
					f, err := os.Open(path)
					if err != nil {
						return err
					}
					r, err := bench.ReadJSON(f)
					f.Close()
					if err != nil {
						return fmt.Errorf("%s: %w", path, err)
					}
					res.Runs = append(res.Runs, r.Runs...)
				}
			}
			var runs []simJob
			for _, n := range ns {
				for _, size := range sizes {
					for _, wl := range parseList(workloads) {
						for _, z := range parseList(zipfs) {
							w := bench.Workload{Name: strings.ToUpper(wl), Keys: keys, Seed: int64(seed)}
							if z == "uniform" {
								w.Dist = bench.DistUniform
							} else {
								th, err := strconv.ParseFloat(z, 64)
								if err != nil || th <= 0 || th > 3 {
									return fmt.Errorf("--zipf %q: want θ in (0, 3] or \"uniform\"", z)
								}
								w.Zipf = th
							}
							for _, pol := range parseList(policies) {
								c := cfg
								c.Nodes, c.Workload, c.Policy, c.Seed, c.DirSize = n, w, pol, seed, size
								if c.SpineSize == 0 {
									c.SpineSize = size // 0: the default
								}
								label := fmt.Sprintf("%s: workload %s, %s, %d nodes", pol, w.Name, z, n)
								if size > 0 {
									label += fmt.Sprintf(", directories of %d keys", size)
								}
								runs = append(runs, simJob{cfg: c, label: label})
							}
						}
					}
				}
			}
			if jobs < 1 {
				return fmt.Errorf("--jobs %d: want at least 1", jobs)
			}
			done, err := runSims(out, runs, jobs)
			if err != nil {
				return err
			}
			res.Runs = append(res.Runs, done...)
			fmt.Fprintln(out, "\nsummary")
			if err := bench.WriteSummary(out, res.Runs); err != nil {
				return err
			}
			if err := writeOutputs(res, jsonPath, htmlPth, "netdir sim"); err != nil {
				return err
			}
			if needsPath != "" {
				needs := sim.DirectoryNeeds(res.Runs, sim.BalanceGoal)
				fmt.Fprintln(out, "\ndirectory keys needed for throughput ≥ ideal/1.05:")
				if err := sim.WriteNeeds(out, needs); err != nil {
					return err
				}
				f, err := os.Create(needsPath)
				if err != nil {
					return err
				}
				r := cfg.Replicas
				if r == 0 {
					r = 3
				}
				if err := sim.PlotNeeds(f, needsPath, fmt.Sprintf("R=%d", r), needs); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
			}
			for _, p := range []string{jsonPath, htmlPth, needsPath} {
				if p != "" {
					fmt.Fprintln(out, "wrote", p)
				}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&nodes, "nodes", "8", "storage nodes; a comma list sweeps")
	fl.IntVar(&cfg.Replicas, "replicas", 0, "chain length R (default min(3, nodes))")
	fl.IntVar(&cfg.RackSize, "rack-size", sim.DefaultRackSize, "nodes per rack directory (at most 32)")
	fl.BoolVar(&cfg.Flat, "flat", false, "one directory over every node, no spine")
	fl.StringVar(&workloads, "workload", "B", "YCSB core workloads, a comma list (A, B, C; D–F as netdir bench maps them)")
	fl.StringVar(&zipfs, "zipf", "0.99", "key distributions: zipf θ values and/or \"uniform\"")
	fl.Int64Var(&keys, "keys", 20_000, "keys drawn from")
	fl.StringVar(&policies, "policies", "netdir", "data plane policies: netdir, pegasus, coarse, replicas, static")
	fl.Float64Var(&cfg.Capacity, "capacity", sim.DefaultCapacity, "each node's requests/s")
	fl.StringVar(&cfg.Service, "service", sim.ServiceDeterministic, "service time: det (1/capacity, as the token bucket) or exp")
	fl.DurationVar(&cfg.Link, "link", sim.DefaultLink, "one-way link latency")
	fl.IntVar(&cfg.Concurrency, "concurrency", sim.DefaultConcurrency, "closed loop: operations in flight; open loop: the most in flight")
	fl.Float64Var(&cfg.Rate, "rate", 0, "open loop: Poisson arrivals at this many ops/s (0: closed loop)")
	fl.StringVar(&dirSizes, "dir-size", "", "each rack directory's capacity in keys (default 4·n·log2 n of a rack's n nodes); a comma list sweeps")
	fl.IntVar(&cfg.SpineSize, "spine-size", 0, "the spine's capacity in keys (default: --dir-size if given, else 4·r·log2 r of r racks)")
	fl.StringVar(&needsPath, "needs", "", "with a --dir-size sweep: print each node count's smallest directory (keys in use) that reached ideal/1.05, "+
		"and plot it against n·log2 n here (.svg or .png)")
	fl.StringVar(&from, "from", "", "simulate nothing: read the runs from these JSON files (a comma list), for --needs, --json and --html")
	fl.UintVar(&cfg.PartitionBits, "partition-bits", 0, "log2 partitions (default 10, or 16 partitions per node)")
	fl.DurationVar(&cfg.ClientTimeout, "client-timeout", sim.DefaultClientTimeout,
		"a client resends a request unanswered this long (doubling, up to 4×) and gives up after 5×, as netdir bench's")
	fl.DurationVar(&cfg.Round, "round", sim.DefaultRound, "the controller's hot-key round (virtual time)")
	fl.DurationVar(&cfg.Epoch, "epoch", sim.DefaultEpoch, "the HATS coarse epoch (virtual time)")
	cfg.Settle.Damping = sched.DefaultSettle.Damping
	fl.Float64Var(&cfg.Settle.Tolerance, "settle-band", sched.DefaultSettle.Tolerance,
		"the coarse loop moves load off a node only past this fraction above the receiver's utilisation (the controller's)")
	fl.Float64Var(&cfg.Settle.Sigmas, "settle-sigmas", sched.DefaultSettle.Sigmas,
		"and past this many standard deviations of the two utilisations' measured difference (the controller's)")
	fl.Float64Var(&cfg.Settle.MinChange, "settle-min-change", sched.DefaultSettle.MinChange,
		"the smallest change of a member's share of a partition that rewrites its weights (the controller's)")
	fl.Float64Var(&cfg.RackCopyHeadroom, "rack-copy-headroom", sched.RackCopyHeadroom,
		"a spread key's copies in each remote rack are as many as its load there needs within this headroom over a node's share")
	fl.BoolVar(&cfg.WholeRacks, "whole-racks", false, "copy a spread key to every node of each remote rack instead")
	fl.DurationVar(&cfg.Warmup, "warmup", sim.DefaultWarmup, "virtual time before measuring")
	fl.Int64Var(&cfg.Requests, "requests", sim.DefaultRequests, "operations measured after the warm-up")
	fl.Uint64Var(&seed, "seed", 1, "seed of the simulation and the workload")
	fl.StringVar(&jsonPath, "json", "", "write the results JSON here")
	fl.StringVar(&htmlPth, "html", "", "write the HTML report here")
	fl.IntVar(&jobs, "jobs", runtime.GOMAXPROCS(0), "runs of a sweep simulated at once, one per core (each is one thread); the output is the same")
	return cmd
}

// simJob is one run of a sweep.
type simJob struct {
	cfg   sim.Config
	label string
}

// runSims runs the sweep's runs, up to jobs at once, and returns their
// results in the sweep's order: a run is deterministic and shares nothing
// with the others, so the JSON is the same for any jobs. Each run's
// progress and summary are printed as it goes, labelled, a block at a
// time. After a run fails no other starts, and its error is returned.
func runSims(w io.Writer, runs []simJob, jobs int) ([]bench.Run, error) {
	out := &lockedWriter{w: w}
	results := make([]bench.Run, len(runs))
	errs := make([]error, len(runs))
	next := make(chan int)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(jobs, len(runs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], errs[i] = runSim(out, runs[i])
				if errs[i] != nil {
					failed.Store(true)
				}
			}
		}()
	}
	for i := range runs {
		if failed.Load() {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return results, errors.Join(errs...)
}

// runSim runs one simulation, printing its progress and summary to out.
func runSim(out *lockedWriter, j simJob) (bench.Run, error) {
	out.printf("==> %s\n", j.label)
	j.cfg.Progress = func(done, total int64) {
		out.printf("    %s: %d/%d requests\n", j.label, done, total)
	}
	start := time.Now()
	run, err := sim.Run(j.cfg)
	if err != nil {
		return bench.Run{}, fmt.Errorf("%s: %w", j.label, err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "<== %s\n", j.label)
	if err := bench.WriteSummary(&b, []bench.Run{run}); err != nil {
		return bench.Run{}, err
	}
	fmt.Fprintf(&b, "    throughput/ideal %.3f; %s in %.1fs\n",
		run.ThroughputOps/(float64(j.cfg.Nodes)*run.CapacityOps), run.Note, time.Since(start).Seconds())
	out.write(b.Bytes())
	return run, nil
}

// lockedWriter writes whole blocks from several runs, one at a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) write(p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(p)
}

func (l *lockedWriter) printf(format string, a ...any) { l.write(fmt.Appendf(nil, format, a...)) }
