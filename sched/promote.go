package sched

import (
	"math"
	"slices"

	"github.com/netdir/netdir/wire"
)

// Candidates merges the nodes' hot-key reports into the round's
// candidates: a key's count is the sum of what the nodes served of it,
// raised to the miss sketch's estimate (estimate, by hash), which sees
// every miss through the data plane where the nodes' own top-k undercount.
// Keys come out in hash order, so that a round is deterministic. hash is
// wire.HashKey, or a memo of it.
func Candidates(reports [][]KeyCount, hash func([]byte) wire.KeyHash, estimate func(wire.KeyHash) uint64) []Candidate {
	var m CandidateMerger
	out := m.Merge(reports, hash, estimate)
	slices.SortFunc(out, func(a, b Candidate) int { return slices.Compare(a.Hash[:], b.Hash[:]) })
	return out
}

// CandidateMerger merges reports as Candidates does, keeping its map and
// slice from one round to the next: a caller that needs no hash order
// (HotKeys.Round takes candidates in any order) saves the sort and the
// allocations of every round.
type CandidateMerger struct {
	index map[wire.KeyHash]int
	out   []Candidate
}

// Merge is Candidates in the order the keys first appear in reports. The
// result is valid until the next Merge.
func (m *CandidateMerger) Merge(reports [][]KeyCount, hash func([]byte) wire.KeyHash, estimate func(wire.KeyHash) uint64) []Candidate {
	if m.index == nil {
		m.index = map[wire.KeyHash]int{}
	}
	clear(m.index)
	out := m.out[:0]
	for _, r := range reports {
		for _, kc := range r {
			h := hash(kc.Key)
			if i, ok := m.index[h]; ok {
				out[i].Count += kc.Count
			} else {
				m.index[h] = len(out)
				out = append(out, Candidate{Hash: h, Key: kc.Key, Count: kc.Count})
			}
		}
	}
	for i := range out {
		out[i].Count = max(out[i].Count, estimate(out[i].Hash))
	}
	m.out = out
	return out
}

// CopyLoad is each node's share of all requests for the directory keys it
// holds, on its chain or as a copy, by the keys' requests in the last round
// (HotKeyLoad.Requests), evenly over their locations: the load that
// PlaceExtras places the next copies against, so that copies spread over
// the nodes rather than go to the lowest ids of a directory's first keys.
func CopyLoad(keys []HotKeyLoad, all uint64) map[wire.NodeID]float64 {
	load := map[wire.NodeID]float64{}
	if all == 0 {
		return load
	}
	for _, k := range keys {
		for _, n := range k.Locs {
			load[n] += float64(k.Requests) / float64(all) / float64(len(k.Locs))
		}
	}
	return load
}

// Locations is the LocationList of a key promoted with share of all
// requests: its chain, then CopyCount's extras placed by PlaceExtras
// (which adds their expected load to load).
func Locations(chain, nodes []wire.NodeID, share float64, load map[wire.NodeID]float64) []wire.NodeID {
	k := CopyCount(share, len(nodes), len(chain)) - len(chain)
	extras := PlaceExtras(chain, nodes, load, k, share/float64(k+len(chain)))
	return append(slices.Clone(chain), extras...)
}

// RackHeadroom is how far above its fair share (1/racks of all requests)
// a rack holding a copy of a key that the spine spreads may be expected to
// run. It is much smaller than CopyHeadroom: a rack's excess is every one
// of its nodes' excess, and no weight inside the rack can move it out;
// the spine's two choices even out what is left.
const RackHeadroom = 0.005

// RackCount is the racks a key that draws share of all requests is spread
// over by the spine, CopyCount's rule at rack granularity: every rack
// carries about (1−share)/racks of the other keys, so one of c racks
// holding the key stays within (1+RackHeadroom)/racks when c ≥
// share·racks / (RackHeadroom + share). It is at least 1 (the home rack)
// and at most the racks there are, and 32.
func RackCount(share float64, racks int) int {
	want := int(math.Ceil(share * float64(racks) / (RackHeadroom + share)))
	return min(max(want, 1), racks, 32)
}

// RackCopyHeadroom is RackCopies' default headroom: how far above its fair
// share a node holding a copy of a spread key in a remote rack may be
// expected to run. It is much tighter than CopyHeadroom: a remote rack's
// copies have no chain to fall back on, and the coarse loop moves load off
// them only past its settle band. At 1024 nodes (BENCHMARKS, "Simulator")
// 0.03 keeps the open loop's max/mean where listing the whole rack has it
// (1.046) with half the copies; 0.1 (a third of them) gave 1.049–1.054.
const RackCopyHeadroom = 0.03

// RackCopies is the LocationList length, in each rack other than its
// home, of a key that draws share of all requests and that the spine
// spreads over spread of racks racks of nodes nodes each: CopyCount's rule
// with the given headroom for the key's share of one rack's requests,
// share·racks/spread (the spine's two choices even its reads over its
// racks), at least one node (the rack primary) and at most the rack and
// 32. It copies the key only to as many nodes as its load there needs,
// where listing the whole rack costs a copy and a VSB per commit at every
// node.
func RackCopies(share float64, spread, racks, nodes int, headroom float64) int {
	local := min(1, share*float64(racks)/float64(max(spread, 1)))
	want := int(math.Ceil(local * float64(nodes) / (headroom + local)))
	return min(max(want, 1), nodes, 32)
}
