package storagenode

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// kindFill is the key space of Fill's background writes, apart from every
// key the node serves.
const kindFill = 'z'

// DefaultFillKeys is Fill's key space per tree: 2 MiB of 1 KiB values,
// about a node's share of the experiments' own data per tree, so that the
// fill's overwrites keep compactions busy without growing the data (with
// 65,536 keys, the first default, a node's data grew from 7 to 70-140 MiB
// within a 60 s phase and every GET read the device 6-57 times).
const DefaultFillKeys = 2048

// FillOptions shape Fill's background writes.
type FillOptions struct {
	Rate float64 // bytes/s of values written, over all the chosen trees
	// Keys is the distinct keys per tree (default DefaultFillKeys):
	// overwrites give compactions work to drop, and the key space bounds
	// what the fill adds to the tree's data.
	Keys      int
	ValueSize int   // bytes per value (default 1024)
	Trees     []int // chain positions written (default every tree)
	Seed      uint64
}

// Fill writes random values under random keys of a private key space
// straight into the node's trees at opts.Rate until ctx ends: an emulation
// knob for one-machine experiments (netdir bench's compaction experiments),
// like Options.MaxOps, that makes a node write-heavy so that its flushes
// and compactions run while it serves reads. It returns the bytes written.
func (n *Node) Fill(ctx context.Context, opts FillOptions) (int64, error) {
	if opts.Rate <= 0 {
		return 0, errors.New("storagenode: fill rate must be positive")
	}
	if opts.Keys <= 0 {
		opts.Keys = DefaultFillKeys
	}
	if opts.ValueSize <= 0 {
		opts.ValueSize = 1024
	}
	var trees []*tree
	if len(opts.Trees) == 0 {
		trees = n.trees
	}
	for _, pos := range opts.Trees {
		if pos < 0 || pos >= len(n.trees) {
			return 0, fmt.Errorf("storagenode: fill tree %d of %d", pos, len(n.trees))
		}
		trees = append(trees, n.trees[pos])
	}
	rng := rand.New(rand.NewPCG(opts.Seed, uint64(n.id)))
	val := make([]byte, opts.ValueSize)
	key := make([]byte, 9)
	key[0] = kindFill
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	var written int64
	var owed float64
	last := time.Now()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return written, nil
		case <-n.stop:
			return written, nil
		case now := <-t.C:
			owed += now.Sub(last).Seconds() * opts.Rate
			last = now
		}
		// At most a second's worth per tick: a stalled writer does not
		// burst afterwards.
		owed = min(owed, opts.Rate)
		for owed >= float64(opts.ValueSize) {
			tr := trees[i%len(trees)]
			i++
			b := tr.db.NewBatch()
			for j := 0; j < 64 && owed >= float64(opts.ValueSize); j++ {
				binary.BigEndian.PutUint64(key[1:], uint64(rng.IntN(opts.Keys)))
				for k := 0; k+8 <= len(val); k += 8 {
					binary.LittleEndian.PutUint64(val[k:], rng.Uint64())
				}
				b.Set(key, val, nil)
				owed -= float64(opts.ValueSize)
				written += int64(opts.ValueSize)
			}
			err := b.Commit(pebble.NoSync)
			b.Close()
			if err != nil {
				if n.closing.Load() {
					return written, nil
				}
				return written, err
			}
		}
	}
}
