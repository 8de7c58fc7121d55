package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/internal/grpcsec"
	"github.com/netdir/netdir/internal/yamlconf"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/wire"
)

// ControllerConfig is one controller process: the YAML of `netdir
// controller --config` (the controller's own keys, and the cluster layout's
// inline), its flags, and what an in-process controller adds.
type ControllerConfig struct {
	API string `yaml:"api"` // gRPC API (netdir ctl, nodes, agents)
	// TLS is the API's certificate (cert, key; with ca, clients must
	// present certificates it signed). nil: plaintext.
	TLS *grpcsec.TLS `yaml:"tls"`
	// APITokenFile holds the bearer token that the API's calls that change
	// state need (netdir ctl --token-file); empty: none needed. APIToken
	// is its content, read by LoadControllerConfig.
	APITokenFile string        `yaml:"api_token_file"`
	APIToken     string        `yaml:"-"`
	Metrics      string        `yaml:"metrics"` // Prometheus /metrics; empty: off
	Round        time.Duration `yaml:"round"`
	CoarseEpoch  time.Duration `yaml:"coarse_epoch"` // HATS coarse loop; 0: 60s
	PromoteMin   uint64        `yaml:"promote_min"`
	Capacity     int           `yaml:"capacity"` // directory entries; 0: O(n log n)
	// NodeCapacity bounds each node's rate for the coarse loop (requests/s;
	// the nodes' --max-ops emulation); 0: read latency alone.
	NodeCapacity float64 `yaml:"node_capacity"`
	P4Info       string  `yaml:"p4info"`
	// ClusterKeyFile is the cluster key (nodeauth) that seals the
	// controller's promote and demote node ops; relative to the config
	// file. Empty: none (nodes holding a key then refuse them).
	ClusterKeyFile string `yaml:"cluster_key_file"`
	// Auth is the cluster key itself, for an in-process controller;
	// it takes precedence over ClusterKeyFile.
	Auth     *nodeauth.Auth   `yaml:"-"`
	Switches []SwitchEndpoint `yaml:"switches"`
	VSBPorts []uint32         `yaml:"vsb_ports"`
	// DataDir keeps a lone controller's state across restarts: the
	// tenants and QoS policies (qos.json). Empty: memory only. A
	// replicated controller keeps them in its raft state.
	DataDir string `yaml:"data_dir"`
	// Raft makes this controller one of several replicas of the state
	// (nil: a lone controller). Only the leader is the switches' P4Runtime
	// primary and runs the control loops; the others keep the state warm
	// and refuse the API's calls but GetLayout, naming the leader.
	Raft   *controller.RaftConfig `yaml:"raft"`
	Layout layout.Config          `yaml:",inline"`

	// GossipBind is the controller's gossip (memberlist) address, the
	// nodes' seed (empty: no gossip); GossipSeeds are members to join.
	GossipBind  string   `yaml:"-"`
	GossipSeeds []string `yaml:"-"`
	// FailureTimeout is about how long gossip takes to declare a silent
	// node dead, when the controller splices it out of its chains
	// (default gossip.DefaultFailureTimeout).
	FailureTimeout time.Duration `yaml:"failure_timeout"`
	// SpareAfter is how long a node stays spliced out before spares take
	// its place in each of its chains (0: never; LoadControllerConfig
	// defaults it to DefaultSpareAfter).
	SpareAfter time.Duration `yaml:"spare_after"`
	// LayoutWait is how long a controller with gossip waits at start, before
	// it programs the data planes, to hear from the nodes a newer layout
	// than its YAML's (an earlier controller's): it adopts the newest it
	// hears, then or later, and never serves or pushes an older one. The
	// nodes rejoin the controller's gossip every 2 s. 0: no wait (its
	// GossipSeeds, joined at start, still count); LoadControllerConfig
	// defaults it to DefaultLayoutWait.
	LayoutWait time.Duration `yaml:"layout_wait"`
	// Schema is the P4Info to program the switches with; nil: load P4Info.
	Schema *p4rt.Schema `yaml:"-"`
	// Planes are data planes driven in process, beside Switches.
	Planes []controller.DataPlane `yaml:"-"`
	// ProgramOnly programs the data planes and serves the API and gossip,
	// but runs no control loops (no promotions, no coarse epochs): the
	// bench's baselines, whose data planes ignore the directory.
	ProgramOnly bool         `yaml:"-"`
	Log         *slog.Logger `yaml:"-"`
}

