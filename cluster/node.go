package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/internal/grpcsec"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/sched/dmclock"
	"github.com/netdir/netdir/storagenode"
)

// ReportKeys is how many hot keys a node names in each report.
const ReportKeys = 64

// DefaultReportEvery is a node's report period: the controller's default
// hot-key round.
const DefaultReportEvery = 500 * time.Millisecond

// NodeConfig is one storage node process (`netdir node`).
type NodeConfig struct {
	Storage storagenode.Options
	// Metrics serves the node's Prometheus metrics on this HTTP address
	// (empty: none).
	Metrics string
	// Controller is the controller's gRPC API, to which the node reports its
	// hot keys and its trees' reads and read latencies every ReportEvery
	// (default DefaultReportEvery): a comma list of a replicated
	// controller's, whose leader takes the reports. Empty: no reports.
	Controller  string
	ReportEvery time.Duration
	// ControllerTLS is for a controller whose API speaks TLS (nil:
	// plaintext).
	ControllerTLS *grpcsec.TLS
	// GossipSeeds, if any, make the node a gossip member bound at GossipBind
	// (default gossip.DefaultNodeBind) that publishes its stats every
	// GossipEvery (default gossip.DefaultInterval) and paces compaction by
	// the expected load the controller gossips back.
	GossipBind  string
	GossipSeeds []string
	GossipEvery time.Duration
	// FailureTimeout is about how long gossip takes to declare a silent
	// member dead (default gossip.DefaultFailureTimeout). Through gossip
	// the node also takes the controller's newer layouts.
	FailureTimeout time.Duration
	// Log receives the telemetry's logs, and the node's unless
	// Storage.Logger is set (default: discarded, the node's to stderr).
	Log *slog.Logger
	// ClusterKeyFile is the cluster key (nodeauth) the node seals and
	// authenticates node ops with, reloaded on SIGHUP or when it changes,
	// unless Storage.Auth is set. Empty: neither.
	ClusterKeyFile string
}

// Node is a running storage node with its telemetry: reports to the
// controller, gossip and metrics.
type Node struct {
	*storagenode.Node
	gossip  *gossip.Gossip
	metrics *http.Server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
}

// StartNode starts a storage node and its telemetry; it runs until Close
// (or ctx ends, for the telemetry).
func StartNode(ctx context.Context, cfg NodeConfig) (_ *Node, err error) {
	if cfg.Storage.Logger == nil {
		cfg.Storage.Logger = cfg.Log
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	watchKey := cfg.Storage.Auth == nil && cfg.ClusterKeyFile != ""
	if watchKey {
		if cfg.Storage.Auth, err = nodeauth.Load(cfg.ClusterKeyFile); err != nil {
			return nil, err
		}
	}
	sn, err := storagenode.Start(cfg.Storage)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	if watchKey {
		go nodeauth.Watch(ctx, cfg.ClusterKeyFile, cfg.Storage.Auth, cfg.Log)
	}
	n := &Node{Node: sn, cancel: cancel}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if cfg.Metrics != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(sn.Collector())
		lis, err := net.Listen("tcp", cfg.Metrics)
		if err != nil {
			return nil, fmt.Errorf("node %d: metrics: %w", sn.ID(), err)
		}
		n.metrics = &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
		go func() {
			if err := n.metrics.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cfg.Log.Error("metrics", "err", err)
			}
		}()
	}
	if cfg.Controller != "" {
		every := cfg.ReportEvery
		if every <= 0 {
			every = DefaultReportEvery
		}
		// Redial a controller that went away within about a report
		// interval, not gRPC's default of up to two minutes: a restarted
		// controller (or the bench's next plane) hears from every node in
		// its first rounds.
		bo := backoff.DefaultConfig
		bo.MaxDelay = max(every, time.Second)
		creds, err := cfg.ControllerTLS.ClientCredentials()
		if err != nil {
			return nil, fmt.Errorf("node %d: controller %s: %w", sn.ID(), cfg.Controller, err)
		}
		cs, err := controller.DialControllers(strings.Split(cfg.Controller, ","),
			grpc.WithTransportCredentials(creds),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: bo.MaxDelay}))
		if err != nil {
			return nil, fmt.Errorf("node %d: controller %s: %w", sn.ID(), cfg.Controller, err)
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer cs.Close()
			report(ctx, sn, cs, every, cfg.Log.With("controller", cfg.Controller))
		}()
	}
	if len(cfg.GossipSeeds) > 0 {
		bind := cfg.GossipBind
		if bind == "" {
			bind = gossip.DefaultNodeBind
		}
		n.gossip, err = gossip.Start(gossip.Config{Name: fmt.Sprintf("node-%d", sn.ID()), Bind: bind, Seeds: cfg.GossipSeeds,
			FailureTimeout: cfg.FailureTimeout, Log: cfg.Log, Keys: gossipKeys(cfg.Storage.Auth),
			OnLayout: func(y []byte) {
				if m, err := layout.Parse(y); err != nil {
					cfg.Log.Warn("gossiped layout", "err", err)
				} else {
					sn.SetLayout(m)
				}
			}})
		if err != nil {
			return nil, err
		}
		followKeys(cfg.Storage.Auth, n.gossip, cfg.Log)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			sn.RunGossip(ctx, n.gossip, cfg.GossipEvery)
		}()
	}
	return n, nil
}

