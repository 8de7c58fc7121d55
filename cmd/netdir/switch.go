package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/grpcsec"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/wire"
)

func switchCmd() *cobra.Command {
	var (
		listen, layoutFile string
		ctlAddr, p4rtAddr  string
		metrics, mirror    string
		deviceID           uint64
		slots              int
		sec                apiFlags
		p4rtTLS            grpcsec.TLS
	)
	cmd := &cobra.Command{
		Use:   "switch (--nodes FILE | --controller ADDR) [--listen ADDR]",
		Short: "Run the software data plane: the directory behind a UDP socket",
		Long: `Run the software data plane on a UDP address. Clients send requests there;
the switch forwards each to a storage node and relays the node's reply back.

FILE is the cluster layout that the nodes read (see netdir node --help);
with --controller instead, the switch fetches the layout from the controller.
Every partition gets the layout's chain and an even split, until a controller
reprograms it over P4Runtime (--p4runtime, the same calls that program BMv2
and Tofino). Counters are logged every 10s; SIGINT or SIGTERM stops the
switch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dial, err := sec.dialOptions()
			if err != nil {
				return err
			}
			if err := p4rtTLS.Check("--p4runtime-cert/key/ca", true); err != nil {
				return err
			}
			m, err := loadLayout(cmd.Context(), "--nodes", layoutFile, ctlAddr, dial...)
			if err != nil {
				return err
			}
			var mirrorTo netip.AddrPort
			if mirror != "" {
				if mirrorTo, err = netip.ParseAddrPort(mirror); err != nil {
					return fmt.Errorf("--mirror: %w", err)
				}
			}
			sw, err := cluster.StartSwitch(cluster.SwitchConfig{
				Listen: listen, Directory: directory.Config{PartitionBits: m.Bits(), Slots: slots}, Layout: m,
				P4Runtime: p4rtAddr, DeviceID: deviceID, Metrics: metrics, Mirror: mirrorTo, P4RuntimeTLS: &p4rtTLS,
			})
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			if a := sw.P4RuntimeAddr(); a != "" {
				log.Info("P4Runtime serving", "addr", a, "device_id", deviceID, "tls", p4rtTLS.Enabled())
				if !p4rtTLS.Enabled() && !grpcsec.Loopback(a) {
					log.Warn("P4Runtime listening beyond loopback without TLS: give --p4runtime-cert and --p4runtime-key", "addr", a)
				}
			}
			log.Info("switch serving", "addr", sw.Addr(), "nodes", len(m.Nodes()), "partitions", m.Partitions(),
				"replicas", m.R(), "epoch", m.Epoch(), "slots", sw.DirectoryConfig().Slots)

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			tick := time.NewTicker(10 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					log.Info("counters", summary(sw.Switch)...)
				case <-sw.Done():
					log.Info("switch stopped", summary(sw.Switch)...)
					return sw.Close()
				case <-ctx.Done():
					err := sw.Close()
					log.Info("switch stopped", summary(sw.Switch)...)
					return err
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", fmt.Sprintf("127.0.0.1:%d", wire.ServicePort), "UDP address to serve on")
	f.StringVar(&layoutFile, "nodes", "", "the cluster layout's YAML file")
	f.StringVar(&ctlAddr, "controller", "", "controller API address to fetch the layout from, instead of --nodes")
	sec.register(f, "controller-", false)
	f.IntVar(&slots, "slots", 4096, "directory capacity D (hot keys)")
	f.StringVar(&p4rtAddr, "p4runtime", "127.0.0.1:9559", "serve P4Runtime here for the controller (empty: don't)")
	f.Uint64Var(&deviceID, "device-id", 1, "P4Runtime device id")
	f.StringVar(&p4rtTLS.Cert, "p4runtime-cert", "", "serve P4Runtime over TLS with this certificate (PEM; empty: plaintext)")
	f.StringVar(&p4rtTLS.Key, "p4runtime-key", "", "the P4Runtime certificate's key (PEM)")
	f.StringVar(&p4rtTLS.CA, "p4runtime-ca", "", "ask the controller for a certificate this CA signed (PEM; mutual TLS)")
	f.StringVar(&metrics, "metrics", "", "serve Prometheus metrics on this HTTP address (e.g. 127.0.0.1:9102)")
	f.StringVar(&mirror, "mirror", "", "send a copy of every datagram received to this UDP address (netdir capture --mirror)")
	return cmd
}

// summary is the switch's counters as slog attributes; drop reasons and
// model-level drops appear only when non-zero.
func summary(sw *model.Switch) []any {
	c, st := sw.Counters()
	attrs := []any{
		"received", st.Received, "forwarded", st.Forwarded, "relayed", st.Relayed, "vsb_copies", st.VSBCopies,
		"hits", c.Hits, "misses", c.Misses, "replies", c.Replies, "vsbs", c.VSBs, "drops", c.DropTotal,
	}
	for _, r := range directory.Reasons() {
		if c.Drops[r] != 0 {
			attrs = append(attrs, "drop_"+strings.ReplaceAll(r.String(), "-", "_"), c.Drops[r])
		}
	}
	for _, x := range []struct {
		name string
		n    uint64
	}{
		{"unknown_reply", st.UnknownReply}, {"node_ops", st.NodeOps}, {"no_node_addr", st.NoNodeAddr},
		{"oversize", st.Oversize}, {"send_errors", st.SendErrors}, {"pending_evicted", st.PendingEvicted},
	} {
		if x.n != 0 {
			attrs = append(attrs, x.name, x.n)
		}
	}
	return attrs
}
