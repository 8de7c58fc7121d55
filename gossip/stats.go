// Package gossip spreads the storage nodes' scheduling stats and the
// controller's expected loads with hashicorp/memberlist (HATS §4.2: nodes
// report per tree the mean read latency T and the request counts C; the
// controller answers with the expected load E).
//
// Every member keeps a table of versioned entries, one per node and kind,
// and keeps only the newest version of each: a node's own stats under
// "s/<id>", the controller's expected load for a node under "e/<id>". A new
// version is broadcast through memberlist's transmit-limited queue
// (re-gossiped by every member that finds it newer), and the whole table is
// exchanged on join and at every push-pull, so a member that missed a
// broadcast catches up. Versions are monotone per node and survive restarts
// (NextVersion: wall-clock nanoseconds, bumped past the last one).
package gossip

import (
	"sync"
	"time"

	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// TreeStats is one tree (chain position) of a node. Counters are cumulative
// since the node started, so that any two versions give the epoch between
// them (Epoch); the window fields cover the time since the previous version.
type TreeStats struct {
	Position  int    `json:"pos"`
	Reads     uint64 `json:"reads"`   // GETs served from this tree (C, reads)
	Writes    uint64 `json:"writes"`  // writes applied to this tree
	ReadNanos uint64 `json:"read_ns"` // total Pebble read time, ns
	// MeanReadLatency is T over the window: the tree's mean Pebble read time
	// since the previous version (0: no reads in the window).
	MeanReadLatency time.Duration `json:"mean_read_ns"`
	WindowReads     uint64        `json:"window_reads"`
	CompactionDebt  uint64        `json:"debt"` // Pebble's estimated compaction debt, bytes
	L0Files         int64         `json:"l0"`
	CompactionRate  int64         `json:"crate"` // paced bytes/s (0: unthrottled)
}

// DeviceClass is one I/O class (read, wal, flush, compaction) of a node's
// emulated storage device (storagenode/device). The counters are cumulative
// since the node started; Utilisation and MeanWait cover the window.
type DeviceClass struct {
	Class string        `json:"c"`
	IOs   uint64        `json:"n"`
	Bytes uint64        `json:"b"`
	Busy  time.Duration `json:"busy"` // device time the class's I/Os took
	Wait  time.Duration `json:"wait"` // time they queued, on top of Busy
	// PageHits are the class's reads that the node's page cache of what it
	// just wrote served whole: no I/O, no device time.
	PageHits uint64 `json:"ph,omitempty"`
	// Utilisation is the class's part of the device's capacity (its queue
	// depth times the window) over the window.
	Utilisation float64       `json:"util"`
	MeanWait    time.Duration `json:"mwait"` // queue wait per I/O over the window
}

// NodeStats is one version of a node's stats.
type NodeStats struct {
	Node    wire.NodeID `json:"node"`
	Version uint64      `json:"v"` // monotone per node
	// At is the node's clock when it took the stats, Window the time since
	// its previous version.
	At         time.Time     `json:"at"`
	Window     time.Duration `json:"window"`
	QueueDepth uint16        `json:"queue"`
	// Capacity is the node's emulated capacity in requests/s (netdir node
	// --max-ops, the bench's emulation); 0 if none.
	Capacity float64     `json:"capacity,omitempty"`
	Trees    []TreeStats `json:"trees"`
	// Device is the node's storage device, per I/O class (read, wal,
	// flush, compaction, in that order).
	Device []DeviceClass `json:"device,omitempty"`
	// Epoch is the layout epoch the node holds, and Filling the partitions
	// it is still catching up with as tail at that epoch (a spare's fill,
	// a rejoin): the controller serves a spare's reads once it is caught up.
	Epoch   uint32   `json:"epoch,omitempty"`
	Filling []uint32 `json:"filling,omitempty"`
}

// MeanReadLatency is the node's mean read latency over its trees' reads in
// the window (0 if none).
func (s NodeStats) MeanReadLatency() time.Duration {
	var n, sum float64
	for _, t := range s.Trees {
		n += float64(t.WindowReads)
		sum += float64(t.WindowReads) * float64(t.MeanReadLatency)
	}
	if n == 0 {
		return 0
	}
	return time.Duration(sum / n)
}

// Expected is the controller's expected load for one node's trees: E per
// chain position, in requests/s. The node paces compaction by it (read share
// E/Q, storagenode.ReadShare).
type Expected struct {
	Node    wire.NodeID `json:"node"`
	Version uint64      `json:"v"`
	Trees   []float64   `json:"trees"`
}

// Epoch turns two versions of a node's stats into the coarse scheduler's
// input for the epoch between them: the requests (reads and writes) each
// tree served, and the mean read latency over all the trees' reads. With no
// earlier version (prev.Version == 0), the counts since the node started.
func Epoch(prev, cur NodeStats) sched.NodeStats {
	out := sched.NodeStats{Node: cur.Node, Capacity: cur.Capacity}
	before := map[int]TreeStats{}
	if prev.Version != 0 && prev.Version < cur.Version {
		for _, t := range prev.Trees {
			before[t.Position] = t
		}
	}
	maxPos := -1
	for _, t := range cur.Trees {
		maxPos = max(maxPos, t.Position)
	}
	out.Requests = make([]uint64, maxPos+1)
	var reads, nanos uint64
	for _, t := range cur.Trees {
		b := before[t.Position]
		if b.Reads > t.Reads || b.Writes > t.Writes || b.ReadNanos > t.ReadNanos {
			b = TreeStats{} // the node restarted: its counters did too
		}
		out.Requests[t.Position] = t.Reads - b.Reads + t.Writes - b.Writes
		reads += t.Reads - b.Reads
		nanos += t.ReadNanos - b.ReadNanos
	}
	if reads > 0 {
		out.ReadLatency = time.Duration(nanos / reads)
	}
	return out
}

// versionClock hands out monotone versions.
type versionClock struct {
	mu   sync.Mutex
	last uint64
	now  func() time.Time
}

// next is the wall clock in nanoseconds, or one past the last version if
// the clock did not move on: monotone in the process, and across restarts
// as long as the clock does not step back by more than the downtime.
func (c *versionClock) next() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	v := max(uint64(now().UnixNano()), c.last+1)
	c.last = v
	return v
}

var defaultClock versionClock

// NextVersion returns a version greater than every one this process
// returned before.
func NextVersion() uint64 { return defaultClock.next() }
