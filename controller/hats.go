package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// coarseState is what the HATS coarse loop keeps between epochs.
type coarseState struct {
	// trees is each node's latest per-tree report (cumulative reads and
	// mean read latency), and epochReads the reads at the last epoch.
	trees      map[wire.NodeID][]TreeReport
	epochReads map[wire.NodeID]map[uint32]uint64
	// epochRead is each node's cumulative reads and read time at the last
	// epoch, so that T is the mean over the epoch, not since the start.
	epochRead map[wire.NodeID][2]float64
	// background is each node's device time in background classes and in
	// all, over the gossiped windows since the last epoch
	// (ObserveNodeStats), for NodeStats.Background.
	background map[wire.NodeID][2]float64
	keyHits    map[wire.KeyHash]uint64 // directory keys' hits since the last epoch
	share      map[wire.NodeID]float64 // E's shares from the last epoch
	epochs     uint64
	last       time.Time // when the last epoch read its counts
}

func newCoarseState() coarseState {
	return coarseState{
		trees:      map[wire.NodeID][]TreeReport{},
		epochReads: map[wire.NodeID]map[uint32]uint64{},
		epochRead:  map[wire.NodeID][2]float64{},
		background: map[wire.NodeID][2]float64{},
		keyHits:    map[wire.KeyHash]uint64{},
	}
}

// noteTreesLocked keeps a node's tree stats for the next epoch; c.mu held.
func (c *Controller) noteTreesLocked(n wire.NodeID, trees []TreeReport) {
	if len(trees) > 0 {
		c.coarse.trees[n] = trees
	}
}

// noteDeviceLocked adds a gossiped window of a node's device use to the
// epoch's: the background classes' (all but reads) utilisation and the
// window, each weighted by the window. c.mu held.
func (c *Controller) noteDeviceLocked(n wire.NodeID, window time.Duration, classes []gossip.DeviceClass) {
	if window <= 0 || len(classes) == 0 {
		return
	}
	var bg float64
	for _, d := range classes {
		if d.Class != "read" {
			bg += d.Utilisation
		}
	}
	b := c.coarse.background[n]
	c.coarse.background[n] = [2]float64{b[0] + bg*window.Seconds(), b[1] + window.Seconds()}
}

// nodeStatsLocked turns the nodes' reports into the coarse scheduler's
// input: per tree the reads since the last epoch, times scale (C), the mean
// read latency weighted by reads (T), and the configured capacity, for the
// given nodes. c.mu held.
func (c *Controller) nodeStatsLocked(nodes []wire.NodeID, scale float64) []sched.NodeStats {
	var out []sched.NodeStats
	for _, id := range nodes {
		trees, ok := c.coarse.trees[id]
		if !ok {
			continue
		}
		s := sched.NodeStats{Node: id, Capacity: c.cfg.NodeCapacity}
		last, baseline := c.coarse.epochReads[id]
		now := map[uint32]uint64{}
		var reads, latency float64
		for _, t := range trees {
			pos := t.Position
			now[pos] = t.Reads
			for int(pos) >= len(s.Requests) {
				s.Requests = append(s.Requests, 0)
			}
			s.Requests[pos] = uint64(scale * float64(t.Reads-min(last[pos], t.Reads)))
			reads += float64(t.Reads)
			latency += float64(t.Reads) * float64(t.MeanReadLatency)
		}
		// T over the epoch: the cumulative read time's growth over the
		// reads' (the mean since the start where the counters went back).
		prev := c.coarse.epochRead[id]
		if prev[0] > reads || prev[1] > latency {
			prev = [2]float64{}
		}
		if d := reads - prev[0]; d > 0 {
			s.ReadLatency = time.Duration((latency - prev[1]) / d)
		} else if reads > 0 {
			s.ReadLatency = time.Duration(latency / reads)
		}
		c.coarse.epochRead[id] = [2]float64{reads, latency}
		if b := c.coarse.background[id]; b[1] > 0 {
			s.Background = b[0] / b[1]
		}
		delete(c.coarse.background, id)
		c.coarse.epochReads[id] = now
		if baseline { // a node's first report counts since it started
			out = append(out, s)
		}
	}
	return out
}

// runEpochs runs CoarseRound every epoch, unless paused, until ctx ends; the next epoch
// starts a whole epoch after the last one ended, however long installing its
// weights took.
func (c *Controller) runEpochs(ctx context.Context) {
	t := time.NewTimer(c.cfg.Epoch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !c.Paused() {
			if _, err := c.CoarseRound(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("coarse epoch failed", "err", err)
			}
		}
		t.Reset(c.cfg.Epoch)
	}
}

