package controller

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the controller's state as Prometheus metrics.
type Collector struct {
	c                                             *Controller
	rounds, promotions, evictions, size, capacity *prometheus.Desc
	agentReports, agentHits, agentMisses          *prometheus.Desc
}

// NewCollector returns a collector for c.
func NewCollector(c *Controller) *Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("netdir_controller_"+name, help, nil, nil)
	}
	return &Collector{
		c:            c,
		rounds:       d("hot_key_rounds_total", "Hot-key rounds run."),
		promotions:   d("promotions_total", "Keys promoted into the directory."),
		evictions:    d("evictions_total", "Keys evicted from the directory."),
		size:         d("directory_entries", "Keys in the directory."),
		capacity:     d("directory_capacity", "Directory capacity."),
		agentReports: d("agent_reports_total", "Host agents' counter reports taken (ReportAgentStats; duplicates not counted)."),
		agentHits:    d("agent_slot_hits_total", "Directory hits host agents reported."),
		agentMisses:  d("agent_misses_total", "Misses host agents' sketches counted (row 0's growth)."),
	}
}

// Describe implements prometheus.Collector.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.rounds, m.promotions, m.evictions, m.size, m.capacity,
		m.agentReports, m.agentHits, m.agentMisses} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Collector) Collect(ch chan<- prometheus.Metric) {
	c := m.c
	c.mu.Lock()
	rounds, prom, ev := c.rounds, c.promotions, c.evictions
	c.mu.Unlock()
	size := c.directorySize()
	ch <- prometheus.MustNewConstMetric(m.rounds, prometheus.CounterValue, float64(rounds))
	ch <- prometheus.MustNewConstMetric(m.promotions, prometheus.CounterValue, float64(prom))
	ch <- prometheus.MustNewConstMetric(m.evictions, prometheus.CounterValue, float64(ev))
	ch <- prometheus.MustNewConstMetric(m.size, prometheus.GaugeValue, float64(size))
	ch <- prometheus.MustNewConstMetric(m.capacity, prometheus.GaugeValue, float64(c.cfg.Capacity))
	at := c.AgentTotals()
	ch <- prometheus.MustNewConstMetric(m.agentReports, prometheus.CounterValue, float64(at.Reports))
	ch <- prometheus.MustNewConstMetric(m.agentHits, prometheus.CounterValue, float64(at.Hits))
	ch <- prometheus.MustNewConstMetric(m.agentMisses, prometheus.CounterValue, float64(at.Misses))
}