// SwitchEndpoint is a switch the controller programs over P4Runtime.
type SwitchEndpoint struct {
	Name         string `yaml:"name"`
	Addr         string `yaml:"addr"`
	DeviceID     uint64 `yaml:"device_id"`
	ElectionID   uint64 `yaml:"election_id"`
	DeviceConfig string `yaml:"device_config"` // BMv2 JSON or Tofino binary; empty: keep the device's pipeline config
	WindowNS     uint64 `yaml:"window_ns"`     // fine-score ranges to install; 0 for the software data plane
	// Routes are the switch's static IPv4 routes (replies to clients,
	// node-to-node traffic), installed with the rest of its state.
	Routes []RouteConfig `yaml:"routes"`
	// TLS is for a P4Runtime server that speaks it (ca: the switch's CA;
	// cert and key: the controller's, for mutual TLS). nil: plaintext.
	TLS *grpcsec.TLS `yaml:"tls"`
}

// RouteConfig is one static route of a switch.
type RouteConfig struct {
	Prefix string `yaml:"prefix"` // e.g. 10.0.1.1/32
	Port   uint32 `yaml:"port"`
	SMAC   string `yaml:"smac"`
	DMAC   string `yaml:"dmac"`
}

// LoadControllerConfig reads a controller's YAML. Relative paths in it
// (p4info, device_config, data_dir, certificates, the token file) are
// taken from the file's directory. Its errors are one line naming the
// file, the field and the value.
func LoadControllerConfig(path string) (*ControllerConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseControllerConfig(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseControllerConfig reads a controller's YAML, taking relative paths
// from dir; LoadControllerConfig names the file in its errors.
func ParseControllerConfig(b []byte, dir string) (*ControllerConfig, error) {
	c := &ControllerConfig{API: "127.0.0.1:7400", SpareAfter: DefaultSpareAfter, LayoutWait: DefaultLayoutWait}
	if err := yamlconf.Decode(b, c); err != nil {
		return nil, err
	}
	if _, err := layout.New(c.Layout); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"round", c.Round}, {"coarse_epoch", c.CoarseEpoch}, {"failure_timeout", c.FailureTimeout},
		{"spare_after", c.SpareAfter}, {"layout_wait", c.LayoutWait}} {
		if d.v < 0 {
			return nil, fmt.Errorf("%s: %v: want a duration of 0 or more", d.field, d.v)
		}
	}
	if _, _, err := net.SplitHostPort(c.API); err != nil {
		return nil, fmt.Errorf("api: %q: want host:port", c.API)
	}
	if c.P4Info == "" {
		c.P4Info = DefaultP4Info // the repository's build, from its root
	} else {
		c.P4Info = yamlconf.Resolve(dir, c.P4Info)
	}
	c.DataDir = yamlconf.Resolve(dir, c.DataDir)
	c.ClusterKeyFile = yamlconf.Resolve(dir, c.ClusterKeyFile)
	c.TLS.Resolve(dir)
	if err := c.TLS.Check("tls", true); err != nil {
		return nil, err
	}
	if c.APITokenFile != "" {
		tok, err := grpcsec.ReadToken(yamlconf.Resolve(dir, c.APITokenFile))
		if err != nil {
			return nil, fmt.Errorf("api_token_file: %w", err)
		}
		c.APIToken = tok
	}
	if len(c.Switches) > 0 {
		if _, err := os.Stat(c.P4Info); err != nil {
			return nil, fmt.Errorf("p4info: %s: %v", c.P4Info, errors.Unwrap(err))
		}
	}
	if err := checkRaft(c.Raft, dir); err != nil {
		return nil, err
	}
	byAddr, byName := map[string]int{}, map[string]int{}
	for i := range c.Switches {
		s := &c.Switches[i]
		field := fmt.Sprintf("switches[%d]", i)
		if _, _, err := net.SplitHostPort(s.Addr); err != nil {
			return nil, fmt.Errorf("%s.addr: %q: want host:port", field, s.Addr)
		}
		if j, dup := byAddr[s.Addr]; dup {
			return nil, fmt.Errorf("%s.addr: %s duplicates switches[%d]", field, s.Addr, j)
		}
		if s.ElectionID == 0 {
			s.ElectionID = 1
		}
		if s.Name == "" {
			s.Name = s.Addr
		}
		if j, dup := byName[s.Name]; dup {
			return nil, fmt.Errorf("%s.name: %s duplicates switches[%d]", field, s.Name, j)
		}
		byAddr[s.Addr], byName[s.Name] = i, i
		if s.DeviceConfig != "" {
			s.DeviceConfig = yamlconf.Resolve(dir, s.DeviceConfig)
			if _, err := os.Stat(s.DeviceConfig); err != nil {
				return nil, fmt.Errorf("%s.device_config: %s: %v", field, s.DeviceConfig, errors.Unwrap(err))
			}
		}
		for j, r := range s.Routes {
			if _, err := parseRoute(r); err != nil {
				return nil, fmt.Errorf("%s.routes[%d]: %w", field, j, err)
			}
		}
		s.TLS.Resolve(dir)
		if err := s.TLS.Check(field+".tls", false); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkRaft checks the raft: key of a controller's configuration, if
// given, and takes its data directory from dir.
func checkRaft(r *controller.RaftConfig, dir string) error {
	if r == nil {
		return nil
	}
	r.Dir = yamlconf.Resolve(dir, r.Dir)
	if r.ID == "" {
		return errors.New("raft.id: missing: this controller's id, one of raft.peers")
	}
	if _, _, err := net.SplitHostPort(r.Bind); err != nil {
		return fmt.Errorf("raft.bind: %q: want host:port", r.Bind)
	}
	ids, addrs := map[string]int{}, map[string]int{}
	for i, p := range r.Peers {
		if p.ID == "" {
			return fmt.Errorf("raft.peers[%d].id: missing", i)
		}
		if j, dup := ids[p.ID]; dup {
			return fmt.Errorf("raft.peers[%d].id: %s duplicates raft.peers[%d]", i, p.ID, j)
		}
		if _, _, err := net.SplitHostPort(p.Raft); err != nil {
			return fmt.Errorf("raft.peers[%d].raft: %q: want host:port", i, p.Raft)
		}
		if j, dup := addrs[p.Raft]; dup {
			return fmt.Errorf("raft.peers[%d].raft: %s duplicates raft.peers[%d]", i, p.Raft, j)
		}
		ids[p.ID], addrs[p.Raft] = i, i
	}
	if _, ok := ids[r.ID]; !ok && len(r.Peers) > 0 {
		return fmt.Errorf("raft.id: %s is not one of raft.peers", r.ID)
	}
	return nil
}

// DefaultP4Info is the P4Info a controller configuration without p4info
// loads: the repository's build, relative to the working directory.
const DefaultP4Info = "p4/build/netdir.p4info.txtpb"

// A configured controller's spare_after and layout_wait.
const (
	DefaultSpareAfter = 30 * time.Second
	DefaultLayoutWait = 3 * time.Second
)

// Controller is a running controller with its API, gossip and metrics.
type Controller struct {
	*controller.Controller
	api     net.Addr
	gs      *grpc.Server
	gossip  *gossip.Gossip
	metrics *http.Server
	clients []*switchSession
	cancel  context.CancelFunc // the switch sessions and everything below
	loops   context.CancelFunc // the control loops
	wg      sync.WaitGroup     // the switch sessions
	loopsWG sync.WaitGroup
	once    sync.Once
}

// switchSession is the P4Runtime session with one switch, and the election
// id configured for it.
type switchSession struct {
	*p4rt.Client
	election uint64
	synced   atomic.Uint64 // the last session programmed (p4rt.Client.Session)
}

// StartController dials and programs every switch (pipeline, partitions,
// nodes), starts the control loops, the gossip member and the gRPC API; ctx
// bounds the setup, and the controller runs until Close. A switch that
// restarts, or whose stream breaks, gets the pipeline and the whole state
// again. With cfg.Raft, the controller programs the switches and runs the
// loops only while it leads (lead).
func StartController(ctx context.Context, cfg ControllerConfig) (_ *Controller, err error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rctx, cancel := context.WithCancel(context.Background())
	lctx, loops := context.WithCancel(rctx)
	c := &Controller{cancel: cancel, loops: loops}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	// The node list first: a bad one is refused before any switch is
	// waited for.
	lay, err := layout.New(cfg.Layout)
	if err != nil {
		return nil, err
	}
	// With no switches the controller serves host agents only (through
	// its API), and needs no P4Info.
	schema := cfg.Schema
	if schema == nil && len(cfg.Switches) > 0 {
		if schema, err = p4rt.LoadSchema(cfg.P4Info); err != nil {
			return nil, err
		}
	}
	replicated := cfg.Raft != nil
	planes := append([]controller.DataPlane(nil), cfg.Planes...)
	for _, s := range cfg.Switches {
		pl, err := c.dialSwitch(ctx, s, schema, replicated, log)
		if err != nil {
			return nil, fmt.Errorf("switch %s: %w", s.Name, err)
		}
		planes = append(planes, pl)
		if !replicated {
			log.Info("switch programmed", "switch", s.Name, "addr", s.Addr, "device_id", s.DeviceID)
		}
	}
	auth := cfg.Auth
	if auth == nil && cfg.ClusterKeyFile != "" {
		if auth, err = nodeauth.Load(cfg.ClusterKeyFile); err != nil {
			return nil, err
		}
		go nodeauth.Watch(rctx, cfg.ClusterKeyFile, auth, log)
		cfg.Auth = auth
	}
	var qosStore controller.QoSStore
	if cfg.DataDir != "" && !replicated {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, err
		}
		qosStore = controller.FileQoSStore{Path: filepath.Join(cfg.DataDir, "qos.json")}
	}
	c.Controller, err = controller.New(controller.Config{
		Layout: lay, Capacity: cfg.Capacity, Round: cfg.Round, Epoch: cfg.CoarseEpoch, PromoteMin: cfg.PromoteMin,
		VSBGroup: cfg.VSBPorts, NodeCapacity: cfg.NodeCapacity, QoSStore: qosStore, Raft: cfg.Raft, Log: log,
		SpareAfter: cfg.SpareAfter, RejoinAfter: cfg.FailureTimeout,
	}, planes, &controller.UDPStorage{NoStamp: len(planes) == 0, Auth: auth})
	if err != nil {
		return nil, err
	}
	learned := make(chan struct{}, 1)
	if cfg.GossipBind != "" {
		if err := c.joinGossip(cfg, learned, log); err != nil {
			return nil, err
		}
		if !replicated { // replicas keep the layout in their raft state
			if err := c.awaitLayout(ctx, cfg.LayoutWait); err != nil {
				return nil, err
			}
		}
	}
	if !replicated {
		if err := c.Setup(ctx); err != nil {
			return nil, err
		}
		for _, s := range c.clients {
			s.synced.Store(s.Session())
		}
		lay := c.Layout()
		log.Info("partitions installed", "partitions", lay.Partitions(), "nodes", len(lay.Nodes()), "epoch", lay.Epoch())
	}
	if cfg.GossipBind != "" {
		if err := c.runGossip(lctx, cfg, learned, log); err != nil {
			return nil, err
		}
	}
	if err := c.serveAPI(cfg, log); err != nil {
		return nil, err
	}
	if cfg.Metrics != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), controller.NewCollector(c.Controller), controller.NewStatsCollector(c.Controller))
		mlis, err := net.Listen("tcp", cfg.Metrics)
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		c.metrics = &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
		go func() {
			if err := c.metrics.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics", "err", err)
			}
		}()
		log.Info("metrics serving", "addr", mlis.Addr())
	}
	for _, pc := range c.clients {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			pc.Run(rctx)
		}()
	}
	switch {
	case replicated:
		c.loopsWG.Add(1)
		go func() {
			defer c.loopsWG.Done()
			c.lead(lctx, cfg, log)
		}()
	case !cfg.ProgramOnly:
		c.loopsWG.Add(1)
		go func() {
			defer c.loopsWG.Done()
			c.Run(lctx)
		}()
	}
	return c, nil
}

