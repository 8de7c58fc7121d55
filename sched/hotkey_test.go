package sched

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/netdir/netdir/wire"
)

func key(i int) Candidate {
	k := []byte(fmt.Sprintf("k%d", i))
	return Candidate{Hash: wire.HashKey(k), Key: k}
}

func cand(i int, n uint64) Candidate { c := key(i); c.Count = n; return c }

func TestPromoteHottestFirstUpToCapacity(t *testing.T) {
	m := NewHotKeys(HotKeyConfig{Capacity: 2, PromoteMin: 10})
	d := m.Round(nil, []Candidate{cand(1, 50), cand(2, 5), cand(3, 100), cand(4, 20)})
	if len(d.Promote) != 2 || d.Promote[0].Hash != key(3).Hash || d.Promote[1].Hash != key(1).Hash {
		t.Fatalf("promoted %v, want k3 then k1", d.Promote)
	}
	if len(d.Evict) != 0 || m.Len() != 2 {
		t.Fatalf("evicted %v, len %d", d.Evict, m.Len())
	}
}

func TestHysteresis(t *testing.T) {
	m := NewHotKeys(HotKeyConfig{Capacity: 1, PromoteMin: 10, Margin: 1.5})
	m.Round(nil, []Candidate{cand(1, 100)})
	// 140 is not 1.5× hotter than 100: k1 stays.
	d := m.Round(map[wire.KeyHash]uint64{key(1).Hash: 100}, []Candidate{cand(2, 140)})
	if len(d.Promote) != 0 || len(d.Evict) != 0 {
		t.Fatalf("flapped: %+v", d)
	}
	// 151 is: k2 displaces k1.
	d = m.Round(map[wire.KeyHash]uint64{key(1).Hash: 100}, []Candidate{cand(2, 151)})
	if len(d.Promote) != 1 || d.Promote[0].Hash != key(2).Hash || len(d.Evict) != 1 || d.Evict[0] != key(1).Hash {
		t.Fatalf("no displacement: %+v", d)
	}
}

func TestColdKeysEvictedAfterRounds(t *testing.T) {
	m := NewHotKeys(HotKeyConfig{Capacity: 4, PromoteMin: 10, ColdRounds: 2})
	m.Round(nil, []Candidate{cand(1, 100)})
	if d := m.Round(map[wire.KeyHash]uint64{}, nil); len(d.Evict) != 0 {
		t.Fatalf("evicted after one cold round: %+v", d)
	}
	if d := m.Round(map[wire.KeyHash]uint64{}, nil); len(d.Evict) != 1 || m.Cached(key(1).Hash) {
		t.Fatalf("not evicted after two cold rounds: %+v", d)
	}
	// A warm round resets the count.
	m.Round(nil, []Candidate{cand(2, 100)})
	m.Round(map[wire.KeyHash]uint64{}, nil)
	m.Round(map[wire.KeyHash]uint64{key(2).Hash: 50}, nil)
	if d := m.Round(map[wire.KeyHash]uint64{}, nil); len(d.Evict) != 0 {
		t.Fatalf("evicted although warm in between: %+v", d)
	}
}

func TestDirectorySize(t *testing.T) {
	for _, c := range []struct{ n, capacity, want int }{{1, 4096, 64}, {8, 4096, 96}, {16, 4096, 256}, {1000, 4096, 4096}} {
		if got := DirectorySize(c.n, c.capacity); got != c.want {
			t.Errorf("DirectorySize(%d, %d) = %d, want %d", c.n, c.capacity, got, c.want)
		}
	}
}

func TestCopiesAndPlacement(t *testing.T) {
	if got := CopyCount(0.5, 8, 3); got != 6 {
		t.Errorf("CopyCount(0.5, 8, 3) = %d, want 6", got)
	}
	if got := CopyCount(0.01, 8, 3); got != 3 {
		t.Errorf("a lukewarm key gets %d copies, want the chain (3)", got)
	}
	if got := CopyCount(1, 64, 3); got != 32 {
		t.Errorf("copies capped at %d, want 32", got)
	}
	// Against the base load: the hottest key at zipf 0.99 (9.6 %) on 16
	// nodes needs 5 copies, not the chain's 3, for its holders to stay
	// within the headroom.
	for _, c := range []struct {
		share float64
		n     int
	}{{0.096, 16}, {0.2, 16}, {0.087, 16}, {0.096, 8}, {0.3, 32}, {0.02, 16}} {
		k := CopyCount(c.share, c.n, 3)
		fair := 1 / float64(c.n)
		if held := (1-c.share)*fair + c.share/float64(k); k < c.n && held > (1+CopyHeadroom)*fair+1e-12 {
			t.Errorf("share %v on %d nodes: %d copies put a holder at %.4f, over %.4f", c.share, c.n, k, held, (1+CopyHeadroom)*fair)
		}
	}
	if got := CopyCount(0.096, 16, 3); got != 5 {
		t.Errorf("CopyCount(0.096, 16, 3) = %d, want 5", got)
	}
	load := map[wire.NodeID]float64{4: 0.2, 5: 0.1}
	got := PlaceExtras([]wire.NodeID{1, 2, 3}, []wire.NodeID{1, 2, 3, 4, 5, 6}, load, 2, 0.25)
	if fmt.Sprint(got) != "[6 5]" {
		t.Fatalf("extras %v, want [6 5] (least loaded outside the chain)", got)
	}
	if load[6] != 0.25 || load[5] != 0.35 {
		t.Fatalf("loads not charged: %v", load)
	}
	// Equally loaded, the nodes farthest on the ring from the chain go
	// first: 13 for the chain 4, 5, 6 of 16 nodes (7 away), then 12 and 14, then 11.
	var ring []wire.NodeID
	for i := range wire.NodeID(16) {
		ring = append(ring, i+1)
	}
	got = PlaceExtras([]wire.NodeID{4, 5, 6}, ring, map[wire.NodeID]float64{}, 4, 0.1)
	if fmt.Sprint(got) != "[13 12 14 11]" {
		t.Fatalf("extras %v, want [13 12 14 11] (farthest from the chain first)", got)
	}
}

