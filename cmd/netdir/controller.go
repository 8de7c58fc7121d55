package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/gossip"
)

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
  data_dir: /var/lib/netdir/controller
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
node_capacity (requests/s, the nodes' --max-ops) bounds each node's rate for
the coarse loop where read latency does not. data_dir keeps the controller's
state across restarts: the tenants and their QoS policies (netdir ctl qos),
in data_dir/qos.json; without it they live in memory only.

The controller gossips (hashicorp/memberlist) on --gossip: nodes started with
--gossip-seeds at that address send it their stats per tree (read latency,
request counts, compaction debt; exported as netdir_controller_node_* metrics
and read by the coarse loop), and it sends each node its expected load per
tree after every coarse epoch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := cluster.LoadControllerConfig(cfgPath)
			if err != nil {
				return err
			}
			cfg.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			cfg.GossipBind, cfg.GossipSeeds = gBind, parseList(gSeeds)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := cluster.StartController(ctx, *cfg)
			if err != nil {
				return err
			}
			<-ctx.Done()
			return c.Close()
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "controller YAML (required)")
	cmd.Flags().StringVar(&gBind, "gossip", gossip.DefaultControllerBind, "gossip (memberlist) bind address, the nodes' --gossip-seeds (empty: no gossip)")
	cmd.Flags().StringVar(&gSeeds, "gossip-seeds", "", "comma list of gossip members to join (nodes find the controller; it needs none)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