// serveAPI starts the gRPC API: with TLS if configured, and the token
// guarding the calls that change state if one is.
func (c *Controller) serveAPI(cfg ControllerConfig, log *slog.Logger) error {
	creds, err := cfg.TLS.ServerCredentials()
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	opts := []grpc.ServerOption{grpc.Creds(creds)}
	if cfg.APIToken != "" {
		opts = append(opts, grpc.ChainUnaryInterceptor(grpcsec.RequireToken(cfg.APIToken, controller.Mutating)))
	}
	lis, err := net.Listen("tcp", cfg.API)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	c.api = lis.Addr()
	c.gs = grpc.NewServer(opts...)
	api.RegisterControllerServer(c.gs, controller.NewAPI(c.Controller))
	go c.gs.Serve(lis)
	log.Info("API serving", "addr", c.api, "tls", cfg.TLS.Enabled(), "token", cfg.APIToken != "")
	if !cfg.TLS.Enabled() && !grpcsec.Loopback(c.api.String()) {
		log.Warn("API listening beyond loopback without TLS: give tls: {cert, key} in the configuration", "addr", c.api)
	}
	return nil
}

// lead follows the controller's raft leadership until ctx ends: while it
// leads, it is every switch's P4Runtime primary, with an election id above
// its predecessors' (controller.ElectionID), and runs the control loops; on
// losing leadership it stops both.
func (c *Controller) lead(ctx context.Context, cfg ControllerConfig, log *slog.Logger) {
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case leader := <-c.Leadership().Changes():
			if stop != nil {
				stop()
				stop = nil
			}
			if leader {
				stop = c.serveTerm(ctx, cfg, log)
			} else {
				log.Info("lost the lead", "leader", c.Leadership().Leader().ID)
			}
		}
	}
}

