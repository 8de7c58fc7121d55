package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/bench/system"
	"github.com/netdir/netdir/cluster"
)

// runChaosExperiment is `netdir bench --experiment chaos`: --histories
// Porcupine-checked histories under node kills and datagram faults (seeded
// by --seed), a node kill under load and a switch restart, on 4 nodes with
// a switch programmed over P4Runtime; --data-dir and --json as usual (a
// non-linearizable history's Porcupine visualization goes beside the
// JSON).
func runChaosExperiment(cmd *cobra.Command, f benchFlags, histories int) error {
	out := cmd.OutOrStdout()
	if f.p4info == "none" {
		return fmt.Errorf("--experiment %s restarts the switch, which needs the P4Runtime path (not --p4info none)", system.ExpChaos)
	}
	var err error
	e := system.ChaosExperiment{Dir: f.dataDir, P4Info: f.p4info, Histories: histories, Seed: uint64(f.seed),
		ControlLog: componentLog(cmd.ErrOrStderr(), f.verbose),
		Log:        func(format string, args ...any) { fmt.Fprintf(out, "==> chaos, "+format+"\n", args...) }}
	if f.jsonPath != "" { // a failed history's Porcupine visualization beside the results
		e.Visualize = filepath.Dir(f.jsonPath)
	}
	if e.Dir == "" {
		if e.Dir, err = os.MkdirTemp("", "netdir-chaos-"); err != nil {
			return err
		}
		defer os.RemoveAll(e.Dir)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := system.RunChaos(ctx, e)
	for _, f := range res.Failures {
		fmt.Fprintln(out, "FAILED:", f)
	}
	fmt.Fprintf(out, "\nchaos, seed %d, %v:\n", e.Seed, time.Since(start).Round(time.Second))
	fmt.Fprintf(out, "  histories %d (%d ops, %d undecided): %d linearizability violations (goal 0)\n", res.Histories, res.Ops, res.Undecided, res.Violations)
	fmt.Fprintf(out, "  acknowledged writes lost: %d of %d keys (goal 0); kills %v of %v; %d pins\n", res.Lost, res.Acked, res.Kills, cluster.ChaosRoles, res.Pins)
	fmt.Fprintf(out, "  throughput 2-3 s after a node's kill: %.0f of %.0f ops/s, %.2f× (goal ≥ 0.6)\n", res.ThroughputAfter, res.ThroughputBefore, res.KillRatio)
	fmt.Fprintf(out, "  writes to a promoted key after a switch restart: resume in %v (goal ≤ 1 s)\n", res.SwitchWriteResume.Round(time.Millisecond))
	fmt.Fprintf(out, "  controller failover (raft leader killed): %v, %d client errors in %d operations (goal ≤ 2 s, 0 errors)\n",
		res.Failover.Round(time.Millisecond), res.FailoverErrors, res.FailoverOps)
	if err != nil {
		return err
	}
	if err := writeResultsJSON(out, f.jsonPath, system.ExpChaos, res); err != nil {
		return err
	}
	if res.Violations > 0 || res.Lost > 0 {
		return fmt.Errorf("chaos: %d violations, %d acknowledged writes lost", res.Violations, res.Lost)
	}
	return ctx.Err()
}
