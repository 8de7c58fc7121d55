// Package sched holds netdir's pure scheduling policies: which keys are hot,
// where their copies go, and (with HATS) how load is split. Like the
// directory core it does no I/O and reads no clock, so the controller, the
// simulator and tests run the same decisions. Per-tenant QoS (dmClock) is
// its subpackage dmclock.
package sched

import (
	"cmp"
	"math"
	"slices"

	"github.com/netdir/netdir/wire"
)

// DirectorySize is the default directory capacity for n nodes: Pegasus shows
// that O(n log n) hot keys suffice to balance any skew; we keep 4·n·log2(n),
// at least 64, capped by the data plane's capacity.
func DirectorySize(n, capacity int) int {
	if n < 2 {
		return min(64, capacity)
	}
	d := int(math.Ceil(4 * float64(n) * math.Log2(float64(n))))
	return min(max(d, 64), capacity)
}

// HotKeyConfig tunes promotion.
type HotKeyConfig struct {
	Capacity   int     // directory size
	PromoteMin uint64  // a key needs this many requests in a round to be promoted
	Margin     float64 // a candidate displaces a cached key only if hotter by this factor (hysteresis); default 1.5
	ColdRounds int     // a cached key below PromoteMin/2 for this many rounds is evicted; default 3
	Nodes      int     // nodes in the rack, for copy counts
	Chain      int     // chain length R
}

// Candidate is a key seen in a round, with its request count (from slot
// counters for cached keys, from node reports and the miss sketch otherwise).
type Candidate struct {
	Hash  wire.KeyHash
	Key   []byte
	Count uint64
}

// Decision is one round's outcome.
type Decision struct {
	Promote []Candidate
	Evict   []wire.KeyHash
}

// HotKeys decides promotions and evictions round by round.
type HotKeys struct {
	cfg    HotKeyConfig
	cached map[wire.KeyHash]*cachedKey
}

type cachedKey struct {
	count uint64 // this round
	cold  int    // consecutive cold rounds
}

// NewHotKeys returns a manager with an empty directory.
func NewHotKeys(cfg HotKeyConfig) *HotKeys {
	if cfg.Margin == 0 {
		cfg.Margin = 1.5
	}
	if cfg.ColdRounds == 0 {
		cfg.ColdRounds = 3
	}
	if cfg.PromoteMin == 0 {
		cfg.PromoteMin = 1
	}
	return &HotKeys{cfg: cfg, cached: map[wire.KeyHash]*cachedKey{}}
}

// Cached reports whether h is in the directory as the manager believes.
func (m *HotKeys) Cached(h wire.KeyHash) bool { _, ok := m.cached[h]; return ok }

// Len is the number of cached keys.
func (m *HotKeys) Len() int { return len(m.cached) }

// Forget drops h (the controller evicted it for another reason, or the
// install failed).
func (m *HotKeys) Forget(h wire.KeyHash) { delete(m.cached, h) }

// Round takes this round's counts: cachedCounts for keys in the directory
// (hit-counter deltas) and candidates for keys outside it. It returns the
// keys to promote (hottest first) and to evict, and records the decision.
func (m *HotKeys) Round(cachedCounts map[wire.KeyHash]uint64, candidates []Candidate) Decision {
	var d Decision
	for h, ck := range m.cached {
		ck.count = cachedCounts[h]
		if ck.count < m.cfg.PromoteMin/2+1 {
			ck.cold++
		} else {
			ck.cold = 0
		}
		if ck.cold >= m.cfg.ColdRounds {
			d.Evict = append(d.Evict, h)
		}
	}
	for _, h := range d.Evict {
		delete(m.cached, h)
	}
	// Only keys with PromoteMin requests can be promoted: sorting just
	// those (most of a round's candidates are cold) decides the same.
	var cands []Candidate
	for _, c := range candidates {
		if c.Count >= m.cfg.PromoteMin {
			cands = append(cands, c)
		}
	}
	slices.SortFunc(cands, func(a, b Candidate) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return slices.Compare(a.Hash[:], b.Hash[:])
	})
	for _, c := range cands {
		if m.Cached(c.Hash) {
			continue
		}
		if len(m.cached) >= m.cfg.Capacity {
			victim, ok := m.coldest()
			if !ok || float64(c.Count) < m.cfg.Margin*float64(m.cached[victim].count) {
				break // candidates are sorted: no later one displaces either
			}
			delete(m.cached, victim)
			d.Evict = append(d.Evict, victim)
		}
		m.cached[c.Hash] = &cachedKey{count: c.Count}
		d.Promote = append(d.Promote, c)
	}
	return d
}

func (m *HotKeys) coldest() (wire.KeyHash, bool) {
	var best wire.KeyHash
	found := false
	for h, ck := range m.cached {
		if !found || ck.count < m.cached[best].count ||
			(ck.count == m.cached[best].count && slices.Compare(h[:], best[:]) < 0) {
			best, found = h, true
		}
	}
	return best, found
}

// CopyHeadroom is how far above its fair share (1/n of all requests) a
// node holding a copy of a hot key may be expected to run.
const CopyHeadroom = 0.25

// CopyCount is the LocationList length for a key that draws share of all
// requests, at least the chain and at most the rack. Every node already
// carries its part of the other keys, about (1−share)/n, so a node holding
// one of c copies runs at (1−share)/n + share/c; that stays within
// (1+CopyHeadroom)/n when c ≥ share·n / (CopyHeadroom + share). (Sizing
// copies against 1/n alone put copy holders at up to twice their share.)
func CopyCount(share float64, n, chain int) int {
	want := int(math.Ceil(share * float64(n) / (CopyHeadroom + share)))
	return min(max(want, chain), n, 32)
}

// PlaceExtras chooses k extra nodes outside chain, least expected load
// first, and adds per to each chosen node's load. Among equally loaded
// nodes it takes those farthest on the ring (nodes sorted by id) from the
// chain: with ring placement a chain's neighbours already carry its
// partitions, and the coarse scheduler can only move load between nodes
// that share a chain or a LocationList. Remaining ties go by id.
func PlaceExtras(chain []wire.NodeID, nodes []wire.NodeID, load map[wire.NodeID]float64, k int, per float64) []wire.NodeID {
	ring := slices.Sorted(slices.Values(nodes))
	var at []int // the chain members' places on the ring
	for _, c := range chain {
		if j, ok := slices.BinarySearch(ring, c); ok {
			at = append(at, j)
		}
	}
	// Each node's sort keys, worked out once rather than per comparison.
	type option struct {
		node wire.NodeID
		load float64
		away int // ring distance to the nearest chain member
	}
	var free []option
	for _, n := range nodes {
		if slices.Contains(chain, n) {
			continue
		}
		i, _ := slices.BinarySearch(ring, n)
		d := len(ring)
		for _, j := range at {
			x := (i - j + len(ring)) % len(ring)
			d = min(d, x, len(ring)-x)
		}
		free = append(free, option{node: n, load: load[n], away: d})
	}
	slices.SortFunc(free, func(a, b option) int {
		return cmp.Or(cmp.Compare(a.load, b.load), cmp.Compare(b.away, a.away), cmp.Compare(a.node, b.node))
	})
	free = free[:min(k, len(free))]
	out := make([]wire.NodeID, len(free))
	for i, o := range free {
		out[i] = o.node
		load[o.node] += per
	}
	return out
}