// A cached key displaced early in a round is a candidate like any other
// later in it: here k1 makes room for k2, then displaces the colder k4.
func TestRoundRepromotesAKeyItDisplaced(t *testing.T) {
	m := NewHotKeys(HotKeyConfig{Capacity: 2, PromoteMin: 10})
	m.Round(nil, []Candidate{cand(1, 100), cand(4, 100)})
	d := m.Round(map[wire.KeyHash]uint64{key(1).Hash: 10, key(4).Hash: 20}, []Candidate{cand(2, 100), cand(1, 60)})
	if len(d.Promote) != 2 || d.Promote[0].Hash != key(2).Hash || d.Promote[1].Hash != key(1).Hash {
		t.Errorf("promoted %v, want k2 then k1", d.Promote)
	}
	if len(d.Evict) != 2 || d.Evict[0] != key(1).Hash || d.Evict[1] != key(4).Hash {
		t.Errorf("evicted %v, want k1 then k4", d.Evict)
	}
}

// Round decides by count and hash alone: the candidates' order and the
// cold ones among them change nothing, over rounds of random counts.
func TestRoundIgnoresOrderAndColdCandidates(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cfg := HotKeyConfig{Capacity: 8, PromoteMin: 20}
	a, b := NewHotKeys(cfg), NewHotKeys(cfg)
	for round := range 200 {
		cached := map[wire.KeyHash]uint64{}
		var hot, all []Candidate
		for i := range 40 {
			c := cand(i, uint64(r.IntN(60)))
			if r.IntN(3) == 0 {
				cached[c.Hash] = uint64(r.IntN(60))
			}
			all = append(all, c)
			if c.Count >= cfg.PromoteMin {
				hot = append(hot, c)
			}
		}
		r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		da, db := a.Round(cached, hot), b.Round(cached, all)
		slices.SortFunc(da.Evict, func(x, y wire.KeyHash) int { return slices.Compare(x[:], y[:]) })
		slices.SortFunc(db.Evict, func(x, y wire.KeyHash) int { return slices.Compare(x[:], y[:]) })
		if !slices.Equal(da.Evict, db.Evict) || !slices.EqualFunc(da.Promote, db.Promote,
			func(x, y Candidate) bool { return x.Hash == y.Hash && x.Count == y.Count }) {
			t.Fatalf("round %d: %v and %v differ", round, da, db)
		}
	}
}

func TestRoundPromotesAKeyAtPromoteMin(t *testing.T) {
	m := NewHotKeys(HotKeyConfig{Capacity: 2, PromoteMin: 10})
	if d := m.Round(nil, []Candidate{cand(1, 10), cand(2, 9)}); len(d.Promote) != 1 || d.Promote[0].Hash != key(1).Hash {
		t.Errorf("promoted %v, want k1 alone", d.Promote)
	}
}

// placeExtrasByComparison is PlaceExtras as it was, working out a node's
// ring distance in every comparison: the reference for the one that
// works it out once per node.
func placeExtrasByComparison(chain []wire.NodeID, nodes []wire.NodeID, load map[wire.NodeID]float64, k int, per float64) []wire.NodeID {
	ring := slices.Sorted(slices.Values(nodes))
	away := func(n wire.NodeID) int {
		i, d := slices.Index(ring, n), len(ring)
		for _, c := range chain {
			if j := slices.Index(ring, c); j >= 0 {
				x := (i - j + len(ring)) % len(ring)
				d = min(d, x, len(ring)-x)
			}
		}
		return d
	}
	var free []wire.NodeID
	for _, n := range nodes {
		if !slices.Contains(chain, n) {
			free = append(free, n)
		}
	}
	slices.SortFunc(free, func(a, b wire.NodeID) int {
		return cmp.Or(cmp.Compare(load[a], load[b]), cmp.Compare(away(b), away(a)), cmp.Compare(a, b))
	})
	free = free[:min(k, len(free))]
	for _, n := range free {
		load[n] += per
	}
	return free
}

func TestPlaceExtrasMatchesTheReferenceOnRandomInput(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := range 2000 {
		nodes := r.Perm(1 + r.IntN(40))
		ids := make([]wire.NodeID, 0, len(nodes))
		for _, n := range nodes {
			if r.IntN(4) > 0 {
				ids = append(ids, wire.NodeID(n+1))
			}
		}
		var chain []wire.NodeID
		for range r.IntN(4) {
			chain = append(chain, wire.NodeID(1+r.IntN(len(nodes)+2)))
		}
		load := map[wire.NodeID]float64{}
		for _, n := range ids {
			if r.IntN(3) > 0 {
				load[n] = float64(r.IntN(4)) / 8 // ties, so that distance and id decide too
			}
		}
		want := maps.Clone(load)
		k := r.IntN(len(nodes) + 2)
		got := PlaceExtras(chain, ids, load, k, 0.125)
		ref := placeExtrasByComparison(chain, ids, want, k, 0.125)
		if !slices.Equal(got, ref) || !maps.Equal(load, want) {
			t.Fatalf("trial %d: chain %v nodes %v k %d: placed %v, want %v", trial, chain, ids, k, got, ref)
		}
	}
}