// CoarseRound is one epoch of the HATS coarse loop (ARCHITECTURE.md,
// "Control loops"): it gives the nodes' stats and the directory keys' hits
// of the epoch to sched.Coarse and installs the resulting partition and
// hot-key bucket tables in every data plane (and so in subscribed agents);
// the expected shares of E stay for ExpectedShares and for placing the
// next copies. It returns the plan.
func (c *Controller) CoarseRound(ctx context.Context) (sched.CoarsePlan, error) {
	c.partsMu.Lock()
	parts := c.Partitions()
	m := parts.Layout
	entries := c.Entries()
	c.mu.Lock()
	// Counts cover the time since the last epoch read them, which may be
	// longer than L (an epoch waits for the last one's writes): scaled to L,
	// they compare with the capacity of an epoch.
	now := time.Now()
	scale := 1.0
	if !c.coarse.last.IsZero() {
		scale = c.cfg.Epoch.Seconds() / max(now.Sub(c.coarse.last).Seconds(), 1e-3)
	}
	c.coarse.last = now
	in := sched.CoarseInput{Epoch: c.cfg.Epoch, Nodes: c.nodeStatsLocked(m.Nodes(), scale), Chains: m.Chains(),
		Weights: make([][]uint32, m.Partitions()), Settle: sched.DefaultSettle}
	for p, b := range parts.Buckets {
		in.Weights[p] = directory.BucketShares(b, len(m.Chain(p)))
	}
	for _, e := range entries {
		in.HotKeys = append(in.HotKeys, sched.HotKeyLoad{Hash: e.Hash, Locs: e.Locs, R: e.R,
			Requests: uint64(scale * float64(c.coarse.keyHits[e.Hash])), Weights: directory.BucketShares(e.Buckets, len(e.Locs))})
	}
	clear(c.coarse.keyHits)
	c.mu.Unlock()
	plan, err := sched.Coarse(in)
	if err != nil {
		c.partsMu.Unlock()
		return plan, err
	}
	var errs []error
	changed := map[uint32][]uint8{}
	for p, w := range plan.Partitions {
		b := directory.BucketsForWeights(m.ReadWeightsOver(uint32(p), m.Chain(uint32(p)), w))
		old, ok := parts.Buckets[uint32(p)]
		if !ok {
			old = directory.BucketsForWeights(make([]uint32, len(m.Chain(uint32(p)))))
		}
		if directory.BucketsMoved(old, b, len(w)) {
			changed[uint32(p)] = b
		}
	}
	// The state first, then the planes: a leader that fails in between
	// leaves them to the next one's re-sync.
	if len(changed) > 0 {
		if err := c.repl.apply(command{Op: opPartitions, Partitions: changed}); err != nil {
			c.partsMu.Unlock()
			return plan, err
		}
	}
	for p, b := range changed {
		for _, pl := range c.planes {
			if err := pl.SetPartitionBuckets(ctx, p, m.Chain(p), b); err != nil {
				errs = append(errs, fmt.Errorf("partition %d on %s: %w", p, pl.Name(), err))
			}
		}
	}
	c.partsMu.Unlock()
	// The keys' weights: an entry evicted or re-promoted since the plan
	// was made is left alone.
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	var reweighed []Entry
	for i, e := range entries {
		b := directory.BucketsForWeights(m.ReadWeightsOver(m.Partition(e.Hash), e.Locs, plan.HotKeys[i]))
		cur, ok := c.entry(e.Key)
		if !ok || cur.Gen != e.Gen || slices.Equal(cur.Buckets, b) {
			continue
		}
		cur.Buckets = b
		reweighed = append(reweighed, cur)
	}
	if len(reweighed) > 0 {
		if err := c.repl.apply(command{Op: opUpdate, Entries: reweighed}); err != nil {
			return plan, errors.Join(append(errs, err)...)
		}
	}
	for _, cur := range reweighed {
		for _, pl := range c.planes {
			if err := pl.SetSlotBuckets(ctx, &cur); err != nil {
				errs = append(errs, fmt.Errorf("weights of %q on %s: %w", cur.Key, pl.Name(), err))
			}
		}
	}
	c.mu.Lock()
	c.coarse.share = plan.Share
	c.coarse.epochs++
	c.mu.Unlock()
	c.log.Info("coarse epoch", "partitions changed", len(changed), "keys", len(entries), "shares", plan.Share)
	return plan, errors.Join(errs...)
}

// ExpectedShares is each node's share of E from the last epoch (nil before
// the first): what nodes pace their compactions by.
func (c *Controller) ExpectedShares() map[wire.NodeID]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.coarse.share)
}
