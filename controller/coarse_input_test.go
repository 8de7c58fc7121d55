package controller

import (
	"math"
	"testing"
	"time"

	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/wire"
)

// TestCoarseInputFromGossip: the coarse loop's T is the mean read time
// over the epoch, not since the node started, and its Background is the
// device share the gossiped windows of the epoch gave to WAL, flush and
// compaction I/O, weighted by window; the next epoch starts both afresh.
func TestCoarseInputFromGossip(t *testing.T) {
	c, _, _ := testController(t)
	dev := func(read, compaction float64) []gossip.DeviceClass {
		return []gossip.DeviceClass{{Class: "read", Utilisation: read}, {Class: "wal", Utilisation: 0.05},
			{Class: "flush"}, {Class: "compaction", Utilisation: compaction}}
	}
	tree := func(reads uint64, nanos uint64) []gossip.TreeStats {
		return []gossip.TreeStats{{Position: 0, Reads: reads, ReadNanos: nanos}}
	}
	obs := func(v uint64, window time.Duration, trees []gossip.TreeStats, d []gossip.DeviceClass) {
		c.ObserveNodeStats(gossip.NodeStats{Node: 1, Version: v, Window: window, Trees: trees, Device: d})
	}
	stats := func() (time.Duration, float64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range c.nodeStatsLocked([]wire.NodeID{1}, 1) {
			return s.ReadLatency, s.Background
		}
		t.Fatal("no stats for node 1")
		return 0, 0
	}
	// The node's first report is the baseline epoch.
	obs(1, 0, tree(0, 0), nil)
	c.mu.Lock()
	c.nodeStatsLocked([]wire.NodeID{1}, 1)
	c.mu.Unlock()
	// Epoch 1: 100 reads of 1 ms; windows of 1 s with compaction at 0.25
	// and 3 s at 0.45 (plus WAL 0.05 each).
	obs(2, time.Second, tree(100, 100*1e6), dev(0.3, 0.25))
	obs(3, 3*time.Second, tree(100, 100*1e6), dev(0.3, 0.45))
	lat, bg := stats()
	if lat != time.Millisecond || math.Abs(bg-(0.3*1+0.5*3)/4) > 1e-9 {
		t.Fatalf("epoch 1: T %v, background %.3f; want 1ms, 0.45", lat, bg)
	}
	// Epoch 2: 100 more reads of 5 ms each: T is 5 ms (since the start it
	// would be 3 ms); no window gossiped: no background.
	obs(4, 0, tree(200, 100*1e6+100*5e6), nil)
	lat, bg = stats()
	if lat != 5*time.Millisecond || bg != 0 {
		t.Fatalf("epoch 2: T %v, background %.3f; want 5ms, 0", lat, bg)
	}
}
