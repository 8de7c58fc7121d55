package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/storagenode/layout"
	"github.com/netdir/netdir/wire"
)

func switchCmd() *cobra.Command {
	var (
		listen, nodesFile string
		p4rtAddr          string
		deviceID          uint64
		bits              uint
		replicas, slots   int
	)
	cmd := &cobra.Command{
		Use:   "switch --nodes FILE [--listen ADDR]",
		Short: "Run the software data plane: the directory behind a UDP socket",
		Long: `Run the software data plane on a UDP address. Clients send requests there;
the switch forwards each to a storage node and relays the node's reply back.

FILE is the cluster layout that the nodes read (netdir node --config), whose
chains the switch then uses, or a YAML list of the storage nodes:

  - {id: 1, addr: 127.0.0.1:7501}
  - {id: 2, addr: 127.0.0.1:7502}

Every partition gets a chain by ring placement (partition p's chain is
--replicas consecutive nodes, in order of id, starting at p mod n) and an even
split, until a controller reprograms it over P4Runtime (--p4runtime, the
same calls that program BMv2 and Tofino). Counters are logged every 10s;
SIGINT or SIGTERM stops the switch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if replicas < 1 || replicas > directory.MaxChain {
				return fmt.Errorf("--replicas %d: want 1..%d", replicas, directory.MaxChain)
			}
			dcfg := directory.Config{PartitionBits: bits, Slots: slots}
			if bits == 0 {
				// The directory reads 0 as its default; one partition is 0 bits.
				return errors.New("--partition-bits 0: want 1..20")
			}
			data, err := os.ReadFile(nodesFile)
			if err != nil {
				return err
			}
			// The cluster layout that nodes read (a mapping with nodes,
			// partition_bits, replicas) gives the same chains as theirs; a
			// plain list of nodes is placed by the flags.
			var chains [][]wire.NodeID
			var nodes []model.Node
			if lay, lerr := layout.Parse(data); lerr == nil {
				bits, replicas = lay.Bits(), lay.R()
				dcfg.PartitionBits = bits
				for _, id := range lay.Nodes() {
					a, _ := lay.Addr(id)
					nodes = append(nodes, model.Node{ID: id, Addr: a})
				}
				for p := 0; p < lay.Partitions(); p++ {
					chains = append(chains, lay.Chain(uint32(p)))
				}
			} else if nodes, err = parseNodes(data, nodesFile, 4096); err != nil {
				if looksLikeLayout(data) {
					return fmt.Errorf("%s: %w", nodesFile, lerr)
				}
				return err
			}
			if len(nodes) < replicas {
				return fmt.Errorf("%s: %d nodes, fewer than --replicas %d", nodesFile, len(nodes), replicas)
			}
			if chains == nil {
				ids := make([]wire.NodeID, len(nodes))
				for i, n := range nodes {
					ids[i] = n.ID
				}
				pmap, err := directory.RingMap(bits, ids, replicas, 1)
				if err != nil {
					return err
				}
				chains = pmap.Chains
			}
			sw, err := cluster.StartSwitch(cluster.SwitchConfig{
				Listen: listen, Directory: dcfg, Nodes: nodes, Chains: chains, P4Runtime: p4rtAddr, DeviceID: deviceID,
			})
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			if a := sw.P4RuntimeAddr(); a != "" {
				log.Info("P4Runtime serving", "addr", a, "device_id", deviceID)
			}
			log.Info("switch serving", "addr", sw.Addr(), "nodes", len(nodes), "partitions", 1<<bits,
				"replicas", replicas, "slots", sw.DirectoryConfig().Slots)

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
	f.StringVar(&nodesFile, "nodes", "", "YAML file listing the storage nodes (required)")
	f.UintVar(&bits, "partition-bits", 10, "log2 of the partition count")
	f.IntVar(&replicas, "replicas", 3, "chain length R")
	f.IntVar(&slots, "slots", 4096, "directory capacity D (hot keys)")
	f.StringVar(&p4rtAddr, "p4runtime", "127.0.0.1:9559", "serve P4Runtime here for the controller (empty: don't)")
	f.Uint64Var(&deviceID, "device-id", 1, "P4Runtime device id")
	_ = cmd.MarkFlagRequired("nodes")
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

// parseNodes reads a YAML list of {id, addr} entries. Ids must be distinct
// and below maxNodes; addresses are host:port (a literal IP or a name that
// resolves) and distinct. The nodes come back sorted by id.
func parseNodes(data []byte, name string, maxNodes int) ([]model.Node, error) {
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no nodes", name)
		}
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	list := &root
	if list.Kind == yaml.DocumentNode && len(list.Content) == 1 {
		list = list.Content[0]
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: want a list of nodes such as `- {id: 1, addr: 127.0.0.1:7501}`", name, list.Line)
	}
	if len(list.Content) == 0 {
		return nil, fmt.Errorf("%s: no nodes", name)
	}
	var nodes []model.Node
	byID := map[wire.NodeID]int{}
	byAddr := map[string]int{}
	for _, item := range list.Content {
		at := fmt.Sprintf("%s:%d", name, item.Line)
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: want a mapping {id: N, addr: HOST:PORT}", at)
		}
		var idNode, addrNode *yaml.Node
		for i := 0; i+1 < len(item.Content); i += 2 {
			k, v := item.Content[i], item.Content[i+1]
			switch k.Value {
			case "id":
				idNode = v
			case "addr":
				addrNode = v
			default:
				return nil, fmt.Errorf("%s: unknown field %q (want id and addr)", at, k.Value)
			}
		}
		if idNode == nil {
			return nil, fmt.Errorf("%s: node without an id", at)
		}
		if addrNode == nil {
			return nil, fmt.Errorf("%s: node %s without an addr", at, idNode.Value)
		}
		id, err := strconv.ParseUint(idNode.Value, 10, 16)
		if idNode.Kind != yaml.ScalarNode || err != nil || int(id) >= maxNodes {
			return nil, fmt.Errorf("%s: id %q: want an integer 0..%d", at, idNode.Value, maxNodes-1)
		}
		if line, dup := byID[wire.NodeID(id)]; dup {
			return nil, fmt.Errorf("%s: id %d is also on line %d", at, id, line)
		}
		ua, err := net.ResolveUDPAddr("udp", addrNode.Value)
		if addrNode.Kind != yaml.ScalarNode || err != nil || ua.Port == 0 || ua.IP == nil {
			msg := "want HOST:PORT with a non-zero port"
			if err != nil {
				msg = err.Error()
			}
			return nil, fmt.Errorf("%s: node %d: addr %q: %s", at, id, addrNode.Value, msg)
		}
		ap := netip.AddrPortFrom(ua.AddrPort().Addr().Unmap(), uint16(ua.Port))
		key := ap.String()
		if line, dup := byAddr[key]; dup {
			return nil, fmt.Errorf("%s: node %d: addr %s is also on line %d", at, id, key, line)
		}
		byID[wire.NodeID(id)], byAddr[key] = item.Line, item.Line
		nodes = append(nodes, model.Node{ID: wire.NodeID(id), Addr: ap})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes, nil
}

// looksLikeLayout reports whether a YAML document is a mapping (a cluster
// layout) rather than a list of nodes.
func looksLikeLayout(data []byte) bool {
	var v any
	_ = yaml.Unmarshal(data, &v)
	_, ok := v.(map[string]any)
	return ok
}
