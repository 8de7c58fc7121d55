package directory

import (
	"fmt"
	"slices"

	"github.com/netdir/netdir/wire"
)

// PartitionMap places every partition on a chain of R nodes. The controller
// builds it from membership, data planes install it as partition entries, and
// storage nodes use it to know their chain position; the epoch changes with
// every new map so that nodes can refuse requests routed by an old one.
type PartitionMap struct {
	Epoch  uint32
	Bits   uint            // P = 1<<Bits
	Chains [][]wire.NodeID // Chains[p][0] is the head, the last the tail
}

// RingMap is ring placement: partition p's chain is the R nodes that follow
// position p mod n on the ring of nodes sorted by id. Every node heads about
// P/n partitions and holds each chain position equally often, so the R trees of
// a node (replica decoupling) carry equal shares.
func RingMap(bits uint, nodes []wire.NodeID, r int, epoch uint32) (*PartitionMap, error) {
	ns := slices.Clone(nodes)
	slices.Sort(ns)
	if len(slices.Compact(ns)) != len(nodes) {
		return nil, fmt.Errorf("directory: duplicate node ids in %v", nodes)
	}
	if r < 1 || r > MaxChain || r > len(ns) {
		return nil, fmt.Errorf("directory: chain length %d with %d nodes: want 1..min(%d, nodes)", r, len(ns), MaxChain)
	}
	if bits > 20 {
		return nil, fmt.Errorf("directory: %d partition bits: at most 20", bits)
	}
	m := &PartitionMap{Epoch: epoch, Bits: bits, Chains: make([][]wire.NodeID, 1<<bits)}
	for p := range m.Chains {
		c := make([]wire.NodeID, r)
		for j := range c {
			c[j] = ns[(p+j)%len(ns)]
		}
		m.Chains[p] = c
	}
	return m, nil
}

// Chain is the chain that holds h.
func (m *PartitionMap) Chain(h wire.KeyHash) []wire.NodeID {
	return m.Chains[h.Partition(m.Bits)]
}

// Position is n's index in partition p's chain, or -1.
func (m *PartitionMap) Position(p uint32, n wire.NodeID) int {
	return slices.Index(m.Chains[p], n)
}

// Install sets every partition of d from the map, with even buckets.
func (m *PartitionMap) Install(d *Directory) error {
	if len(m.Chains) != d.Partitions() {
		return fmt.Errorf("directory: map has %d partitions, directory %d", len(m.Chains), d.Partitions())
	}
	for p, c := range m.Chains {
		if err := d.SetPartition(uint32(p), c, nil); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}
