package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/wire"
)

// TestControllerKeepsNewestNodeStats: the controller keeps the newest
// version per node, whatever order versions arrive in, hands them to the
// coarse loop, and exports them.
func TestControllerKeepsNewestNodeStats(t *testing.T) {
	c := agentsOnly(t)
	s := func(v uint64, reads uint64) gossip.NodeStats {
		return gossip.NodeStats{Node: 2, Version: v, At: time.Now(), Trees: []gossip.TreeStats{
			{Position: 0, Reads: reads, ReadNanos: reads * 1000, CompactionDebt: 7 << 20, MeanReadLatency: time.Microsecond},
		}, Device: []gossip.DeviceClass{{Class: "compaction", Utilisation: 0.5, MeanWait: time.Millisecond}}}
	}
	if !c.ObserveNodeStats(s(10, 100)) || c.ObserveNodeStats(s(9, 50)) || c.ObserveNodeStats(s(10, 60)) {
		t.Fatal("versions not taken newest-first")
	}
	if !c.ObserveNodeStats(s(11, 200)) {
		t.Fatal("a newer version refused")
	}
	got := c.NodeStats()[2]
	if got.Version != 11 || got.Trees[0].Reads != 200 {
		t.Fatalf("kept %+v", got)
	}
	c.mu.Lock()
	trees := c.coarse.trees[2]
	c.mu.Unlock()
	if len(trees) != 1 || trees[0].Reads != 200 || trees[0].MeanReadLatency != time.Microsecond || trees[0].CompactionDebt != 7<<20 {
		t.Fatalf("the coarse loop got %v", trees)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewStatsCollector(c))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gauge := func(name string, want float64) bool {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() == want {
					return true
				}
			}
		}
		return false
	}
	if !gauge("netdir_controller_node_tree_compaction_debt_bytes", 7<<20) {
		t.Fatal("no compaction debt of 7 MiB in the controller's metrics")
	}
	if !gauge("netdir_controller_node_device_utilisation", 0.5) || !gauge("netdir_controller_node_device_queue_wait_seconds", 0.001) {
		t.Fatal("the gossiped device utilisation and queue wait are not in the controller's metrics")
	}
}

// TestControllerGossip runs the controller's member and a node's on
// loopback: the node's stats reach the controller, and the expected loads
// the controller derives per tree reach the node.
func TestControllerGossip(t *testing.T) {
	c := agentsOnly(t)
	cg, err := gossip.Start(gossip.Config{Name: "controller", Bind: "127.0.0.1:0", OnStats: func(s gossip.NodeStats) { c.ObserveNodeStats(s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	c.AttachGossip(cg)
	ng, err := gossip.Start(gossip.Config{Name: "node-1", Bind: "127.0.0.1:0", Seeds: []string{cg.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer ng.Close()
	// Node 1 heads (position 0) a quarter of the partitions, and so on.
	for id := wire.NodeID(1); id <= 3; id++ {
		c.ObserveNodeStats(gossip.NodeStats{Node: id, Version: 1, Trees: []gossip.TreeStats{{Position: 0}, {Position: 1}, {Position: 2}}})
	}
	c.TreeExpected() // the epoch starts
	stats := gossip.NodeStats{Node: 1, Version: gossip.NextVersion(), At: time.Now(), Trees: []gossip.TreeStats{
		{Position: 0, Reads: 900}, {Position: 1, Reads: 90}, {Position: 2, Reads: 9},
	}}
	// Published again every 100 ms, as a node does every second.
	deadline := time.Now().Add(20 * time.Second)
	for c.NodeStats()[1].Trees[0].Reads != 900 {
		if time.Now().After(deadline) {
			t.Fatalf("the controller has %+v", c.NodeStats()[1])
		}
		if cg.Members() == 2 {
			stats.Version = gossip.NextVersion()
			if err := ng.PublishStats(stats); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	e := c.TreeExpected()
	if len(e[1]) != 3 || !(e[1][0] > e[1][1] && e[1][1] > e[1][2]) {
		t.Fatalf("node 1's expected load %v does not follow its reads", e[1])
	}
	if err := c.PublishExpected(e); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		if x, ok := ng.Expected(1); ok && len(x.Trees) == 3 && x.Trees[0] == e[1][0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node 1 never got its expected load")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
