package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
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

func TestRackCopiesSizesARemoteRackByTheKeysLoadThere(t *testing.T) {
	for _, c := range []struct {
		share         float64
		spread, racks int
		want          int
	}{
		{0.065, 30, 32, 14}, // zipf 0.99's hottest: 6.9 % of a rack, 2.2 nodes' worth
		{0.19, 32, 32, 21},  // zipf 1.2's hottest: 19 % of a rack
		{0.001, 6, 32, 2},   // 0.5 % of a rack
		{0.0001, 1, 32, 1},  // 0.3 % of a rack: the rack primary alone
		{0.5, 2, 2, 27},     // half a rack's requests
		{0.9, 2, 64, 30},    // all of a rack's requests
		{0.01, 0, 32, 25},   // no racks to spread over counts as one
	} {
		got := RackCopies(c.share, c.spread, c.racks, 32, 0.1)
		if got != c.want {
			t.Errorf("RackCopies(%g, %d, %d, 32) = %d, want %d", c.share, c.spread, c.racks, got, c.want)
		}
		// A node holding one of the copies stays within the headroom (0.1)
		// of its fair share of the rack, 1/32; with one copy fewer it would not.
		local := min(1, c.share*float64(c.racks)/float64(max(c.spread, 1)))
		over := func(k int) bool { return (1-local)/32+local/float64(k) > (1+0.1)/32+1e-12 }
		if over(got) || got > 1 && !over(got-1) {
			t.Errorf("RackCopies(%g, %d, %d, 32) = %d copies: not the fewest within the headroom", c.share, c.spread, c.racks, got)
		}
	}
	if got := RackCopies(0.5, 2, 8, 4, 0.1); got != 4 {
		t.Errorf("RackCopies(0.5, 2, 8, 4, 0.1) = %d, want at most the rack's 4 nodes", got)
	}
	if a, b := RackCopies(0.065, 30, 32, 32, 0.25), RackCopies(0.065, 30, 32, 32, 0.03); a != 7 || b != 23 {
		t.Errorf("headroom 0.25 and 0.03 give %d and %d copies, want 7 and 23", a, b)
	}
}

// A merger kept over rounds gives each round what Candidates gives it.
func TestCandidateMergerMatchesCandidatesRoundAfterRound(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var m CandidateMerger
	for round := range 50 {
		reports := make([][]KeyCount, 1+r.IntN(8))
		for i := range reports {
			for range r.IntN(20) {
				reports[i] = append(reports[i], KeyCount{Key: []byte(fmt.Sprint("k", r.IntN(30))), Count: uint64(r.IntN(100))})
			}
		}
		est := func(h wire.KeyHash) uint64 { return uint64(h[0]) }
		want := Candidates(reports, wire.HashKey, est)
		got := slices.Clone(m.Merge(reports, wire.HashKey, est))
		slices.SortFunc(got, func(a, b Candidate) int { return slices.Compare(a.Hash[:], b.Hash[:]) })
		if !slices.EqualFunc(got, want, func(a, b Candidate) bool {
			return a.Hash == b.Hash && string(a.Key) == string(b.Key) && a.Count == b.Count
		}) {
			t.Fatalf("round %d: merged %v, want %v", round, got, want)
		}
	}
}
