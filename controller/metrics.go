package controller

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the controller's state as Prometheus metrics.
type Collector struct {
	c                                             *Controller
	rounds, promotions, evictions, size, capacity *prometheus.Desc
	agentReports, agentHits, agentMisses          *prometheus.Desc
	qosGeneration                                 *prometheus.Desc
	qosPolicy, qosQueued, qosServed, qosThrottled *prometheus.Desc
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

		qosGeneration: d("qos_generation", "Generation of the QoS configuration (grows with every change)."),
		qosPolicy: prometheus.NewDesc("netdir_controller_qos_policy", "A tenant's dmClock policy in force (ops/s; 0: none).",
			[]string{"tenant", "id", "param"}, nil),
		qosQueued: prometheus.NewDesc("netdir_controller_qos_queued", "A tenant's requests queued over the nodes (last reports).",
			[]string{"tenant", "id"}, nil),
		qosServed: prometheus.NewDesc("netdir_controller_qos_served_total", "A tenant's requests served over the nodes, by dmClock phase.",
			[]string{"tenant", "id", "phase"}, nil),
		qosThrottled: prometheus.NewDesc("netdir_controller_qos_throttled_total", "A tenant's requests that waited for its limit, over the nodes.",
			[]string{"tenant", "id"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.rounds, m.promotions, m.evictions, m.size, m.capacity,
		m.agentReports, m.agentHits, m.agentMisses, m.qosGeneration, m.qosPolicy, m.qosQueued, m.qosServed, m.qosThrottled} {
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
	ch <- prometheus.MustNewConstMetric(m.qosGeneration, prometheus.GaugeValue, float64(c.QoS().Generation))
	_, _, tenants := c.QoSDump()
	for _, t := range tenants {
		name, id := t.Name, strconv.Itoa(int(t.ID))
		ch <- prometheus.MustNewConstMetric(m.qosPolicy, prometheus.GaugeValue, t.Policy.Reservation, name, id, "reservation")
		ch <- prometheus.MustNewConstMetric(m.qosPolicy, prometheus.GaugeValue, t.Policy.Weight, name, id, "weight")
		ch <- prometheus.MustNewConstMetric(m.qosPolicy, prometheus.GaugeValue, t.Policy.Limit, name, id, "limit")
		ch <- prometheus.MustNewConstMetric(m.qosQueued, prometheus.GaugeValue, float64(t.Queued), name, id)
		ch <- prometheus.MustNewConstMetric(m.qosServed, prometheus.CounterValue, float64(t.ServedReservation), name, id, "reservation")
		ch <- prometheus.MustNewConstMetric(m.qosServed, prometheus.CounterValue, float64(t.ServedWeight), name, id, "weight")
		ch <- prometheus.MustNewConstMetric(m.qosThrottled, prometheus.CounterValue, float64(t.Throttled), name, id)
	}
}
