package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/storagenode"
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
		verbose  bool
		ctlAddr  string
		every    time.Duration
		gBind    string
		gSeeds   string
		gEvery   time.Duration
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

--max-ops is an emulation knob for one-machine experiments: it caps client
requests per second with a token bucket so that a loopback node behaves like a
node of that capacity. Leave it 0 in production.

With --gossip-seeds (the controller's --gossip address, e.g. 127.0.0.1:7946)
the node gossips its stats with hashicorp/memberlist every --gossip-every: per
tree (chain position) the reads, writes and mean read latency (HATS T and C)
and Pebble's compaction debt, versioned; and it paces its compactions by the
expected load per tree that the controller gossips back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" || id == 0 {
				return errors.New("node: --id and --data are required")
			}
			m, err := loadLayout(cmd.Context(), "--config", config, ctlAddr)
			if err != nil {
				return err
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			n, err := storagenode.Start(storagenode.Options{
				ID: wire.NodeID(id), Dir: data, Layout: m, Listen: listen,
				Workers: workers, QueueLen: queue, MaxOps: maxOps,
				CacheBytes: cacheMiB << 20, MemTableBytes: memMiB << 20,
				CompactionBudget: budget << 20, Logger: log,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %d listening on %s\n", id, n.Addr())
			if metrics != "" {
				reg := prometheus.NewRegistry()
				reg.MustRegister(n.Collector())
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				go func() {
					if err := http.ListenAndServe(metrics, mux); err != nil {
						log.Error("metrics", "err", err)
					}
				}()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if ctlAddr != "" {
				go reportHotKeys(ctx, n, ctlAddr, every, log)
			}
			if seeds := parseList(gSeeds); len(seeds) > 0 {
				g, err := gossip.Start(gossip.Config{Name: fmt.Sprintf("node-%d", id), Bind: gBind, Seeds: seeds, Log: log})
				if err != nil {
					n.Close()
					return err
				}
				defer g.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "node %d gossiping on %s (seeds %s)\n", id, g.Addr(), strings.Join(seeds, ","))
				go n.RunGossip(ctx, g, gEvery)
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
	f.Int64Var(&budget, "compaction-mib", storagenode.DefaultCompactionBudget>>20, "node compaction budget (MiB/s)")
	f.BoolVar(&verbose, "v", false, "log at info level")
	f.StringVar(&ctlAddr, "controller", "", "controller API address to report hot keys to, and to fetch the layout from without --config (empty: don't)")
	f.DurationVar(&every, "report-every", 500*time.Millisecond, "hot-key report interval (match the controller's round)")
	f.StringVar(&gBind, "gossip", gossip.DefaultNodeBind, "gossip (memberlist) bind address; port 0 picks a free one")
	f.StringVar(&gSeeds, "gossip-seeds", "", "comma list of gossip members to join, e.g. the controller's "+gossip.DefaultControllerBind+" (empty: no gossip)")
	f.DurationVar(&gEvery, "gossip-every", gossip.DefaultInterval, "how often the node gossips a new version of its stats")
	return cmd
}

// reportHotKeys names the keys this node served most to the controller each
// interval: data planes count by hash, and only nodes know the keys.
func reportHotKeys(ctx context.Context, n *storagenode.Node, addr string, every time.Duration, log *slog.Logger) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Error("controller", "addr", addr, "err", err)
		return
	}
	defer conn.Close()
	c := api.NewControllerClient(conn)
	t := time.NewTicker(every)
	defer t.Stop()
	for version := uint64(1); ; version++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r := &api.NodeStats{Node: uint32(n.ID()), Version: version, QueueDepth: uint32(n.Stats().Load)}
		for _, kc := range n.HotKeys(32) {
			r.HotKeys = append(r.HotKeys, &api.KeyCount{Key: kc.Key, Count: kc.Count})
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		if _, err := c.ReportStats(rctx, r); err != nil && ctx.Err() == nil {
			log.Warn("hot-key report", "controller", addr, "err", err)
		}
		cancel()
	}
}
