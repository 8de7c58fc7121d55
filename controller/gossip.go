package controller

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// gossipState is what the controller keeps of the gossip: the newest stats
// version of every node, and where the last expected loads were published.
type gossipState struct {
	mu     sync.Mutex
	stats  map[wire.NodeID]gossip.NodeStats
	g      *gossip.Gossip
	epochs uint64                           // coarse epochs seen when E was last published
	start  map[wire.NodeID]gossip.NodeStats // stats at that epoch
}

// ObserveNodeStats takes one version of a node's gossiped stats (a
// gossip.Config.OnStats callback, or a caller that has them directly). It
// keeps the newest version per node, and hands the trees' counts and read
// latencies to the coarse loop as a report's trees would be. It reports
// whether s was newer than what the controller held.
func (c *Controller) ObserveNodeStats(s gossip.NodeStats) bool {
	gs := &c.gossip
	gs.mu.Lock()
	if old, ok := gs.stats[s.Node]; ok && old.Version >= s.Version {
		gs.mu.Unlock()
		return false
	}
	if gs.stats == nil {
		gs.stats = map[wire.NodeID]gossip.NodeStats{}
	}
	gs.stats[s.Node] = s
	gs.mu.Unlock()
	trees := make([]TreeReport, len(s.Trees))
	for i, t := range s.Trees {
		// The mean since the node started, as a report carries it: with
		// the cumulative reads it gives the cumulative read time.
		var mean time.Duration
		if t.Reads > 0 {
			mean = time.Duration(t.ReadNanos / t.Reads)
		}
		trees[i] = TreeReport{Position: uint32(t.Position), Reads: t.Reads, MeanReadLatency: mean,
			CompactionDebt: t.CompactionDebt}
	}
	c.mu.Lock()
	c.noteTreesLocked(s.Node, trees)
	c.noteDeviceLocked(s.Node, s.Window, s.Device)
	c.mu.Unlock()
	return true
}

// NodeStats returns the newest gossiped stats of every node heard of (the
// coarse scheduler's input through gossip.Epoch; the nodes' compaction
// debts).
func (c *Controller) NodeStats() map[wire.NodeID]gossip.NodeStats {
	c.gossip.mu.Lock()
	defer c.gossip.mu.Unlock()
	return maps.Clone(c.gossip.stats)
}

// AttachGossip makes g the member that the controller publishes expected
// loads through; g's Config.OnStats should be ObserveNodeStats.
func (c *Controller) AttachGossip(g *gossip.Gossip) {
	c.gossip.mu.Lock()
	c.gossip.g = g
	c.gossip.mu.Unlock()
	for _, s := range g.Stats() {
		c.ObserveNodeStats(s)
	}
}

// PublishExpected gossips each node's expected load per tree (E by chain
// position); nodes pace their compactions by its shares.
func (c *Controller) PublishExpected(e map[wire.NodeID][]float64) error {
	c.gossip.mu.Lock()
	g := c.gossip.g
	c.gossip.mu.Unlock()
	if g == nil {
		return fmt.Errorf("controller: no gossip attached")
	}
	for n, trees := range e {
		if err := g.PublishExpected(gossip.Expected{Node: n, Version: gossip.NextVersion(), Trees: trees}); err != nil {
			return err
		}
	}
	return nil
}

// TreeExpected is each node's expected load per tree under the installed
// partition weights, from the requests each tree served since the last
// call (sched.TreeExpected), and starts the next interval.
func (c *Controller) TreeExpected() map[wire.NodeID][]float64 {
	parts := c.Partitions()
	m := parts.Layout
	weights := make([][]uint32, m.Partitions())
	for p, b := range parts.Buckets {
		if int(p) < len(weights) {
			weights[p] = directory.BucketShares(b, len(m.Chain(p)))
		}
	}
	gs := &c.gossip
	gs.mu.Lock()
	req := map[wire.NodeID][]uint64{}
	for id, cur := range gs.stats {
		req[id] = gossip.Epoch(gs.start[id], cur).Requests
	}
	gs.start = maps.Clone(gs.stats)
	gs.mu.Unlock()
	return sched.TreeExpected(m.Chains(), weights, req)
}