// serveTerm is the leader's work for one term: take over the state, become
// the switches' primary (OnPrimary pushes the pipeline and re-syncs each
// from the state), re-sync the in-process planes, then run the loops. The
// function it returns stops all of it and releases the switches.
func (c *Controller) serveTerm(ctx context.Context, cfg ControllerConfig, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		term := c.Leadership().Term()
		log.Info("leading", "term", term)
		if err := c.TakeOver(ctx); err != nil {
			log.Warn("take over", "err", err)
			return
		}
		for _, s := range c.clients {
			s.Arbitrate(controller.ElectionID(term, s.election))
		}
		for _, p := range cfg.Planes {
			if err := c.Resync(ctx, p); err != nil {
				log.Warn("re-sync", "plane", p.Name(), "err", err)
			}
		}
		if !cfg.ProgramOnly {
			c.Run(ctx)
		}
	}()
	return func() {
		cancel()
		<-done
		for _, s := range c.clients {
			s.Release()
		}
	}
}

// dialSwitch connects to a switch over P4Runtime and pushes the pipeline;
// a replicated controller only prepares the session, which lead opens.
func (c *Controller) dialSwitch(ctx context.Context, s SwitchEndpoint, schema *p4rt.Schema, replicated bool, log *slog.Logger) (*controller.P4Plane, error) {
	var devCfg []byte
	if s.DeviceConfig != "" {
		var err error
		if devCfg, err = os.ReadFile(s.DeviceConfig); err != nil {
			return nil, err
		}
	}
	var pl *controller.P4Plane
	sess := &switchSession{}
	election := s.ElectionID
	if replicated {
		election = 0 // a standby until it leads
	}
	creds, err := s.TLS.ClientCredentials()
	if err != nil {
		return nil, err
	}
	pcfg := p4rt.Config{
		Addr: s.Addr, DeviceID: s.DeviceID, Election: election, Log: log, Creds: creds,
		// A device that restarted, or a stream that broke, gets the
		// pipeline and the whole state again.
		OnPrimary: func(ctx context.Context, pc *p4rt.Client) error {
			push := func(ctx context.Context) error { return pl.PushPipeline(ctx, devCfg) }
			if err := c.Reprogram(ctx, pl, push); err != nil {
				return err
			}
			sess.synced.Store(pc.Session())
			return nil
		},
	}
	pc, err := dialRetrying(ctx, pcfg, log.With("switch", s.Name, "addr", s.Addr))
	if err != nil {
		return nil, err
	}
	sess.Client, sess.election = pc, s.ElectionID
	c.clients = append(c.clients, sess)
	pl = controller.NewP4Plane(s.Name, pc, schema)
	pl.Window = s.WindowNS
	for _, r := range s.Routes {
		rt, err := parseRoute(r)
		if err != nil {
			return nil, err
		}
		pl.Routes = append(pl.Routes, rt)
	}
	if !replicated {
		if err := pl.PushPipeline(ctx, devCfg); err != nil {
			return nil, err
		}
	}
	return pl, nil
}

