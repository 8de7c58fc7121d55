// Package layout is the cluster layout that storage nodes and clients share:
// the node table, the partition map (partition → chain of R nodes, with an
// epoch) and its YAML form. It is pure: no I/O beyond parsing.
//
// Placement is a ring: with the nodes sorted by id, the chain of partition p
// is the R consecutive nodes starting at index p mod n. Explicit chains in the
// YAML override the ring for the partitions they name.
package layout

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/netdir/netdir/wire"
)

// Defaults.
const (
	DefaultPartitionBits = 10 // 1024 partitions
	DefaultReplicas      = 3
	MaxReplicas          = 8
)

// Node is one row of the node table.
type Node struct {
	ID   wire.NodeID `yaml:"id"`
	Addr string      `yaml:"addr"` // the UDP address peers and clients reach the node at
}

// Config is the YAML form of the layout.
//
//	epoch: 1
//	partition_bits: 10
//	replicas: 3
//	dataplane: 127.0.0.1:7420   # where nodes send VSBs (optional)
//	nodes:
//	  - {id: 1, addr: 127.0.0.1:7501}
//	  - {id: 2, addr: 127.0.0.1:7502}
//	  - {id: 3, addr: 127.0.0.1:7503}
//	chains:                      # optional overrides: partition -> node ids
//	  7: [3, 1, 2]
type Config struct {
	Epoch         uint32                   `yaml:"epoch"`
	PartitionBits uint                     `yaml:"partition_bits"`
	Replicas      int                      `yaml:"replicas"`
	DataPlane     string                   `yaml:"dataplane,omitempty"`
	Nodes         []Node                   `yaml:"nodes"`
	Chains        map[uint32][]wire.NodeID `yaml:"chains,omitempty"`
}

// Load reads a YAML layout file.
func Load(path string) (*Map, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse parses a YAML layout.
func Parse(b []byte) (*Map, error) {
	var c Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("layout: %w", err)
	}
	return New(c)
}

// Map is a validated layout: every partition's chain resolved.
type Map struct {
	cfg    Config
	addrs  map[wire.NodeID]netip.AddrPort
	ids    []wire.NodeID // sorted
	chains [][]wire.NodeID
	dp     netip.AddrPort
}

// New validates c and resolves the chains. Zero fields take the defaults.
func New(c Config) (*Map, error) {
	if c.PartitionBits == 0 {
		c.PartitionBits = DefaultPartitionBits
	}
	if c.PartitionBits > 20 {
		return nil, fmt.Errorf("layout: %d partition bits: at most 20", c.PartitionBits)
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if len(c.Nodes) == 0 {
		return nil, errors.New("layout: no nodes")
	}
	if c.Replicas < 1 || c.Replicas > MaxReplicas {
		return nil, fmt.Errorf("layout: %d replicas: want 1..%d", c.Replicas, MaxReplicas)
	}
	if c.Replicas > len(c.Nodes) {
		return nil, fmt.Errorf("layout: %d replicas but %d nodes", c.Replicas, len(c.Nodes))
	}
	m := &Map{cfg: c, addrs: make(map[wire.NodeID]netip.AddrPort)}
	for _, n := range c.Nodes {
		if _, dup := m.addrs[n.ID]; dup {
			return nil, fmt.Errorf("layout: node %d listed twice", n.ID)
		}
		ap, err := netip.ParseAddrPort(n.Addr)
		if err != nil {
			return nil, fmt.Errorf("layout: node %d: %w", n.ID, err)
		}
		m.addrs[n.ID] = ap
		m.ids = append(m.ids, n.ID)
	}
	slices.Sort(m.ids)
	if c.DataPlane != "" {
		ap, err := netip.ParseAddrPort(c.DataPlane)
		if err != nil {
			return nil, fmt.Errorf("layout: dataplane: %w", err)
		}
		m.dp = ap
	}
	np := 1 << c.PartitionBits
	m.chains = make([][]wire.NodeID, np)
	n := len(m.ids)
	for p := range np {
		ch := make([]wire.NodeID, c.Replicas)
		for i := range ch {
			ch[i] = m.ids[(p%n+i)%n]
		}
		m.chains[p] = ch
	}
	for p, ch := range c.Chains {
		if int(p) >= np {
			return nil, fmt.Errorf("layout: chain for partition %d of %d", p, np)
		}
		if len(ch) != c.Replicas {
			return nil, fmt.Errorf("layout: partition %d: chain of %d, want %d", p, len(ch), c.Replicas)
		}
		seen := map[wire.NodeID]bool{}
		for _, id := range ch {
			if _, ok := m.addrs[id]; !ok || seen[id] {
				return nil, fmt.Errorf("layout: partition %d: bad chain member %d", p, id)
			}
			seen[id] = true
		}
		m.chains[p] = slices.Clone(ch)
	}
	return m, nil
}

// Config returns the layout's configuration with defaults filled in.
func (m *Map) Config() Config { return m.cfg }

// Epoch is the chain-configuration epoch.
func (m *Map) Epoch() uint32 { return m.cfg.Epoch }

// Bits is log2 of the partition count.
func (m *Map) Bits() uint { return m.cfg.PartitionBits }

// Partitions is the partition count.
func (m *Map) Partitions() int { return len(m.chains) }

// R is the chain length.
func (m *Map) R() int { return m.cfg.Replicas }

// Nodes lists the node ids in ascending order.
func (m *Map) Nodes() []wire.NodeID { return slices.Clone(m.ids) }

// Addr is a node's address.
func (m *Map) Addr(id wire.NodeID) (netip.AddrPort, bool) {
	a, ok := m.addrs[id]
	return a, ok
}

// DataPlane is the data plane's address, invalid when none is configured.
func (m *Map) DataPlane() netip.AddrPort { return m.dp }

// Partition is the partition of a key hash.
func (m *Map) Partition(h wire.KeyHash) uint32 { return h.Partition(m.cfg.PartitionBits) }

// Chain is partition p's chain, head first. The slice must not be modified.
func (m *Map) Chain(p uint32) []wire.NodeID {
	if int(p) >= len(m.chains) {
		return nil
	}
	return m.chains[p]
}

// ChainOf is the chain of a key hash.
func (m *Map) ChainOf(h wire.KeyHash) []wire.NodeID { return m.Chain(m.Partition(h)) }

// Position is the index of node id in partition p's chain, or -1.
func (m *Map) Position(p uint32, id wire.NodeID) int {
	return slices.Index(m.Chain(p), id)
}
