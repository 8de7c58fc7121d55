package main

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
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"gopkg.in/yaml.v3"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/layout"
)

// controllerConfig is `netdir controller --config FILE`: the controller's
// own keys, and the cluster layout's inline.
type controllerConfig struct {
	API         string        `yaml:"api"`     // gRPC API (netdir ctl, nodes, agents)
	Metrics     string        `yaml:"metrics"` // Prometheus /metrics; empty: off
	Round       time.Duration `yaml:"round"`
	CoarseEpoch time.Duration `yaml:"coarse_epoch"` // HATS coarse loop; 0: 60s
	PromoteMin  uint64        `yaml:"promote_min"`
	Capacity    int           `yaml:"capacity"`
	P4Info      string        `yaml:"p4info"`
	Switches    []struct {
		Name         string `yaml:"name"`
		Addr         string `yaml:"addr"`
		DeviceID     uint64 `yaml:"device_id"`
		ElectionID   uint64 `yaml:"election_id"`
		DeviceConfig string `yaml:"device_config"` // BMv2 JSON or Tofino binary; empty: keep the device's pipeline config
		WindowNS     uint64 `yaml:"window_ns"`     // fine-score ranges to install; 0 for the software data plane
		// Routes are the switch's static IPv4 routes (replies to clients,
		// node-to-node traffic), installed with the rest of its state.
		Routes []struct {
			Prefix string `yaml:"prefix"` // e.g. 10.0.1.1/32
			Port   uint32 `yaml:"port"`
			SMAC   string `yaml:"smac"`
			DMAC   string `yaml:"dmac"`
		} `yaml:"routes"`
	} `yaml:"switches"`
	VSBPorts []uint32      `yaml:"vsb_ports"`
	Layout   layout.Config `yaml:",inline"`

	layout      *layout.Map
	gossipBind  string   // --gossip
	gossipSeeds []string // --gossip-seeds
}