// Waits between tries to reach a switch that is not up yet.
const (
	switchRetryMin = 100 * time.Millisecond
	switchRetryMax = 5 * time.Second
)

// dialRetrying dials a switch until it answers or ctx ends, backing off
// from switchRetryMin to switchRetryMax, so that the controller may start
// before its switches. It logs when the waiting starts, when the failure
// changes, and when the switch answers, not every try. Another controller
// being primary is no reason to wait: that error returns at once.
func dialRetrying(ctx context.Context, cfg p4rt.Config, log *slog.Logger) (*p4rt.Client, error) {
	wait := retryWait{min: switchRetryMin, max: switchRetryMax}
	var l link
	for {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		pc, err := p4rt.Dial(dctx, cfg)
		cancel()
		if t, ok := l.observe(err, time.Now()); ok {
			switch t.State {
			case linkUp:
				if t.Tries > 0 {
					log.Info("switch reached", "tries", t.Tries+1, "after", t.After.Round(time.Millisecond))
				}
			default:
				log.Warn("waiting for the switch (P4Runtime); retrying quietly", "err", err,
					"retry_every", fmt.Sprintf("%v..%v", switchRetryMin, switchRetryMax))
			}
		}
		if err == nil || errors.Is(err, p4rt.ErrNotPrimary) {
			return pc, err
		}
		if grpcsec.HandshakeFailed(err) {
			return nil, fmt.Errorf("TLS with the switch failed (check switches[].tls): %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no answer after %d tries: %w", l.tries, err)
		case <-time.After(wait.next()):
		}
	}
}

