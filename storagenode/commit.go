package storagenode

import (
	"github.com/cockroachdb/pebble/v2"
)

// groupCommit is a shard's group commit. A write that must be durable before
// what the shard sends next is applied without waiting for its WAL sync
// (Pebble's ApplyNoSyncWait: in the memtable, and so visible, at once, as a
// synced commit also is before its sync ends); the shard waits for all of
// them together just before its queued packets leave (shard.flush). So a
// shard's batch of writes waits for one sync per tree, not one per write in
// sequence, and the syncs the shards wait for at the same time share one
// fsync per tree in Pebble's WAL writer. Nothing about a write leaves the
// node before its sync: acknowledged writes stay durable.
type groupCommit struct {
	waiting []*pebble.Batch
}

// apply applies b to db, synced, without waiting for the sync; b is the
// group's (closed by wait, or now on an error).
func (g *groupCommit) apply(db *pebble.DB, b *pebble.Batch) error {
	if err := db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		b.Close()
		return err
	}
	g.waiting = append(g.waiting, b)
	return nil
}

// wait waits until every write applied is synced, and reports the first
// that failed.
func (g *groupCommit) wait() error {
	var first error
	for _, b := range g.waiting {
		if err := b.SyncWait(); err != nil && first == nil {
			first = err
		}
		b.Close()
	}
	clear(g.waiting)
	g.waiting = g.waiting[:0]
	return first
}