func loadControllerConfig(path string) (*controllerConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &controllerConfig{API: "127.0.0.1:7400", P4Info: "p4/build/netdir.p4info.txtpb"}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.layout, err = layout.New(c.Layout); err != nil {
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

func controllerCmd() *cobra.Command {
	var cfgPath, gBind, gSeeds string
	cmd := &cobra.Command{
		Use:   "controller --config FILE",
		Short: "Run the controller: program switches over P4Runtime and promote hot keys",
		Long: `Run the controller. It pushes the netdir pipeline to every switch over
P4Runtime (the software data plane of ` + "`netdir switch`" + `, BMv2 or Tofino alike),
installs the cluster layout's partitions and node addresses and the VSB
group, promotes and evicts hot keys every round, and sets the split weights of
partitions and hot keys every coarse epoch (HATS coarse scheduling, 5s to
120s). It serves its gRPC API (netdir ctl, node reports, agent subscriptions,
and the layout to nodes and switches started with --controller) and
Prometheus metrics.

FILE is YAML: the controller's keys, then the cluster layout's (epoch,
partition_bits, replicas, dataplane, nodes, chains; see netdir node --help):

  api: 127.0.0.1:7400
  metrics: 127.0.0.1:9400
  round: 500ms
  coarse_epoch: 60s
  p4info: p4/build/netdir.p4info.txtpb
  switches:
    - {name: tor1, addr: 127.0.0.1:9559, device_id: 1, election_id: 1}
  epoch: 1
  partition_bits: 10
  replicas: 3
  nodes:
    - {id: 1, addr: 127.0.0.1:7501}
    - {id: 2, addr: 127.0.0.1:7502}
    - {id: 3, addr: 127.0.0.1:7503}

A BMv2 or Tofino switch also takes device_config (the BMv2 JSON,
p4/build/netdir.json), window_ns (fine-score ranges, e.g. 1000000) and its
static routes, installed with the rest of its state (so again after a
reconnect): routes: [{prefix: 10.0.1.1/32, port: 1, smac: 02:4e:44:ff:ff:fe,
dmac: 02:4e:44:01:00:01}]. Nodes behind a switch give its port and their mac
in the layout: {id: 1, addr: 10.0.1.1:7420, port: 1, mac: 02:4e:44:01:00:01}.

The controller gossips (hashicorp/memberlist) on --gossip: nodes started with
--gossip-seeds at that address send it their stats per tree (read latency,
request counts, compaction debt; exported as netdir_controller_node_* metrics
and read by the coarse loop), and it sends each node its expected load per
tree after every coarse epoch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadControllerConfig(cfgPath)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.gossipBind, cfg.gossipSeeds = gBind, parseList(gSeeds)
			return runController(ctx, cfg, log)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "controller YAML (required)")
	cmd.Flags().StringVar(&gBind, "gossip", gossip.DefaultControllerBind, "gossip (memberlist) bind address, the nodes' --gossip-seeds (empty: no gossip)")
	cmd.Flags().StringVar(&gSeeds, "gossip-seeds", "", "comma list of gossip members to join (nodes find the controller; it needs none)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func runController(ctx context.Context, cfg *controllerConfig, log *slog.Logger) error {
	// With no switches the controller serves host agents only (through
	// its API), and needs no P4Info.
	var schema *p4rt.Schema
	var err error
	if len(cfg.Switches) > 0 {
		if schema, err = p4rt.LoadSchema(cfg.P4Info); err != nil {
			return err
		}
	}
	var planes []controller.DataPlane
	var clients []*p4rt.Client
	var ctl *controller.Controller // set below; reconnects re-sync through it
	for _, s := range cfg.Switches {
		var devCfg []byte
		if s.DeviceConfig != "" {
			if devCfg, err = os.ReadFile(s.DeviceConfig); err != nil {
				return err
			}
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var pl *controller.P4Plane
		c, err := p4rt.Dial(dctx, p4rt.Config{
			Addr: s.Addr, DeviceID: s.DeviceID, Election: s.ElectionID, Log: log,
			// A device that restarted, or a stream that broke, gets the
			// pipeline and the whole state again.
			OnPrimary: func(ctx context.Context, _ *p4rt.Client) error {
				if err := pl.PushPipeline(ctx, devCfg); err != nil {
					return err
				}
				return ctl.Resync(ctx, pl)
			},
		})
		cancel()
		if err != nil {
			return fmt.Errorf("switch %s: %w", s.Name, err)
		}
		defer c.Close()
		pl = controller.NewP4Plane(s.Name, c, schema)
		pl.Window = s.WindowNS
		for _, r := range s.Routes {
			rt, err := parseRoute(r.Prefix, r.Port, r.SMAC, r.DMAC)
			if err != nil {
				return fmt.Errorf("switch %s: %w", s.Name, err)
			}
			pl.Routes = append(pl.Routes, rt)
		}
		if err := pl.PushPipeline(ctx, devCfg); err != nil {
			return fmt.Errorf("switch %s: %w", s.Name, err)
		}
		planes = append(planes, pl)
		clients = append(clients, c)
		log.Info("switch programmed", "switch", s.Name, "addr", s.Addr, "device_id", s.DeviceID)
	}
	ctl, err = controller.New(controller.Config{
		Layout: cfg.layout, Capacity: cfg.Capacity,
		Round: cfg.Round, Epoch: cfg.CoarseEpoch, PromoteMin: cfg.PromoteMin, VSBGroup: cfg.VSBPorts, Log: log,
	}, planes, &controller.UDPStorage{NoStamp: len(planes) == 0})
	if err != nil {
		return err
	}
	if err := ctl.Setup(ctx); err != nil {
		return err
	}
	if cfg.gossipBind != "" {
		g, err := gossip.Start(gossip.Config{Name: "controller", Bind: cfg.gossipBind, Seeds: cfg.gossipSeeds, Log: log,
			OnStats: func(s gossip.NodeStats) { ctl.ObserveNodeStats(s) }})
		if err != nil {
			return err
		}
		defer g.Close()
		ctl.AttachGossip(g)
		go ctl.RunGossip(ctx)
		log.Info("gossip serving", "addr", g.Addr())
	}
	log.Info("partitions installed", "partitions", cfg.layout.Partitions(), "nodes", len(cfg.layout.Nodes()),
		"epoch", cfg.layout.Epoch())

	gs, apiAddr, err := serveAPI(ctl, cfg.API)
	if err != nil {
		return err
	}
	defer gs.Stop()
	log.Info("API serving", "addr", apiAddr)

	if cfg.Metrics != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), controller.NewCollector(ctl), controller.NewStatsCollector(ctl))
		srv := &http.Server{Addr: cfg.Metrics, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics", "err", err)
			}
		}()
		defer srv.Close()
		log.Info("metrics serving", "addr", cfg.Metrics)
	}
	for _, c := range clients {
		go c.Run(ctx)
	}
	err = ctl.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// serveAPI serves ctl's gRPC API on addr until the server stops.
func serveAPI(ctl *controller.Controller, addr string) (*grpc.Server, net.Addr, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("api: %w", err)
	}
	gs := grpc.NewServer()
	api.RegisterControllerServer(gs, controller.NewAPI(ctl))
	go gs.Serve(lis)
	return gs, lis.Addr(), nil
}

// parseRoute reads one switches[].routes entry.
func parseRoute(prefix string, port uint32, smac, dmac string) (controller.Route, error) {
	p, err := netip.ParsePrefix(prefix)
	if err != nil || !p.Addr().Is4() {
		return controller.Route{}, fmt.Errorf("route %q: want an IPv4 prefix", prefix)
	}
	src, err := net.ParseMAC(smac)
	if err != nil {
		return controller.Route{}, fmt.Errorf("route %s: smac: %w", prefix, err)
	}
	dst, err := net.ParseMAC(dmac)
	if err != nil {
		return controller.Route{}, fmt.Errorf("route %s: dmac: %w", prefix, err)
	}
	return controller.Route{Prefix: p, Port: port, SrcMAC: src, DstMAC: dst}, nil
}