// gossipKeys are the gossip keys derived from the cluster key a (none
// without one).
func gossipKeys(a *nodeauth.Auth) [][]byte {
	if a == nil {
		return nil
	}
	return a.GossipKeys()
}

// followKeys makes g take a's keys again whenever they are reloaded.
func followKeys(a *nodeauth.Auth, g *gossip.Gossip, log *slog.Logger) {
	if a == nil {
		return
	}
	a.OnSetKeys(func() {
		if err := g.SetKeys(a.GossipKeys()); err != nil {
			log.Error("gossip keys not rotated", "err", err)
		}
	})
}

// GossipAddr is where the node gossips ("" without gossip).
func (n *Node) GossipAddr() string {
	if n.gossip == nil {
		return ""
	}
	return n.gossip.Addr()
}

// Close stops the telemetry and the node.
func (n *Node) Close() error {
	var errs []error
	n.once.Do(func() {
		n.cancel()
		n.wg.Wait()
		if n.gossip != nil {
			errs = append(errs, n.gossip.Close())
		}
		if n.metrics != nil {
			errs = append(errs, n.metrics.Close())
		}
		errs = append(errs, n.Node.Close())
	})
	return errors.Join(errs...)
}

// report names the keys the node served most to the controller every
// interval (data planes count by hash, and only nodes know the keys), with
// its trees' cumulative reads and mean read latencies for the coarse loop.
// Versions come from gossip.NextVersion, so they stay monotone across a
// node's restarts.
//
// A controller that is not up yet, or went away, is waited for quietly:
// one line when the waiting starts (or the failure changes), one when it
// answers, at warning level so that both show by default.
func report(ctx context.Context, n *storagenode.Node, cs *controller.Controllers, every time.Duration, log *slog.Logger) {
	var l link
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := n.Stats()
		r := &api.NodeStats{Node: uint32(n.ID()), Version: gossip.NextVersion(), QueueDepth: uint32(st.Load),
			QosGeneration: n.QoSGeneration(), Qos: tenantStatsProto(st.QoS)}
		for _, kc := range n.HotKeys(ReportKeys) {
			r.HotKeys = append(r.HotKeys, &api.KeyCount{Key: kc.Key, Count: kc.Count})
		}
		for _, t := range st.Trees {
			r.Trees = append(r.Trees, &api.TreeStats{Position: uint32(t.Position), Reads: t.Reads,
				MeanReadLatencyUs: float64(t.MeanReadLatency) / float64(time.Microsecond)})
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		var resp *api.ReportStatsResponse
		err := cs.Call(rctx, func(ctx context.Context, c api.ControllerClient) (err error) {
			resp, err = c.ReportStats(ctx, r)
			return err
		})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if tr, ok := l.observe(err, time.Now()); ok {
			switch tr.State {
			case linkUp:
				if tr.Tries > 0 { // after waiting; a first answer goes unsaid
					log.Warn("controller reached", "after", tr.After.Round(time.Millisecond), "tries", tr.Tries+1)
				}
			case linkWaiting:
				log.Warn("waiting for the controller; reporting quietly until it answers", "err", err)
			default:
				log.Warn("lost the controller; reporting quietly until it answers", "err", err)
			}
		}
		switch {
		case err != nil:
		case resp.GetQos() != nil:
			if err := n.SetQoS(qosFromProto(resp.GetQos())); err != nil {
				log.Error("qos configuration refused", "err", err)
			}
		}
	}
}

// qosFromProto is the controller's QoS configuration as the node applies it.
func qosFromProto(pc *api.QoSConfig) storagenode.QoS {
	q := storagenode.QoS{Generation: pc.GetGeneration(), Tenants: map[uint16]dmclock.Policy{}}
	if pc.GetDefaults() != nil {
		p := controller.PolicyFromProto(pc.GetDefaults())
		q.Default = &p
	}
	for _, t := range pc.GetTenants() {
		q.Tenants[uint16(t.GetTenant())] = controller.PolicyFromProto(t.GetPolicy())
	}
	return q
}

func tenantStatsProto(ts []storagenode.TenantQoS) []*api.TenantStats {
	out := make([]*api.TenantStats, len(ts))
	for i, t := range ts {
		out[i] = &api.TenantStats{Tenant: uint32(t.Tenant), Queued: uint32(t.Queued), Inflight: uint32(t.Inflight),
			ServedReservation: t.ServedReservation, ServedWeight: t.ServedWeight, Throttled: t.Throttled,
			DelayNs: uint64(t.Delay)}
		for _, a := range t.Clients {
			out[i].Clients = append(out[i].Clients, a.String())
		}
	}
	return out
}