// startGossip makes the controller a gossip member: it observes the nodes'
// stats and publishes their expected loads after every coarse epoch. A new
// controller first withdraws any expected load an earlier one published:
// its Setup installed even partition weights, which that load no longer
// describes, so the nodes pace by their own reads until its first epoch.
//
// joinGossip makes the member and joins the seeds; a newer layout it hears
// (from the nodes: the one an earlier controller gave them) signals
// learned. runGossip then starts the loops.
func (c *Controller) joinGossip(cfg ControllerConfig, learned chan<- struct{}, log *slog.Logger) error {
	name := "controller"
	if cfg.Raft != nil {
		name += "-" + cfg.Raft.ID
	}
	g, err := gossip.Start(gossip.Config{Name: name, Bind: cfg.GossipBind, Seeds: cfg.GossipSeeds, Log: log,
		FailureTimeout: cfg.FailureTimeout, Keys: gossipKeys(cfg.Auth),
		OnStats: func(s gossip.NodeStats) { c.ObserveNodeStats(s) },
		OnLayout: func([]byte) {
			select {
			case learned <- struct{}{}:
			default:
			}
		},
		OnMember: c.MemberChanged})
	if err != nil {
		return err
	}
	c.gossip = g
	followKeys(cfg.Auth, g, log)
	c.AttachGossip(g)
	return nil
}

