package storagenode

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/netdir/netdir/storagenode/device"
)

// tree is one Pebble instance: the partitions for which this node holds one
// chain position (replica decoupling).
type tree struct {
	pos   int
	db    *pebble.DB
	fs    *device.FS   // the tree's part of the node's device
	clock device.Clock // the device's: read latency includes device time in its units

	reads     atomic.Uint64
	readNanos atomic.Uint64
	writes    atomic.Uint64
	lat       *latencyRing

	// compaction accounting, kept by the scheduler's grant handles
	compactBytes   atomic.Uint64
	compactions    atomic.Uint64
	l0Compactions  atomic.Int64 // running compactions with L0 inputs
	throttledNanos atomic.Uint64
	deepL0Bytes    atomic.Uint64 // compaction bytes paced at a raised rate (deep L0)

	mu      sync.Mutex
	started []*grant // grants started but not yet matched to a CompactionBegin
}

type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(string, ...any) {}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
	os.Exit(2)
}

func openTree(dir string, pos int, cache *pebble.Cache, o *Options, sched *Scheduler, dev *device.Device, log *slog.Logger) (*tree, error) {
	t := &tree{pos: pos, lat: newLatencyRing(4096), clock: o.clock}
	opts := &pebble.Options{
		Cache:         cache,
		MemTableSize:  o.MemTableBytes,
		LBaseMaxBytes: o.LBaseMaxBytes,
		Logger:        pebbleLogger{log},
		// Paced L0 compactions let L0 grow to the scheduler's L0Urgent
		// before their rate rises; writes stop only beyond it.
		L0StopWritesThreshold: L0StopWrites,
	}
	// A bloom filter on every level, L0 included: a point read then reads
	// the data block of the one table that holds the key, not one of every
	// L0 file and level whose key range spans it.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	ts := sched.forTree(t)
	opts.Experimental.CompactionScheduler = ts
	// One compaction at a time per tree (Pebble's default range, 1, 1),
	// but up to maxTreeCompactions, as Pebble's own heuristics allow, while
	// L0 is deep (L0Urgent files): one compaction cannot drain a deep L0
	// while flushes add to it (at 2 MiB/s of writes per node, L0 reached
	// L0StopWrites). Only then: more compactions at once at a shallow L0
	// would change nothing the budget allows, only its burstiness.
	opts.CompactionConcurrencyRange = func() (int, int) {
		if ts.urgent() {
			return 1, maxTreeCompactions
		}
		return 1, 1
	}
	el := pebble.EventListener{
		CompactionBegin: func(info pebble.CompactionInfo) {
			l0 := len(info.Input) > 0 && info.Input[0].Level == 0
			t.mu.Lock()
			if len(t.started) > 0 {
				g := t.started[0]
				t.started = t.started[1:]
				g.l0.Store(l0)
				if l0 {
					t.l0Compactions.Add(1)
					g.countedL0 = true
				}
			}
			t.mu.Unlock()
		},
	}
	opts.EventListener = &el
	t.fs = dev.Configure(opts)
	db, err := pebble.Open(filepath.Join(dir, fmt.Sprintf("tree-%d", pos)), opts)
	if err != nil {
		return nil, err
	}
	t.db = db
	return t, nil
}

var errNotFound = errors.New("not found")

// getRecord reads a key's record, its values its own; a missing key is an
// empty record.
func (t *tree) getRecord(part uint32, key []byte) (record, error) {
	raw, closer, err := t.timedGet(recordKey(part, key))
	if err == errNotFound {
		return record{}, nil
	}
	if err != nil {
		return record{}, err
	}
	b := append([]byte(nil), raw...)
	closer.Close()
	return decodeRecord(b)
}

// viewRecord reads a key's record without copying, into kb (a buffer for the
// record's Pebble key): its values are Pebble's (its block cache's or
// memtable's) until closer is closed; closer is nil for a missing key, an
// empty record. A clean record allocates nothing.
func (t *tree) viewRecord(part uint32, key []byte, kb []byte) (rec record, closer io.Closer, err error) {
	raw, closer, err := t.timedGet(appendRecordKey(kb, part, key))
	if err == errNotFound {
		return record{}, nil, nil
	}
	if err != nil {
		return record{}, nil, err
	}
	if rec, err = decodeRecord(raw); err != nil {
		closer.Close()
		return record{}, nil, err
	}
	return rec, closer, nil
}

// timedGet reads one Pebble key, its value Pebble's until closer is closed.
// It is the read path whose latency the node exports (HATS's T): it
// includes the device time of the block reads that miss the cache.
func (t *tree) timedGet(k []byte) ([]byte, io.Closer, error) {
	start := t.clock.Now()
	v, closer, err := t.db.Get(k)
	d := t.clock.Now().Sub(start)
	t.reads.Add(1)
	t.readNanos.Add(uint64(d))
	t.lat.add(d)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil, errNotFound
	}
	return v, closer, err
}

// putRecord stores a key's record: synced, in the group commit g, or not
// synced when g is nil.
func (t *tree) putRecord(part uint32, key []byte, r *record, g *groupCommit) error {
	t.writes.Add(1)
	if g == nil {
		return t.db.Set(recordKey(part, key), r.encode(), pebble.NoSync)
	}
	b := t.db.NewBatch()
	b.Set(recordKey(part, key), r.encode(), nil)
	return g.apply(t.db, b)
}

// latencyRing keeps the last n read latencies for percentiles.
type latencyRing struct {
	mu  sync.Mutex
	buf []time.Duration
	i   int
	n   int
}

func newLatencyRing(n int) *latencyRing { return &latencyRing{buf: make([]time.Duration, n)} }

func (l *latencyRing) add(d time.Duration) {
	l.mu.Lock()
	l.buf[l.i] = d
	l.i = (l.i + 1) % len(l.buf)
	if l.n < len(l.buf) {
		l.n++
	}
	l.mu.Unlock()
}

func (l *latencyRing) snapshot() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.buf[:l.n]...)
}
