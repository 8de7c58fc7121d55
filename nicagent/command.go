package nicagent

import (
	"encoding/hex"
	"encoding/json"
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
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/grpcsec"
	"github.com/netdir/netdir/wire"
)

// Command is `netdir agent`: the host agent as a command.
func Command() *cobra.Command {
	var (
		iface, ctl, service, policy, xdpMode, metrics string
		router, noRoute, verbose                      bool
		slots                                         int
		reportEvery                                   time.Duration
		ctlTLS                                        grpcsec.TLS
	)
	cmd := &cobra.Command{
		Use:   "agent --iface IF --controller ADDR",
		Short: "Run the eBPF host agent: the directory on this host's NIC (XDP + TC)",
		Long: `Run the eBPF host agent on interface IF (root). It loads netdir's XDP
(ingress) and TC (tcx egress) programs, attaches them to IF (native XDP, else
generic), subscribes to the controller's directory at ADDR (its gRPC API;
with replicated controllers, ADDR lists them all, comma-separated, and the
agent subscribes and reports at the raft leader, following a follower's
refusal to it) and keeps the programs' maps in step: a snapshot, then
deltas, resubscribing on any error.

Clients on this host send requests to the service address (--service,
default ` + DefaultService.String() + `); the agent routes that address out of IF and its TC
program rewrites each request to a storage node chosen by the directory and
the partition table: linearizable reads to chain members, stale-ok reads to
fresh extras too, writes to the chain head. Node MACs come from the
neighbour table. Replies and VSBs (send them to this host's address, port
7420) teach the XDP program node load and latency and key freshness. Every
--report-every the agent reports each directory key's hits and the growth of
its miss sketch to the controller, whose hot-key loop counts them.

--metrics ADDR also serves /directory: every slot as the maps hold it
(JSON: key_hash, locations, chain_length, fresh, ver_next, ver_done,
buckets, hits), to compare with other planes.

--router runs the contract's ToR mode instead, for a host on the path of all
of its keys' traffic: XDP routes requests arriving on IF and sends them back
out, and writes are stamped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if iface == "" || ctl == "" {
				return errors.New("agent: --iface and --controller are required")
			}
			svc, err := netip.ParseAddrPort(service)
			if err != nil {
				return fmt.Errorf("agent: --service: %w", err)
			}
			pol, err := directory.ParsePolicy(policy)
			if err != nil {
				return err
			}
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			if err := ctlTLS.Check("--controller-ca/cert/key", false); err != nil {
				return fmt.Errorf("agent: %w", err)
			}
			tlsOpt, err := ctlTLS.DialOption()
			if err != nil {
				return fmt.Errorf("agent: %w", err)
			}
			a, err := New(Config{
				Iface: iface, Controller: ctl, Service: svc, NoServiceRoute: noRoute, Policy: pol,
				Router: router, XDPMode: xdpMode, Options: Options{SlotCap: slots}, ReportEvery: reportEvery, Log: log,
				DialOptions: []grpc.DialOption{tlsOpt},
			})
			if err != nil {
				return err
			}
			defer a.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if metrics != "" {
				reg := prometheus.NewRegistry()
				reg.MustRegister(NewCollector(a))
				lis, err := net.Listen("tcp", metrics)
				if err != nil {
					return fmt.Errorf("agent: metrics: %w", err)
				}
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				mux.HandleFunc("/directory", func(w http.ResponseWriter, _ *http.Request) { serveDirectory(w, a.Dataplane()) })
				srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
				go srv.Serve(lis)
				defer srv.Close()
				log.Info("metrics", "addr", lis.Addr().String())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "agent on %s (XDP %s, TCX egress), service %s, controller %s\n",
				iface, a.XDPMode(), svc, ctl)
			return a.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface to attach to (required)")
	cmd.Flags().StringVar(&ctl, "controller", "", "controller gRPC API address, or every controller comma-separated: the agent follows the raft leader (required)")
	cmd.Flags().StringVar(&service, "service", DefaultService.String(), "service address clients on this host send to")
	cmd.Flags().BoolVar(&noRoute, "no-service-route", false, "do not install the service address's route and neighbour entry")
	cmd.Flags().StringVar(&policy, "policy", "netdir", "replica choice: netdir, pegasus, replicas or static")
	cmd.Flags().BoolVar(&router, "router", false, "ToR mode: route requests arriving on IF too (XDP_TX) and stamp writes")
	cmd.Flags().StringVar(&xdpMode, "xdp-mode", "auto", "XDP attach mode: auto (native, else generic), native or generic")
	cmd.Flags().StringVar(&metrics, "metrics", "", "serve Prometheus /metrics on this address (off when empty)")
	cmd.Flags().IntVar(&slots, "slots", 4096, "directory capacity of the maps")
	cmd.Flags().DurationVar(&reportEvery, "report-every", 500*time.Millisecond, "how often to report slot hits and the miss sketch to the controller (match its round; negative: never)")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "debug logging")
	cmd.Flags().StringVar(&ctlTLS.CA, "controller-ca", "", "CA that signed the controller API's certificate (PEM): TLS (empty: plaintext)")
	cmd.Flags().StringVar(&ctlTLS.Cert, "controller-cert", "", "client certificate (PEM), for a controller that asks for one")
	cmd.Flags().StringVar(&ctlTLS.Key, "controller-key", "", "the client certificate's key (PEM)")
	return cmd
}

// SlotJSON is one slot of the agent's maps as /directory serves it.
type SlotJSON struct {
	KeyHash     string        `json:"key_hash"` // hex, 32 digits
	Locations   []wire.NodeID `json:"locations"`
	ChainLength uint8         `json:"chain_length"`
	Fresh       uint32        `json:"fresh"` // bit i: locations[i]
	VerNext     uint64        `json:"ver_next"`
	VerDone     uint64        `json:"ver_done"`
	Incarnation uint16        `json:"incarnation"` // the one its writes are stamped in (wire/stamp.go)
	Buckets     []int         `json:"buckets"`     // indices into locations (ints: JSON writes bytes as base64)
	Hits        uint64        `json:"hits"`
}

// serveDirectory writes every slot of the maps as JSON, by KeyHash.
func serveDirectory(w http.ResponseWriter, d *Dataplane) {
	out := []SlotJSON{}
	for _, h := range d.Keys() {
		s, ok, err := d.Lookup(h)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if !ok {
			continue // evicted since Keys
		}
		b := make([]int, len(s.Buckets))
		for i, x := range s.Buckets {
			b[i] = int(x)
		}
		out = append(out, SlotJSON{KeyHash: hex.EncodeToString(h[:]), Locations: s.Locs[:s.N], ChainLength: s.R,
			Fresh: s.Fresh, VerNext: s.VerNext, VerDone: s.VerDone, Incarnation: s.Inc, Buckets: b, Hits: s.Hits})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}
