package cluster

import (
	"bytes"
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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"gopkg.in/yaml.v3"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// ControllerConfig is one controller process: the YAML of `netdir
// controller --config` (the controller's own keys, and the cluster layout's
// inline), its flags, and what an in-process controller adds.
type ControllerConfig struct {
	API         string        `yaml:"api"`     // gRPC API (netdir ctl, nodes, agents)
	Metrics     string        `yaml:"metrics"` // Prometheus /metrics; empty: off
	Round       time.Duration `yaml:"round"`
	CoarseEpoch time.Duration `yaml:"coarse_epoch"` // HATS coarse loop; 0: 60s
	PromoteMin  uint64        `yaml:"promote_min"`
	Capacity    int           `yaml:"capacity"` // directory entries; 0: O(n log n)
	// NodeCapacity bounds each node's rate for the coarse loop (requests/s;
	// the nodes' --max-ops emulation); 0: read latency alone.
	NodeCapacity float64          `yaml:"node_capacity"`
	P4Info       string           `yaml:"p4info"`
	Switches     []SwitchEndpoint `yaml:"switches"`
	VSBPorts     []uint32         `yaml:"vsb_ports"`
	// DataDir keeps the controller's state across restarts: the tenants
	// and QoS policies (qos.json). Empty: memory only.
	DataDir string        `yaml:"data_dir"`
	Layout  layout.Config `yaml:",inline"`

	// GossipBind is the controller's gossip (memberlist) address, the
	// nodes' seed (empty: no gossip); GossipSeeds are members to join.
	GossipBind  string   `yaml:"-"`
	GossipSeeds []string `yaml:"-"`
	// FailureTimeout is about how long gossip takes to declare a silent
	// node dead, when the controller splices it out of its chains
	// (default gossip.DefaultFailureTimeout).
	FailureTimeout time.Duration `yaml:"failure_timeout"`
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
}

// RouteConfig is one static route of a switch.
type RouteConfig struct {
	Prefix string `yaml:"prefix"` // e.g. 10.0.1.1/32
	Port   uint32 `yaml:"port"`
	SMAC   string `yaml:"smac"`
	DMAC   string `yaml:"dmac"`
}

// LoadControllerConfig reads a controller's YAML.
func LoadControllerConfig(path string) (*ControllerConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &ControllerConfig{API: "127.0.0.1:7400", P4Info: "p4/build/netdir.p4info.txtpb"}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := layout.New(c.Layout); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, s := range c.Switches {
		if s.Addr == "" {
			return nil, fmt.Errorf("%s: switch %d has no addr", path, i)
		}
		if s.ElectionID == 0 {
			c.Switches[i].ElectionID = 1
		}
		if s.Name == "" {
			c.Switches[i].Name = s.Addr
		}
	}
	return c, nil
}

// Controller is a running controller with its API, gossip and metrics.
type Controller struct {
	*controller.Controller
	api     net.Addr
	gs      *grpc.Server
	gossip  *gossip.Gossip
	metrics *http.Server
	clients []*p4rt.Client
	cancel  context.CancelFunc // the switch sessions and everything below
	loops   context.CancelFunc // the control loops
	wg      sync.WaitGroup     // the switch sessions
	loopsWG sync.WaitGroup
	once    sync.Once
}

// StartController dials and programs every switch (pipeline, partitions,
// nodes), starts the control loops, the gossip member and the gRPC API; ctx
// bounds the setup, and the controller runs until Close. A switch that
// restarts, or whose stream breaks, gets the pipeline and the whole state
// again.
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
	// With no switches the controller serves host agents only (through
	// its API), and needs no P4Info.
	schema := cfg.Schema
	if schema == nil && len(cfg.Switches) > 0 {
		if schema, err = p4rt.LoadSchema(cfg.P4Info); err != nil {
			return nil, err
		}
	}
	lay, err := layout.New(cfg.Layout)
	if err != nil {
		return nil, err
	}
	planes := append([]controller.DataPlane(nil), cfg.Planes...)
	for _, s := range cfg.Switches {
		pl, err := c.dialSwitch(ctx, s, schema, log)
		if err != nil {
			return nil, fmt.Errorf("switch %s: %w", s.Name, err)
		}
		planes = append(planes, pl)
		log.Info("switch programmed", "switch", s.Name, "addr", s.Addr, "device_id", s.DeviceID)
	}
	var qosStore controller.QoSStore
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, err
		}
		qosStore = controller.FileQoSStore{Path: filepath.Join(cfg.DataDir, "qos.json")}
	}
	c.Controller, err = controller.New(controller.Config{
		Layout: lay, Capacity: cfg.Capacity, Round: cfg.Round, Epoch: cfg.CoarseEpoch, PromoteMin: cfg.PromoteMin,
		VSBGroup: cfg.VSBPorts, NodeCapacity: cfg.NodeCapacity, QoSStore: qosStore, Log: log,
	}, planes, &controller.UDPStorage{NoStamp: len(planes) == 0})
	if err != nil {
		return nil, err
	}
	if err := c.Setup(ctx); err != nil {
		return nil, err
	}
	log.Info("partitions installed", "partitions", lay.Partitions(), "nodes", len(lay.Nodes()), "epoch", lay.Epoch())
	if cfg.GossipBind != "" {
		if err := c.startGossip(lctx, cfg, log); err != nil {
			return nil, err
		}
	}
	lis, err := net.Listen("tcp", cfg.API)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	c.api = lis.Addr()
	c.gs = grpc.NewServer()
	api.RegisterControllerServer(c.gs, controller.NewAPI(c.Controller))
	go c.gs.Serve(lis)
	log.Info("API serving", "addr", c.api)
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
	if !cfg.ProgramOnly {
		c.loopsWG.Add(1)
		go func() {
			defer c.loopsWG.Done()
			c.Run(lctx)
		}()
	}
	return c, nil
}

