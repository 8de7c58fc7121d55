package directory

import (
	"fmt"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// Partitioned is a directory, or a data plane around one, whose partitions
// can be set.
type Partitioned interface {
	Partitions() int
	SetPartition(p uint32, chain []wire.NodeID, buckets []uint8) error
}

// InstallLayout sets every partition of d to its chain in m, with buckets
// split evenly over its read set (a spare still filling gets none).
func InstallLayout(d Partitioned, m *layout.Map) error {
	if m.Partitions() != d.Partitions() {
		return fmt.Errorf("directory: layout has %d partitions, directory %d", m.Partitions(), d.Partitions())
	}
	for p, c := range m.Chains() {
		if err := d.SetPartition(uint32(p), c, BucketsForWeights(m.ReadWeights(uint32(p)))); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}
