package model

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/directory"
)

// Collector exposes the software switch's counters to Prometheus: the
// directory's (hits, misses, replies, accepted VSBs, drops by reason) and
// the datagram counters of the UDP shell.
type Collector struct {
	s                        *Switch
	packets, drops, datagram *prometheus.Desc
}

// NewCollector returns s's collector.
func NewCollector(s *Switch) *Collector {
	return &Collector{
		s: s,
		packets: prometheus.NewDesc("netdir_switch_packets_total",
			"Packets handled by the directory, by outcome (vsb: VSBs accepted).", []string{"outcome"}, nil),
		drops: prometheus.NewDesc("netdir_switch_drops_total",
			"Packets the directory dropped, by reason (vsb-*: VSBs refused).", []string{"reason"}, nil),
		datagram: prometheus.NewDesc("netdir_switch_datagrams_total",
			"Datagrams of the switch's UDP shell, by event.", []string{"event"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.packets
	ch <- c.drops
	ch <- c.datagram
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	d, st := c.s.Counters()
	count := func(desc *prometheus.Desc, v uint64, label string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), label)
	}
	count(c.packets, d.Hits, "hit")
	count(c.packets, d.Misses, "miss")
	count(c.packets, d.Replies, "reply")
	count(c.packets, d.VSBs, "vsb")
	count(c.packets, d.Passed, "passed")
	for _, r := range directory.Reasons() {
		count(c.drops, d.Drops[r], r.String())
	}
	for _, e := range []struct {
		name string
		n    uint64
	}{
		{"received", st.Received}, {"forwarded", st.Forwarded}, {"relayed", st.Relayed}, {"vsb-copies", st.VSBCopies},
		{"send-errors", st.SendErrors}, {"oversize", st.Oversize}, {"unknown-reply", st.UnknownReply},
		{"node-ops", st.NodeOps}, {"no-node-addr", st.NoNodeAddr}, {"pending-evicted", st.PendingEvicted},
	} {
		count(c.datagram, e.n, e.name)
	}
}
