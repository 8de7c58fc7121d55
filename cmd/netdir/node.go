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
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/storagenode/device"
	"github.com/netdir/netdir/wire"
)

func nodeCmd() *cobra.Command {
	var (
		id       uint16
		data     string
		listen   string
		config   string
		metrics  string
		maxOps   float64
		workers  int
		queue    int
		cacheMiB int64
		memMiB   uint64
		budget   int64
		syncMiB  float64
		dev      string
		verbose  bool
		ctlAddr  string
		every    time.Duration
		gBind    string
		gSeeds   string
		gEvery   time.Duration
		sec      apiFlags
		keyFile  string
	)
	cmd := &cobra.Command{
		Use:   "node --id N --data DIR (--config FILE | --controller ADDR)",
		Short: "Run a storage node (Pebble trees in CRAQ chains)",
		Long: `Run a storage node. It reads the cluster layout from --config FILE or, without
one, fetches it from the controller (--controller). The layout is YAML, the
one node-table format of every command (netdir ctl layout prints the
controller's):

  epoch: 1
  partition_bits: 10          # 1024 partitions
  replicas: 3                 # chain length R
  dataplane: 127.0.0.1:7420   # where VSBs go (optional)
  nodes:                      # port and mac: for P4 switches (optional)
    - {id: 1, addr: 127.0.0.1:7501}
    - {id: 2, addr: 127.0.0.1:7502}
    - {id: 3, addr: 127.0.0.1:7503, port: 3, mac: 02:4e:44:01:00:03}
  chains:                     # overrides of ring placement (optional)
    7: [3, 1, 2]              # partition: node ids, head first

Unless overridden, partition p's chain is R consecutive nodes, in order of
id, starting at p mod n (ring placement).

--device ssd|hdd puts the trees on an emulated storage device for
one-machine experiments: reads that miss the block cache, WAL writes, flushes
and compactions share its queue, as on a disk, and every client request
pays the node's emulated processor (1.75 ms on the ssd, so cache hits too
are bounded, at about 571/s), all scaled in time so that many nodes fit on
a few cores. --max-ops caps client requests per second with a
token bucket instead, the older capacity model. Leave both off in production.

With --gossip-seeds (the controller's --gossip address, e.g. 127.0.0.1:7946)
the node gossips its stats with hashicorp/memberlist every --gossip-every: per
tree (chain position) the reads, writes and mean read latency (HATS T and C)
and Pebble's compaction debt, versioned; and it paces its compactions by the
expected load per tree that the controller gossips back.

--cluster-key-file (or $NETDIR_CLUSTER_KEY_FILE) is the cluster key (netdir
keygen): node ops (chain writes, acks, copies, promote, demote, sync, stats)
are sealed with an HMAC and accepted only from a node of the layout at its
address, or from a controller, with a valid MAC and a fresh counter.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" || id == 0 {
				return errors.New("node: --id and --data are required")
			}
			profile, err := device.Parse(dev)
			if err != nil {
				return fmt.Errorf("node: --device: %w", err)
			}
			dial, err := sec.dialOptions()
			if err != nil {
				return err
			}
			m, err := loadLayout(cmd.Context(), "--config", config, ctlAddr, dial...)
			if err != nil {
				return err
			}
			if _, ok := m.Node(wire.NodeID(id)); !ok {
				from := config
				if from == "" {
					from = "the controller's layout"
				}
				return fmt.Errorf("--id %d: not in the nodes of %s (ids %v)", id, from, m.Nodes())
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			keyFile, err := nodeauth.KeyFilePath(keyFile)
			if err != nil {
				log.Warn("node ops are not authenticated: any host that can reach the node can send them", "err", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			n, err := cluster.StartNode(ctx, cluster.NodeConfig{
				Storage: storagenode.Options{
					ID: wire.NodeID(id), Dir: data, Layout: m, Listen: listen,
					Workers: workers, QueueLen: queue, MaxOps: maxOps, Device: profile,
					CacheBytes: cacheMiB << 20, MemTableBytes: memMiB << 20,
					CompactionBudget: budget << 20, SyncRate: syncRate(syncMiB),
				},
				Metrics: metrics, Controller: ctlAddr, ControllerTLS: &sec.tls, ReportEvery: every,
				GossipBind: gBind, GossipSeeds: parseList(gSeeds), GossipEvery: gEvery, Log: log,
				ClusterKeyFile: keyFile,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %d listening on %s\n", id, n.Addr())
			if a := n.GossipAddr(); a != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "node %d gossiping on %s (seeds %s)\n", id, a, strings.Join(parseList(gSeeds), ","))
			}
			<-ctx.Done()
			return n.Close()
		},
	}
	f := cmd.Flags()
	f.Uint16Var(&id, "id", 0, "this node's id in the config's node table")
	f.StringVar(&data, "data", "", "data directory (one Pebble tree per chain position)")
	f.StringVar(&listen, "listen", "", "UDP address to bind (default: this node's address in the config)")
	f.StringVar(&config, "config", "", "the cluster layout's YAML file (default: fetch it from --controller)")
	f.StringVar(&metrics, "metrics", "", "serve Prometheus metrics on this HTTP address (e.g. 127.0.0.1:9101)")
	f.Float64Var(&maxOps, "max-ops", 0, "emulation knob: cap client requests/s with a token bucket (0: unlimited)")
	f.IntVar(&workers, "workers", storagenode.DefaultWorkers, "shard workers")
	f.IntVar(&queue, "queue", storagenode.DefaultQueueLen, "queue length per worker (full: ERR queue-full)")
	f.Int64Var(&cacheMiB, "cache-mib", storagenode.DefaultCacheBytes>>20, "Pebble block cache, shared by the trees (MiB)")
	f.Uint64Var(&memMiB, "memtable-mib", storagenode.DefaultMemTableBytes>>20, "memtable size per tree (MiB)")
	f.StringVar(&dev, "device", "none", "emulated storage device beneath the trees for one-machine experiments: ssd or hdd "+
		"(real devices' ratios, scaled in time), or none (the real disk only)")
	f.Int64Var(&budget, "compaction-mib", 0, "node compaction budget (MiB/s; 0: the device's, 64 MiB/s with none, scaled like the device otherwise)")
	f.Float64Var(&syncMiB, "sync-mib", float64(storagenode.DefaultSyncRate)/(1<<20),
		"catch-up copy rate (MiB/s): a restart's recovery, a rejoin, a spare's fill (0: unpaced)")
	f.BoolVar(&verbose, "v", false, "log at info level")
	f.StringVar(&keyFile, "cluster-key-file", "", "cluster key file (netdir keygen) sealing node ops; reloaded on SIGHUP or change (default $"+nodeauth.EnvKeyFile+")")
	f.StringVar(&ctlAddr, "controller", "", "controller API address to report hot keys and tree stats to, and to fetch the layout from without --config (empty: don't)")
	f.DurationVar(&every, "report-every", cluster.DefaultReportEvery, "hot-key report interval (match the controller's round)")
	f.StringVar(&gBind, "gossip", gossip.DefaultNodeBind, "gossip (memberlist) bind address; port 0 picks a free one")
	f.StringVar(&gSeeds, "gossip-seeds", "", "comma list of gossip members to join, e.g. the controller's "+gossip.DefaultControllerBind+" (empty: no gossip)")
	sec.register(f, "controller-", false)
	f.DurationVar(&gEvery, "gossip-every", gossip.DefaultInterval, "how often the node gossips a new version of its stats")
	return cmd
}

// syncRate is --sync-mib as storagenode.Options.SyncRate.
func syncRate(mib float64) int64 {
	if mib <= 0 {
		return storagenode.Unthrottled
	}
	return int64(mib * (1 << 20))
}