// awaitLayout adopts, before the data planes are programmed, the newest
// layout gossip brought if it is newer than the controller's, waiting up
// to wait for one while no other member has joined (a member that joins
// brings its table with it).
func (c *Controller) awaitLayout(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		if m, ok := c.GossipedLayout(); ok {
			_, err := c.AdoptLayout(ctx, m, false)
			return err
		}
		if time.Now().After(deadline) || c.gossip.Members() > 1 && time.Until(deadline) < wait-500*time.Millisecond {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Controller) runGossip(ctx context.Context, cfg ControllerConfig, learned <-chan struct{}, log *slog.Logger) error {
	g := c.gossip
	// A replica keeps the partition weights of the state, so the expected
	// loads gossiped under them still hold.
	if cfg.Raft == nil {
		none := map[wire.NodeID][]float64{}
		for _, n := range cfg.Layout.Nodes {
			none[n.ID] = nil
		}
		if err := c.PublishExpected(none); err != nil {
			return err
		}
	}
	c.loopsWG.Add(3)
	go func() {
		defer c.loopsWG.Done()
		c.RunGossip(ctx)
	}()
	go func() {
		defer c.loopsWG.Done()
		c.RunAdopt(ctx, learned)
	}()
	go func() {
		defer c.loopsWG.Done()
		c.RunReconfig(ctx)
	}()
	log.Info("gossip serving", "addr", g.Addr())
	return nil
}

// Serving reports whether the controller leads, is every switch's primary
// and has programmed each in its current session.
func (c *Controller) Serving() bool {
	if c.Leading() != nil {
		return false
	}
	for _, s := range c.clients {
		if !s.Primary() || s.synced.Load() != s.Session() {
			return false
		}
	}
	return true
}

// APIAddr is where the gRPC API listens.
func (c *Controller) APIAddr() string { return c.api.String() }

// GossipAddr is where the controller gossips ("" without gossip).
func (c *Controller) GossipAddr() string {
	if c.gossip == nil {
		return ""
	}
	return c.gossip.Addr()
}

// StopLoops stops the hot-key and coarse loops and the publishing of
// expected loads, and waits for them; the directory stays as it is, for a
// caller that evicts it (Unpin) before Close.
func (c *Controller) StopLoops() {
	c.loops()
	c.loopsWG.Wait()
}

// Close stops the control loops, the API, gossip, metrics and the switch
// sessions.
func (c *Controller) Close() error {
	var errs []error
	c.once.Do(func() {
		c.StopLoops()
		c.cancel()
		for _, pc := range c.clients {
			pc.Close() // ends the sessions' streams, so their Run returns
		}
		c.wg.Wait()
		if c.gs != nil {
			c.gs.Stop()
		}
		if c.gossip != nil {
			errs = append(errs, c.gossip.Close())
		}
		if c.metrics != nil {
			errs = append(errs, c.metrics.Close())
		}
		if c.Controller != nil {
			errs = append(errs, c.Controller.Close())
		}
	})
	return errors.Join(errs...)
}

// parseRoute reads one switches[].routes entry.
func parseRoute(r RouteConfig) (controller.Route, error) {
	p, err := netip.ParsePrefix(r.Prefix)
	if err != nil || !p.Addr().Is4() {
		return controller.Route{}, fmt.Errorf("route %q: want an IPv4 prefix", r.Prefix)
	}
	src, err := net.ParseMAC(r.SMAC)
	if err != nil {
		return controller.Route{}, fmt.Errorf("route %s: smac: %w", r.Prefix, err)
	}
	dst, err := net.ParseMAC(r.DMAC)
	if err != nil {
		return controller.Route{}, fmt.Errorf("route %s: dmac: %w", r.Prefix, err)
	}
	return controller.Route{Prefix: p, Port: r.Port, SrcMAC: src, DstMAC: dst}, nil
}
