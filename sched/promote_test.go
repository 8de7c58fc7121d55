package sched

import (
	"testing"

	"github.com/netdir/netdir/wire"
)

func TestCandidatesSumsReportsAndTakesTheSketchAsAFloor(t *testing.T) {
	a, b := []byte("a"), []byte("b")
	reports := [][]KeyCount{{{Key: a, Count: 3}, {Key: b, Count: 1}}, {{Key: a, Count: 4}}}
	est := map[wire.KeyHash]uint64{wire.HashKey(b): 9}
	got := Candidates(reports, wire.HashKey, func(h wire.KeyHash) uint64 { return est[h] })
	if len(got) != 2 {
		t.Fatalf("got %d candidates, want 2", len(got))
	}
	counts := map[string]uint64{}
	for i, c := range got {
		counts[string(c.Key)] = c.Count
		if i > 0 && string(got[i-1].Hash[:]) >= string(c.Hash[:]) {
			t.Errorf("candidates not in hash order")
		}
	}
	if counts["a"] != 7 || counts["b"] != 9 {
		t.Errorf("counts %v, want a=7 (3+4) and b=9 (the sketch's floor)", counts)
	}
}

func TestCopyLoadSpreadsAKeysShareOverItsLocations(t *testing.T) {
	load := CopyLoad([]HotKeyLoad{{Locs: []wire.NodeID{1, 2}, Requests: 50}, {Locs: []wire.NodeID{2}, Requests: 10}}, 100)
	if load[1] != 0.25 || load[2] != 0.35 {
		t.Errorf("load %v, want 1: 0.25, 2: 0.35", load)
	}
	if len(CopyLoad([]HotKeyLoad{{Locs: []wire.NodeID{1}, Requests: 5}}, 0)) != 0 {
		t.Error("no requests at all must give no load")
	}
}

func TestLocationsPutsTheChainFirstAndCopiesByShare(t *testing.T) {
	nodes := []wire.NodeID{1, 2, 3, 4, 5, 6, 7, 8}
	chain := []wire.NodeID{1, 2, 3}
	locs := Locations(chain, nodes, 0.5, map[wire.NodeID]float64{})
	if want := CopyCount(0.5, 8, 3); len(locs) != want {
		t.Fatalf("%d locations, want CopyCount's %d", len(locs), want)
	}
	for i, n := range chain {
		if locs[i] != n {
			t.Fatalf("locations %v do not start with the chain %v", locs, chain)
		}
	}
	if got := Locations(chain, nodes, 0.001, map[wire.NodeID]float64{}); len(got) != 3 {
		t.Errorf("a cool key got %v, want its chain only", got)
	}
}

func TestRackCountSpreadsByTheRackHeadroom(t *testing.T) {
	for _, c := range []struct {
		share float64
		racks int
		want  int
	}{
		{0.001, 32, 6},  // 0.032/0.006
		{0.0001, 32, 1}, // cooler than a rack's headroom
		{0.067, 32, 30}, // the hottest key at zipf 0.99 over 1M keys
		{0.19, 32, 32},  // zipf 1.2's hottest
		{0.5, 64, 32},   // at most 32
		{0.3, 2, 2},     // at most the racks there are
	} {
		if got := RackCount(c.share, c.racks); got != c.want {
			t.Errorf("RackCount(%g, %d) = %d, want %d", c.share, c.racks, got, c.want)
		}
	}
}
