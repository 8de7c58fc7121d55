package storagenode

import (
	"bytes"
	"context"
	"fmt"
)

// Settle flushes every tree's memtable and compacts each tree over its
// whole key range, so that the node's data sits in a settled LSM without
// compaction debt or a WAL to replay. An experiment's template
// (bench/system.Fresh) settles its nodes before they stop, so that every
// step starts from the same LSM shape and opens its trees at once.
func (n *Node) Settle(ctx context.Context) error {
	last := bytes.Repeat([]byte{0xff}, 64)
	for _, t := range n.trees {
		if err := t.db.Flush(); err != nil {
			return fmt.Errorf("storagenode: settle tree %d: %w", t.pos, err)
		}
		if err := t.db.Compact(ctx, []byte{0}, last, true); err != nil {
			return fmt.Errorf("storagenode: settle tree %d: %w", t.pos, err)
		}
	}
	return nil
}