// EpochExpected returns the nodes' expected loads per tree (TreeExpected)
// if a coarse epoch has ended since the last call, and false otherwise.
func (c *Controller) EpochExpected() (map[wire.NodeID][]float64, bool) {
	c.mu.Lock()
	epochs := c.coarse.epochs
	c.mu.Unlock()
	c.gossip.mu.Lock()
	due := epochs != c.gossip.epochs
	c.gossip.epochs = epochs
	c.gossip.mu.Unlock()
	if !due {
		return nil, false
	}
	return c.TreeExpected(), true
}

// RunGossip publishes the nodes' expected loads per tree through the
// attached gossip after every coarse epoch (checked each second), until
// ctx ends.
func (c *Controller) RunGossip(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if e, ok := c.EpochExpected(); ok {
			if err := c.PublishExpected(e); err != nil {
				c.log.Warn("publish expected loads", "err", err)
			}
		}
	}
}

// StatsCollector exports the gossiped node stats as Prometheus metrics.
type StatsCollector struct {
	c                                           *Controller
	version, age, reads, lat, debt, l0, rate, q *prometheus.Desc
	devUtil, devWait                            *prometheus.Desc
}

// NewStatsCollector returns a collector of the newest gossiped stats of
// every node.
func NewStatsCollector(c *Controller) *StatsCollector {
	node := []string{"node"}
	tree := []string{"node", "tree"}
	class := []string{"node", "class"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("netdir_controller_node_"+name, help, labels, nil)
	}
	return &StatsCollector{
		c:       c,
		version: d("stats_version", "Newest gossiped stats version of the node.", node),
		age:     d("stats_age_seconds", "Age of the node's newest gossiped stats, by the node's clock.", node),
		q:       d("queue_depth", "Requests queued at the node (gossiped).", node),
		reads:   d("tree_reads_total", "Reads served per tree (gossiped; HATS C).", tree),
		lat:     d("tree_read_latency_seconds", "Mean read latency per tree over the node's last window (gossiped; HATS T).", tree),
		debt:    d("tree_compaction_debt_bytes", "Pebble's estimated compaction debt per tree (gossiped).", tree),
		l0:      d("tree_l0_files", "L0 files per tree (gossiped).", tree),
		rate:    d("tree_compaction_rate_bytes", "Paced compaction rate per tree (gossiped; 0: unthrottled).", tree),
		devUtil: d("device_utilisation", "Share of the node's device capacity per I/O class over its last window (gossiped).", class),
		devWait: d("device_queue_wait_seconds", "Mean device queue wait per I/O by class over the node's last window (gossiped).", class),
	}
}

// Describe implements prometheus.Collector.
func (m *StatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.version, m.age, m.q, m.reads, m.lat, m.debt, m.l0, m.rate, m.devUtil, m.devWait} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *StatsCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for id, s := range m.c.NodeStats() {
		n := fmt.Sprint(id)
		ch <- prometheus.MustNewConstMetric(m.version, prometheus.GaugeValue, float64(s.Version), n)
		ch <- prometheus.MustNewConstMetric(m.age, prometheus.GaugeValue, now.Sub(s.At).Seconds(), n)
		ch <- prometheus.MustNewConstMetric(m.q, prometheus.GaugeValue, float64(s.QueueDepth), n)
		for _, t := range s.Trees {
			tr := fmt.Sprint(t.Position)
			ch <- prometheus.MustNewConstMetric(m.reads, prometheus.CounterValue, float64(t.Reads), n, tr)
			ch <- prometheus.MustNewConstMetric(m.lat, prometheus.GaugeValue, t.MeanReadLatency.Seconds(), n, tr)
			ch <- prometheus.MustNewConstMetric(m.debt, prometheus.GaugeValue, float64(t.CompactionDebt), n, tr)
			ch <- prometheus.MustNewConstMetric(m.l0, prometheus.GaugeValue, float64(t.L0Files), n, tr)
			ch <- prometheus.MustNewConstMetric(m.rate, prometheus.GaugeValue, float64(t.CompactionRate), n, tr)
		}
		for _, d := range s.Device {
			ch <- prometheus.MustNewConstMetric(m.devUtil, prometheus.GaugeValue, d.Utilisation, n, d.Class)
			ch <- prometheus.MustNewConstMetric(m.devWait, prometheus.GaugeValue, d.MeanWait.Seconds(), n, d.Class)
		}
	}
}
