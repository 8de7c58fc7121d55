package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/bench/system"
	"github.com/netdir/netdir/nodeauth"
)

// benchSystem is what netdir bench measures: the in-process system
// (system.Start) or a running deployment (--service, system.Dial).
type benchSystem interface {
	Preload(ctx context.Context, src *bench.Source, workers int, progress func(done, total int64)) error
	Run(ctx context.Context, policy string, o system.RunOptions) (bench.Run, error)
	N() int
	Close() error
}

// remoteFlags point netdir bench at a running deployment.
type remoteFlags struct {
	service    string
	controller string
	keyFile    string
}

func (r *remoteFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&r.service, "service", "", "measure a running deployment instead of the in-process system: its data plane's "+
		"service address (host:port); needs --controller, runs the policies "+strings.Join(system.RemotePolicies, " and ")+
		", and --capacity then only labels the report with the nodes' --max-ops")
	fl.StringVar(&r.keyFile, "cluster-key-file", "", "with --service: the deployment's cluster key file, for the nodes' stats (default $"+nodeauth.EnvKeyFile+")")
	fl.StringVar(&r.controller, "controller", "", "with --service: the deployment's controller API (host:port), or every controller, comma-separated (the raft leader is followed)")
}

// inProcessOnly are the flags that shape the in-process system, which
// --service does not start.
var inProcessOnly = []string{"nodes", "replicas", "device", "data-dir", "p4info", "experiment"}

// check validates the flags for a run against a deployment and gives
// --policies its default there; nothing to do without --service.
func (r *remoteFlags) check(cmd *cobra.Command, f *benchFlags) error {
	if r.service == "" {
		if r.controller != "" {
			return errors.New("--controller: only with --service")
		}
		return nil
	}
	if r.controller == "" {
		return errors.New("--service: needs --controller (the deployment's controller API)")
	}
	for _, name := range inProcessOnly {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("--%s: not with --service (the deployment is what it is)", name)
		}
	}
	if !cmd.Flags().Changed("policies") {
		f.policies = strings.Join(system.RemotePolicies, ",")
	}
	for _, p := range parseList(f.policies) {
		if !slices.Contains(system.RemotePolicies, p) {
			return fmt.Errorf("--policies %q: with --service, want %s (the data plane runs its own program)",
				p, strings.Join(system.RemotePolicies, ","))
		}
	}
	return nil
}

// nodeCounts is the node counts to measure: the flag's sweep in process,
// one pass (the deployment's nodes) with --service.
func (r *remoteFlags) nodeCounts(f *benchFlags) ([]int, error) {
	if r.service != "" {
		return []int{0}, nil
	}
	return parseInts("nodes", f.nodes)
}

// start starts the in-process system of n nodes, or dials the deployment.
func (r *remoteFlags) start(ctx context.Context, cmd *cobra.Command, f *benchFlags, n int) (benchSystem, error) {
	if r.service == "" {
		cfg, err := f.systemConfig(cmd, n, nodeDir(f.dataDir, n), nil)
		if err != nil {
			return nil, err
		}
		sys, err := system.Start(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return sys, nil
	}
	capacity := 0.0
	if cmd.Flags().Changed("capacity") {
		capacity = f.capacity
	}
	var auth *nodeauth.Auth
	if path, err := nodeauth.KeyFilePath(r.keyFile); err == nil {
		if auth, err = nodeauth.Load(path); err != nil {
			return nil, err
		}
	}
	out := cmd.OutOrStdout()
	sys, err := system.Dial(ctx, system.RemoteConfig{
		Service: r.service, Controller: r.controller, Capacity: capacity, Auth: auth,
		Progress: func(s string) { fmt.Fprintln(out, "==>", s) },
	})
	if err != nil {
		return nil, err
	}
	return sys, nil
}
