package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/nodeauth"
)

func controllerCmd() *cobra.Command {
	var cfgPath, gBind, gSeeds, apiAddr, metrics string
	var raftID, raftBind, raftPeers, dataDir, keyFile string
	var spareAfter time.Duration
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
  spare_after: 30s       # a node down this long is replaced by spares (0: never)
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

Relative paths (p4info, device_config, data_dir, certificates, the token
file) are the config file's directory's. Unknown keys, node id 0 and
duplicate ids or addresses are refused in one line naming the field.
tls: {cert: api.pem, key: api-key.pem} serves the API over TLS (add ca: to
require client certificates signed by it); without it the controller warns
when the API listens beyond loopback. api_token_file: FILE makes the calls
that change state (pin, unpin, weights, qos set and rm) need that token
(netdir ctl --token-file). A switch entry's tls: {ca, cert, key} is for a
P4Runtime server that speaks TLS. A switch that is not up yet is waited
for, retried from 100ms to every 5s, with one log line when the waiting
starts and one when it answers.

The controller gossips (hashicorp/memberlist) on --gossip: nodes started with
--gossip-seeds at that address send it their stats per tree (read latency,
request counts, compaction debt; exported as netdir_controller_node_* metrics
and read by the coarse loop), and it sends each node its expected load per
tree after every coarse epoch.

Three controllers replicate their state (the layout, the directory and its
pins, the partition weights, the tenants' QoS policies) with raft: give each
--raft-id, --raft-bind, the same --raft-peers and its own --data, --api,
--gossip and --metrics (or the raft: key: {id, bind, data, peers: [{id,
raft, api}]}). Only the leader programs the switches, as their P4Runtime
primary with an election id above every earlier leader's, and runs the
loops; the others refuse the API's calls, naming the leader. Nodes (netdir
node --controller A,B,C) and netdir ctl --controller A,B,C find the leader.
A controller that dies is replaced by a new leader within about a second;
restarted with the same --data, it rejoins as a follower:

  netdir controller --config c.yaml --api 127.0.0.1:7401 --metrics "" \
    --gossip 127.0.0.1:7947 --raft-id c1 --raft-bind 127.0.0.1:7601 --data /tmp/c1 \
    --raft-peers c1=127.0.0.1:7601/127.0.0.1:7401,c2=127.0.0.1:7602/127.0.0.1:7402,c3=127.0.0.1:7603/127.0.0.1:7403`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := cluster.LoadControllerConfig(cfgPath)
			if err != nil {
				return err
			}
			cfg.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			cfg.GossipBind, cfg.GossipSeeds = gBind, parseList(gSeeds)
			if cmd.Flags().Changed("api") {
				cfg.API = apiAddr
			}
			if cmd.Flags().Changed("metrics") {
				cfg.Metrics = metrics
			}
			if cmd.Flags().Changed("spare-after") {
				cfg.SpareAfter = spareAfter
			}
			if keyFile != "" || cfg.ClusterKeyFile == "" {
				if cfg.ClusterKeyFile, err = nodeauth.KeyFilePath(keyFile); err != nil {
					cfg.Log.Warn("promote and demote go unsealed: nodes holding a cluster key refuse them", "err", err)
				}
			}
			if raftID != "" {
				peers, err := parsePeers(raftPeers)
				if err != nil {
					return err
				}
				cfg.Raft = &controller.RaftConfig{ID: raftID, Bind: raftBind, Dir: dataDir, Peers: peers}
			}
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
	cmd.Flags().StringVar(&apiAddr, "api", "", "gRPC API address (default: the config's api)")
	cmd.Flags().StringVar(&metrics, "metrics", "", "Prometheus /metrics address (default: the config's metrics; empty: off)")
	cmd.Flags().StringVar(&raftID, "raft-id", "", "this controller's raft id, one of --raft-peers (empty: a lone controller)")
	cmd.Flags().StringVar(&raftBind, "raft-bind", "", "raft's TCP address, this controller's in --raft-peers")
	cmd.Flags().StringVar(&raftPeers, "raft-peers", "", "every controller as ID=RAFT_ADDR/API_ADDR, comma-separated")
	cmd.Flags().DurationVar(&spareAfter, "spare-after", cluster.DefaultSpareAfter,
		"after a node has been down this long, spares take its place in each of its chains, filled at the nodes' --sync-mib (0: never; default the config's spare_after)")
	cmd.Flags().StringVar(&keyFile, "cluster-key-file", "", "cluster key file (netdir keygen) sealing promote and demote (default: the config's cluster_key_file, else $"+nodeauth.EnvKeyFile+")")
	cmd.Flags().StringVar(&dataDir, "data", "", "directory of the raft log and snapshots (empty: in memory, lost on exit)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// parsePeers reads --raft-peers: ID=RAFT_ADDR/API_ADDR, comma-separated
// (the API address may be left out; a follower then cannot name it).
func parsePeers(s string) ([]controller.RaftPeer, error) {
	var peers []controller.RaftPeer
	for _, p := range parseList(s) {
		id, addrs, ok := strings.Cut(p, "=")
		if !ok || id == "" || addrs == "" {
			return nil, fmt.Errorf("--raft-peers: %q: want ID=RAFT_ADDR/API_ADDR", p)
		}
		raftAddr, apiAddr, _ := strings.Cut(addrs, "/")
		peers = append(peers, controller.RaftPeer{ID: id, Raft: raftAddr, API: apiAddr})
	}
	if len(peers) == 0 {
		return nil, errors.New("--raft-id needs --raft-peers")
	}
	return peers, nil
}
