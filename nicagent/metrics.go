package nicagent

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// Collector exposes an agent's counters to Prometheus, read from the maps
// at every scrape.
type Collector struct {
	a *Agent

	packets, switched, drops, other  *prometheus.Desc
	entries, nodes, resolved, synced *prometheus.Desc
	sync, latency, load, reports     *prometheus.Desc
}

// NewCollector returns a's collector.
func NewCollector(a *Agent) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("netdir_agent_"+name, help, labels, nil)
	}
	return &Collector{
		a:        a,
		packets:  d("packets_total", "Packets handled by the directory, by outcome.", "outcome"),
		switched: d("switched_total", "Requests for which the fine score took the second candidate."),
		drops:    d("drops_total", "Packets dropped, by reason (directory.Reason).", "reason"),
		other:    d("events_total", "Agent events beyond the contract's counters.", "event"),
		entries:  d("directory_entries", "Keys in the agent's directory."),
		nodes:    d("nodes", "Storage nodes in the controller's node table."),
		resolved: d("nodes_resolved", "Storage nodes whose address and next-hop MAC are installed."),
		synced:   d("synced", "1 while the maps follow the controller's directory."),
		sync:     d("sync_total", "Directory subscription events.", "event"),
		latency:  d("node_latency_ns", "EWMA reply latency learnt of a node.", "node"),
		load:     d("node_load", "Queue depth last reported by a node.", "node"),
		reports:  d("reports_total", "Counter reports to the controller, by result.", "result"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.switched, c.drops, c.other, c.entries, c.nodes,
		c.resolved, c.synced, c.sync, c.latency, c.load, c.reports} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	dp := c.a.Dataplane()
	if dp == nil {
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if s, err := dp.Stats(); err == nil {
		counter(c.packets, s.Hits, "hit")
		counter(c.packets, s.Misses, "miss")
		counter(c.packets, s.Replies, "reply")
		counter(c.packets, s.VSBs, "vsb")
		counter(c.packets, s.Passed, "passed")
		counter(c.switched, s.Switched)
		for _, r := range directory.Reasons() {
			counter(c.drops, s.Drops[r], r.String())
		}
		counter(c.other, s.NoAddr, "no-address")
		counter(c.other, s.FragFwd, "fragment-forwarded")
		counter(c.other, s.FragMiss, "fragment-missed")
		counter(c.other, s.TCFwd, "tc-forwarded")
		counter(c.other, s.XDPTx, "xdp-tx")
	}
	gauge(c.entries, float64(dp.Len()))
	ss := c.a.SyncStats()
	gauge(c.nodes, float64(ss.Nodes))
	gauge(c.resolved, float64(ss.Resolved))
	gauge(c.synced, map[bool]float64{false: 0, true: 1}[ss.Synced])
	counter(c.sync, ss.Snapshots, "snapshot")
	counter(c.sync, ss.Deltas, "delta")
	counter(c.sync, ss.Resubscribes, "resubscribe")
	counter(c.sync, ss.Errors, "error")
	rs := c.a.ReportStats()
	counter(c.reports, rs.Sent, "sent")
	counter(c.reports, rs.Failed, "failed")
	counter(c.reports, rs.Duplicates, "duplicate")
	c.a.mu.Lock()
	ids := make([]wire.NodeID, 0, len(c.a.nodes))
	for id := range c.a.nodes {
		ids = append(ids, id)
	}
	c.a.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		st, err := dp.Node(id)
		if err != nil {
			continue
		}
		gauge(c.latency, float64(st.Latency), strconv.Itoa(int(id)))
		gauge(c.load, float64(st.Load), strconv.Itoa(int(id)))
	}
}
