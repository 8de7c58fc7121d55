package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/bench/system"
)

// runQoSExperiment is `netdir bench --experiment qos`: the first --nodes,
// --capacity if given (each node's ops/s), --concurrency if given (clients
// per tenant), --warmup, --duration, --data-dir and --json.
func runQoSExperiment(cmd *cobra.Command, f benchFlags) error {
	out := cmd.OutOrStdout()
	nodes, err := parseInts("nodes", f.nodes)
	if err != nil {
		return err
	}
	e := system.QoSExperiment{Dir: f.dataDir, Nodes: nodes[0], Warmup: f.warmup, Duration: f.duration,
		Live: func(s string) { fmt.Fprintln(out, "==> qos,", s) }}
	if e.Dir == "" {
		if e.Dir, err = os.MkdirTemp("", "netdir-qos-"); err != nil {
			return err
		}
		defer os.RemoveAll(e.Dir)
	}
	if cmd.Flags().Changed("capacity") {
		e.NodeOps = f.capacity
	}
	if cmd.Flags().Changed("concurrency") {
		e.Workers = f.concurrency
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := system.RunQoS(ctx, e)
	for _, r := range res {
		writeQoSMode(out, r)
	}
	if err != nil {
		return err
	}
	if err := writeResultsJSON(out, f.jsonPath, system.ExpQoS, res); err != nil {
		return err
	}
	return context.Cause(ctx)
}

func writeQoSMode(out io.Writer, r system.QoSModeResult) {
	fmt.Fprintf(out, "\n%s, %.0f s: spare shared by weight within %.1f%% (goal 5%%)\n", r.Mode, r.Seconds, r.WeightError*100)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "tenant\tnodes\tR\tW\tL\tops/s\tof R (≥0.95)\tof L (≤1.02)\tthrottled\tmean delay µs\terrors\t")
	for _, t := range r.Tenants {
		ratio := func(x float64) string {
			if x == 0 {
				return "-"
			}
			return fmt.Sprintf("%.3f", x)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%g\t%s\t%.0f\t%s\t%s\t%d\t%.0f\t%d\t\n", t.Tenant, t.Nodes, rate(t.Policy.Reservation),
			t.Policy.Weight, rate(t.Policy.Limit), t.Throughput, ratio(t.ReservationMet), ratio(t.LimitRatio), t.Throttled,
			t.MeanDelayUs, t.Errors)
	}
	w.Flush()
}
