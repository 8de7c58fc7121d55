package storagenode

import (
	"context"
	"time"

	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/storagenode/device"
)

// GossipStats returns the node's stats as it gossips them (HATS T and C per
// tree, compaction debt, and the device's utilisation and queue wait per
// I/O class), versioned with gossip.NextVersion. prev is the previous
// version this node published (zero for the first): the window figures
// cover the time since it.
func (n *Node) GossipStats(prev gossip.NodeStats) gossip.NodeStats {
	st := n.Stats()
	now := time.Now()
	dev := n.dev.Stats()
	s := gossip.NodeStats{Node: n.id, Version: gossip.NextVersion(), At: now, QueueDepth: st.Load, Capacity: n.opts.MaxOps}
	// The epoch before the partitions: SetLayout marks a layout's joins
	// behind before it takes the layout, so none is missed at this epoch.
	s.Epoch = n.layout().Epoch()
	s.Filling = n.recov.behindList()
	if !n.ready.Load() {
		s.Filling = n.recov.member() // recovering: behind on all its chains
	}
	if !prev.At.IsZero() {
		s.Window = now.Sub(prev.At)
	}
	s.Device = deviceClasses(dev, devicePrev(dev, prev.Device, s.Window))
	before := map[int]gossip.TreeStats{}
	for _, t := range prev.Trees {
		before[t.Position] = t
	}
	for i, t := range n.trees {
		ts := st.Trees[i]
		g := gossip.TreeStats{
			Position: t.pos, Reads: ts.Reads, Writes: ts.Writes, ReadNanos: t.readNanos.Load(),
			CompactionDebt: ts.CompactionDebt, L0Files: ts.L0Files, CompactionRate: ts.CompactionRate,
		}
		b := before[t.pos]
		if g.Reads >= b.Reads && g.ReadNanos >= b.ReadNanos {
			g.WindowReads = g.Reads - b.Reads
			if g.WindowReads > 0 {
				g.MeanReadLatency = time.Duration((g.ReadNanos - b.ReadNanos) / g.WindowReads)
			}
		}
		s.Trees = append(s.Trees, g)
	}
	return s
}

// devicePrev rebuilds the device figures of a previous gossiped version
// that lies window before cur; the zero Stats (the window is since the
// device was made) if there is none, or if the counters went back (the
// node restarted).
func devicePrev(cur device.Stats, prev []gossip.DeviceClass, window time.Duration) device.Stats {
	if window <= 0 || len(prev) != int(device.NumClasses) {
		return device.Stats{}
	}
	out := device.Stats{Elapsed: cur.Elapsed - window, QueueDepth: cur.QueueDepth}
	for c, p := range prev {
		if p.Class != device.Class(c).String() || p.IOs > cur.Class[c].IOs || p.Busy > cur.Class[c].Busy || out.Elapsed < 0 {
			return device.Stats{}
		}
		out.Class[c] = device.ClassStats{IOs: p.IOs, Bytes: p.Bytes, Busy: p.Busy, Wait: p.Wait, PageHits: p.PageHits}
	}
	return out
}

// SetExpected sets the load the controller expects each of the node's trees
// to serve (E by chain position, from the coarse scheduler); the compaction
// scheduler's ReadShare paces by it. nil forgets it.
func (n *Node) SetExpected(e []float64) { n.sched.SetExpected(e) }

// RunGossip publishes the node's stats through g every interval (default
// gossip.DefaultInterval), and hands the controller's newest expected load
// for this node to the compaction scheduler, until ctx ends.
func (n *Node) RunGossip(ctx context.Context, g *gossip.Gossip, every time.Duration) {
	if every <= 0 {
		every = gossip.DefaultInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var prev gossip.NodeStats
	var applied uint64
	for {
		if n.closing.Load() {
			return
		}
		s := n.GossipStats(prev)
		if err := g.PublishStats(s); err != nil {
			n.log.Warn("gossip stats", "err", err)
		} else {
			prev = s
		}
		if e, ok := g.Expected(n.id); ok && e.Version > applied {
			applied = e.Version
			n.SetExpected(e.Trees)
		}
		select {
		case <-ctx.Done():
			return
		case <-n.stop:
			return
		case <-t.C:
		}
	}
}