// dialSwitch connects to a switch over P4Runtime and pushes the pipeline.
func (c *Controller) dialSwitch(ctx context.Context, s SwitchEndpoint, schema *p4rt.Schema, log *slog.Logger) (*controller.P4Plane, error) {
	var devCfg []byte
	if s.DeviceConfig != "" {
		var err error
		if devCfg, err = os.ReadFile(s.DeviceConfig); err != nil {
			return nil, err
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var pl *controller.P4Plane
	pc, err := p4rt.Dial(dctx, p4rt.Config{
		Addr: s.Addr, DeviceID: s.DeviceID, Election: s.ElectionID, Log: log,
		// A device that restarted, or a stream that broke, gets the
		// pipeline and the whole state again.
		OnPrimary: func(ctx context.Context, _ *p4rt.Client) error {
			if err := pl.PushPipeline(ctx, devCfg); err != nil {
				return err
			}
			return c.Resync(ctx, pl)
		},
	})
	if err != nil {
		return nil, err
	}
	c.clients = append(c.clients, pc)
	pl = controller.NewP4Plane(s.Name, pc, schema)
	pl.Window = s.WindowNS
	for _, r := range s.Routes {
		rt, err := parseRoute(r)
		if err != nil {
			return nil, err
		}
		pl.Routes = append(pl.Routes, rt)
	}
	if err := pl.PushPipeline(ctx, devCfg); err != nil {
		return nil, err
	}
	return pl, nil
}

// startGossip makes the controller a gossip member: it observes the nodes'
// stats and publishes their expected loads after every coarse epoch. A new
// controller first withdraws any expected load an earlier one published:
// its Setup installed even partition weights, which that load no longer
// describes, so the nodes pace by their own reads until its first epoch.
func (c *Controller) startGossip(ctx context.Context, cfg ControllerConfig, log *slog.Logger) error {
	g, err := gossip.Start(gossip.Config{Name: "controller", Bind: cfg.GossipBind, Seeds: cfg.GossipSeeds, Log: log,
		FailureTimeout: cfg.FailureTimeout,
		OnStats:        func(s gossip.NodeStats) { c.ObserveNodeStats(s) },
		OnMember:       c.MemberChanged})
	if err != nil {
		return err
	}
	c.gossip = g
	c.AttachGossip(g)
	none := map[wire.NodeID][]float64{}
	for _, n := range cfg.Layout.Nodes {
		none[n.ID] = nil
	}
	if err := c.PublishExpected(none); err != nil {
		return err
	}
	c.loopsWG.Add(2)
	go func() {
		defer c.loopsWG.Done()
		c.RunGossip(ctx)
	}()
	go func() {
		defer c.loopsWG.Done()
		c.RunReconfig(ctx)
	}()
	log.Info("gossip serving", "addr", g.Addr())
	return nil
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
