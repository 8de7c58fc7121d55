package sched

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// The coarse scheduler's epoch L (HATS §4.2).
const (
	DefaultEpoch = 60 * time.Second
	MinEpoch     = 5 * time.Second
	MaxEpoch     = 120 * time.Second
)

// WeightScale is the total of one partition's or hot key's weights in a
// CoarsePlan: fine enough that directory.BucketsForWeights, not the
// weights, limits the split's resolution.
const WeightScale = 1 << 16

// NodeStats is what the coarse scheduler knows of one node for one epoch.
// Nodes gossip it (hashicorp/memberlist); where they do not, the controller
// fills it from the nodes' reports.
type NodeStats struct {
	Node wire.NodeID
	// ReadLatency is T_i, the node's mean read service time; 0 if unknown.
	ReadLatency time.Duration
	// Requests[j] is C for tree j: the requests the node served at chain
	// position j during the epoch (for ring placement, C_(i−j),j).
	Requests []uint64
	// Capacity bounds the node's rate in requests/s where something other
	// than read latency limits it (provisioning, or the bench's emulated
	// capacity); 0 if nothing does.
	Capacity float64
	// Background is the part of the node's device time in the epoch that
	// I/O other than reads took (WAL, flushes, compactions; 0 if unknown):
	// its reads have the rest, so its capacity is (1 − Background)·L/T. A
	// compacting node's T rises only by the reads' own waits behind
	// compaction, while compaction's share of the device is gone for every
	// read it could have served.
	Background float64
}

// maxBackground bounds NodeStats.Background: a node whose device is all
// background still gets a tenth of L/T, not a capacity of zero.
const maxBackground = 0.9

// HotKeyLoad is one directory key's traffic during the epoch.
type HotKeyLoad struct {
	Hash     wire.KeyHash
	Locs     []wire.NodeID // the chain first, then extras
	R        int           // chain length
	Requests uint64        // the slot's hits in the epoch
	// Weights is the split installed now, one per location; nil (or a
	// zero total) is even.
	Weights []uint32
}

// CoarseInput is one epoch's view of the cluster.
type CoarseInput struct {
	Epoch  time.Duration   // L; 0 means DefaultEpoch
	Nodes  []NodeStats     // nodes without stats count as average capacity and no chain load
	Chains [][]wire.NodeID // per partition, the chain (a power-of-two count, as in a layout.Map)
	// Weights is the split installed now per partition, one weight per
	// chain member; nil (or a nil entry, or a zero total) is even.
	Weights [][]uint32
	HotKeys []HotKeyLoad
	// Settle keeps the partitions' weights from moving on every epoch's
	// noise (zero: move all the way to balance every epoch).
	Settle Settle
}

// Settle makes the coarse weights settle from epoch to epoch. Without it
// every epoch moves the chains' load all the way to balance on counts and
// latencies measured over one epoch: their noise rewrites most partitions
// every epoch, and since a node's T rises with its load, moving load off a
// node makes it look fast the next epoch and load moves back.
type Settle struct {
	// Tolerance is the hysteresis band: load moves from a node only while
	// its utilisation exceeds the receiver's by more than this fraction
	// (then up to equal utilisation, damped).
	Tolerance float64
	// Sigmas widens the band by this many standard deviations of the
	// difference of the two nodes' measured utilisations: a node's count C
	// and its mean read time T over C reads each carry a relative noise of
	// about 1/sqrt(C), so the difference's is sqrt(2/C_h + 2/C_l). Short
	// epochs then move only on imbalances their counts can tell from noise.
	Sigmas float64
	// Damping is the part of the move to balance that an epoch makes (in
	// (0, 1]; 0 means 1): a feedback loop whose gain is under 1 settles
	// rather than overshooting.
	Damping float64
	// MinChange is the smallest change of a member's share of a partition
	// worth rewriting its weights: a partition whose members' shares all
	// move less keeps its installed weights.
	MinChange float64
}

// DefaultSettle is what the controller uses: a band of 5% plus three
// standard deviations of the measured utilisations' difference (about 32%
// for 500 reads per node in an epoch, 14% for 5,000), half of each move per
// epoch, and a partition is rewritten when a member gains or loses at least
// two of its 64 buckets. TestCoarseSettles holds it to a model with a
// node's T rising with its load.
var DefaultSettle = Settle{Tolerance: 0.05, Sigmas: 3, Damping: 0.5, MinChange: 2.0 / directory.Buckets}

// CoarsePlan is the expected state E and the weights that realise it.
type CoarsePlan struct {
	// Partitions holds one weight per chain member for every partition,
	// summing to WeightScale.
	Partitions [][]uint32
	// HotKeys holds one weight per location for every input hot key, in
	// input order, summing to WeightScale (even for a key without requests).
	HotKeys [][]uint32
	// Delta is Δ_i = L/T_i − Σ_j C_(i−j),j before any move: the requests
	// node i could still serve in the epoch (negative: overloaded). The sum
	// counts the hot keys' copies too.
	Delta map[wire.NodeID]float64
	// Expected is E_i: the requests node i is expected to serve in an epoch
	// under the new weights, and Share its fraction of all of them.
	Expected map[wire.NodeID]float64
	Share    map[wire.NodeID]float64
}

// coarseUnit is a set of nodes that can take over each other's requests:
// one chain group (every partition on the same chain) or one hot key.
type coarseUnit struct {
	nodes []int     // node indices
	load  []float64 // requests each node serves for the unit
	chain int       // nodes[:chain] serve from their trees, the rest from copies
	fixed bool      // not moved (hot keys after quantisation)
}

func (u *coarseUnit) total() float64 {
	t := 0.0
	for _, x := range u.load {
		t += x
	}
	return t
}

// weights scales the unit's loads to WeightScale; a unit without load
// splits evenly.
func (u *coarseUnit) weights() []uint32 {
	w := make([]uint32, len(u.load))
	if len(w) == 0 {
		return w
	}
	t := u.total()
	given := uint32(0)
	for i, x := range u.load {
		if t > 0 {
			w[i] = uint32(x / t * WeightScale)
		} else {
			w[i] = uint32(WeightScale / len(w))
		}
		given += w[i]
	}
	// The rounding remainder goes to the largest share.
	w[slices.Index(u.load, slices.Max(u.load))] += WeightScale - given
	return w
}

// Coarse is the HATS coarse scheduler: from each node's capacity in the
// epoch (L/T_i, bounded by its Capacity) and the requests it served, it
// ranks nodes from high to low utilisation and moves expected load
// greedily from higher- to lower-utilised nodes that share a partition
// chain or a hot key's LocationList, never past the receiver's capacity. Hot keys are then fixed at
// the split their 32 buckets can realise and the chains absorb the rounding.
func Coarse(in CoarseInput) (CoarsePlan, error) {
	if in.Epoch == 0 {
		in.Epoch = DefaultEpoch
	}
	if in.Epoch < MinEpoch || in.Epoch > MaxEpoch {
		return CoarsePlan{}, fmt.Errorf("sched: epoch %v: want %v..%v", in.Epoch, MinEpoch, MaxEpoch)
	}
	if n := len(in.Chains); n == 0 || n&(n-1) != 0 {
		return CoarsePlan{}, fmt.Errorf("sched: %d partitions: want a power of two", n)
	}
	partBits := uint(bits.TrailingZeros(uint(len(in.Chains))))

	// Nodes: every node with stats or on a chain or LocationList, by id.
	var ids []wire.NodeID
	for _, s := range in.Nodes {
		ids = append(ids, s.Node)
	}
	for _, c := range in.Chains {
		ids = append(ids, c...)
	}
	for _, k := range in.HotKeys {
		ids = append(ids, k.Locs...)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	idx := make(map[wire.NodeID]int, len(ids))
	for i, id := range ids {
		idx[id] = i
	}
	stats := make([]*NodeStats, len(ids))
	for i := range in.Nodes {
		stats[idx[in.Nodes[i].Node]] = &in.Nodes[i]
	}
	capacity := nodeCapacities(stats, in.Epoch)

	// Chain groups: partitions on the same chain share their members' trees.
	type group struct {
		chain []wire.NodeID
		parts int
		split []float64 // the installed weights' fractions, summed over its partitions
	}
	var groups []*group
	groupOf := make([]int, len(in.Chains))
	bySig := map[string]int{}
	for p, c := range in.Chains {
		sig := fmt.Sprint(c)
		g, ok := bySig[sig]
		if !ok {
			g = len(groups)
			bySig[sig] = g
			groups = append(groups, &group{chain: c, split: make([]float64, len(c))})
		}
		groups[g].parts++
		groupOf[p] = g
		var w []uint32
		if p < len(in.Weights) {
			w = in.Weights[p]
		}
		for j, f := range fractions(w, len(c)) {
			groups[g].split[j] += f
		}
	}
	// A node's requests at position j belong to the groups that have it
	// there, by their partition counts.
	held := map[[2]int]int{} // (node, position) → partitions there
	for _, g := range groups {
		for j, n := range g.chain {
			held[[2]int{idx[n], j}] += g.parts
		}
	}
	served := make([][]float64, len(groups)) // requests per group and position
	for gi, g := range groups {
		served[gi] = make([]float64, len(g.chain))
		for j, n := range g.chain {
			i := idx[n]
			if s := stats[i]; s != nil && j < len(s.Requests) {
				served[gi][j] = float64(s.Requests[j]) * float64(g.parts) / float64(held[[2]int{i, j}])
			}
		}
	}
	// Hot keys: their chain members' share is inside the trees' counts, so
	// it leaves the group's.
	hot := make([]*coarseUnit, len(in.HotKeys))
	for h, k := range in.HotKeys {
		u := &coarseUnit{nodes: make([]int, len(k.Locs)), load: make([]float64, len(k.Locs)), chain: k.R}
		for l, f := range fractions(k.Weights, len(k.Locs)) {
			u.nodes[l] = idx[k.Locs[l]]
			u.load[l] = float64(k.Requests) * f
		}
		g := groupOf[k.Hash.Partition(partBits)]
		for l := 0; l < min(k.R, len(k.Locs)); l++ {
			if j := slices.Index(groups[g].chain, k.Locs[l]); j >= 0 {
				served[g][j] = max(0, served[g][j]-u.load[l])
			}
		}
		hot[h] = u
	}
	// A group's requests are split by its installed weights: that, not
	// how the fine score happened to route them, is the state to move from.
	units := make([]*coarseUnit, 0, len(groups)+len(in.HotKeys))
	for gi, g := range groups {
		u := &coarseUnit{nodes: make([]int, len(g.chain)), load: make([]float64, len(g.chain))}
		var demand float64
		for j, n := range g.chain {
			u.nodes[j] = idx[n]
			demand += served[gi][j]
		}
		for j := range g.chain {
			u.load[j] = demand * g.split[j] / float64(g.parts)
		}
		units = append(units, u)
	}
	units = append(units, hot...)
	installed := make([][]float64, len(groups))
	for g := range groups {
		installed[g] = slices.Clone(units[g].load)
	}

	plan := CoarsePlan{
		Delta:    make(map[wire.NodeID]float64, len(ids)),
		Expected: make(map[wire.NodeID]float64, len(ids)),
		Share:    make(map[wire.NodeID]float64, len(ids)),
	}
	for i, id := range ids {
		plan.Delta[id] = capacity[i]
		if s := stats[i]; s != nil {
			for _, c := range s.Requests {
				plan.Delta[id] -= float64(c)
			}
		}
	}
	for _, u := range hot {
		for m := range u.nodes[min(u.chain, len(u.nodes)):] {
			plan.Delta[ids[u.nodes[u.chain+m]]] -= u.load[u.chain+m]
		}
	}
	band := in.Settle.band(stats)
	load := nodeLoads(units, len(ids))
	balance(units, load, capacity, band)
	for _, u := range hot {
		quantise(u)
		u.fixed = true
	}
	load = nodeLoads(units, len(ids))
	balance(units, load, capacity, band)
	for g := range groups {
		in.Settle.apply(units[g].load, installed[g])
	}
	load = nodeLoads(units, len(ids))

	groupWeights := make([][]uint32, len(groups))
	for g := range groups {
		groupWeights[g] = units[g].weights()
	}
	plan.Partitions = make([][]uint32, len(in.Chains))
	for p := range in.Chains {
		plan.Partitions[p] = slices.Clone(groupWeights[groupOf[p]])
	}
	for _, u := range hot {
		plan.HotKeys = append(plan.HotKeys, u.weights())
	}
	var total float64
	for _, x := range load {
		total += x
	}
	for i, id := range ids {
		plan.Expected[id] = load[i]
		if total > 0 {
			plan.Share[id] = load[i] / total
		} else {
			plan.Share[id] = 1 / float64(len(ids))
		}
	}
	return plan, nil
}

// fractions normalises weights to sum to 1 over n members; weights of
// another length or a zero total are even.
func fractions(w []uint32, n int) []float64 {
	f := make([]float64, n)
	var sum float64
	for _, x := range w {
		sum += float64(x)
	}
	for i := range f {
		f[i] = 1 / float64(n)
		if len(w) == n && sum > 0 {
			f[i] = float64(w[i]) / sum
		}
	}
	return f
}

// nodeCapacities is each node's capacity in requests per epoch:
// (1 − Background_i)·L/T_i, bounded by its Capacity. Nodes that know neither get the mean of those
// that do; if none does, every node gets 1 (then only proportions count).
func nodeCapacities(stats []*NodeStats, epoch time.Duration) []float64 {
	out := make([]float64, len(stats))
	var sum float64
	known := 0
	for i, s := range stats {
		if s == nil {
			continue
		}
		rate := math.Inf(1)
		if s.ReadLatency > 0 {
			rate = (1 - min(max(s.Background, 0), maxBackground)) / s.ReadLatency.Seconds()
		}
		if s.Capacity > 0 {
			rate = min(rate, s.Capacity)
		}
		if !math.IsInf(rate, 1) {
			out[i] = rate * epoch.Seconds()
			sum += out[i]
			known++
		}
	}
	fill := 1.0
	if known > 0 {
		fill = sum / float64(known)
	}
	for i := range out {
		if out[i] == 0 {
			out[i] = fill
		}
	}
	return out
}

// band is the hysteresis band between two nodes (Tolerance and Sigmas):
// the ratio of their utilisations below which no load moves.
func (st Settle) band(stats []*NodeStats) func(h, l int) float64 {
	variance := make([]float64, len(stats)) // of a node's relative utilisation
	for i, s := range stats {
		var c float64
		if s != nil {
			for _, x := range s.Requests {
				c += float64(x)
			}
		}
		variance[i] = 2 / max(c, 1)
	}
	return func(h, l int) float64 {
		return 1 + st.Tolerance + st.Sigmas*math.Sqrt(variance[h]+variance[l])
	}
}

// apply damps a chain group's move from its installed loads old to the
// balanced loads, in place, and keeps the installed loads if no member's
// share moves by MinChange.
func (st Settle) apply(loads, old []float64) {
	if st.Damping > 0 && st.Damping < 1 {
		for m := range loads {
			loads[m] = old[m] + st.Damping*(loads[m]-old[m])
		}
	}
	var total, moved float64
	for m := range loads {
		total += old[m]
		moved = max(moved, math.Abs(loads[m]-old[m]))
	}
	if total > 0 && moved < st.MinChange*total {
		copy(loads, old)
	}
}

func nodeLoads(units []*coarseUnit, n int) []float64 {
	load := make([]float64, n)
	for _, u := range units {
		for m, i := range u.nodes {
			load[i] += u.load[m]
		}
	}
	return load
}

// maxMoves bounds balance's work; it converges long before on real inputs.
const maxMoves = 20_000

// balance moves load within units, updating load in place. The most
// utilised node (high-load) that can still give load sends it to the least
// utilised node (low-load) it reaches through units: directly when they
// share one, else along a path of nodes each of which takes over the
// previous one's requests in one unit and hands as many of its own on in
// another, so nodes in between keep their load. It moves as much as the
// path carries, up to equal utilisation of the two ends and never past the
// receiver's capacity, and only while the sender's utilisation exceeds the
// receiver's by more than the band (a ratio). Every move lowers Σ
// load²/capacity, so it ends; it stops when no move reaches a thousandth of
// the mean load.
func balance(units []*coarseUnit, load, capacity []float64, band func(h, l int) float64) {
	var total float64
	for _, x := range load {
		total += x
	}
	if total <= 0 || len(load) < 2 {
		return
	}
	minMove := total / float64(len(load)) / 1000
	type member struct{ unit, pos int }
	byNode := make([][]member, len(load))
	for u, un := range units {
		if un.fixed {
			continue
		}
		for m, i := range un.nodes {
			byNode[i] = append(byNode[i], member{u, m})
		}
	}
	// step is how a path reached a node: from node prev, which gives its
	// requests in unit to the node at position to.
	type step struct{ prev, unit, from, to int }
	reached := make([]step, len(load))
	seen := make([]bool, len(load))
	done := make([]bool, len(load)) // no move from it for now
	util := func(i int) float64 { return load[i] / capacity[i] }
	for range maxMoves {
		h := -1
		for i := range load {
			if !done[i] && (h < 0 || util(i) > util(h)) {
				h = i
			}
		}
		if h < 0 {
			return
		}
		clear(seen)
		seen[h] = true
		queue := []int{h}
		l := -1
		for len(queue) > 0 {
			a := queue[0]
			queue = queue[1:]
			for _, mb := range byNode[a] {
				un := units[mb.unit]
				if un.load[mb.pos] < minMove {
					continue
				}
				for m, b := range un.nodes {
					if seen[b] {
						continue
					}
					seen[b] = true
					reached[b] = step{a, mb.unit, mb.pos, m}
					queue = append(queue, b)
					if load[b] < capacity[b] && (l < 0 || util(b) < util(l)) {
						l = b
					}
				}
			}
		}
		move := 0.0
		if l >= 0 && util(h) > band(h, l)*util(l) {
			move = min((load[h]*capacity[l]-load[l]*capacity[h])/(capacity[h]+capacity[l]), capacity[l]-load[l])
			for n := l; n != h; n = reached[n].prev {
				st := reached[n]
				move = min(move, units[st.unit].load[st.from])
			}
		}
		if move < minMove {
			done[h] = true
			continue
		}
		for n := l; n != h; n = reached[n].prev {
			st := reached[n]
			units[st.unit].load[st.from] -= move
			units[st.unit].load[st.to] += move
		}
		load[h] -= move
		load[l] += move
		clear(done)
	}
}

// quantise sets a hot key's loads to what its weights realise once they
// become directory.Buckets buckets.
func quantise(u *coarseUnit) {
	t := u.total()
	if t <= 0 {
		return
	}
	count := make([]int, len(u.load))
	for _, b := range directory.BucketsForWeights(u.weights()) {
		count[b]++
	}
	for m := range u.load {
		u.load[m] = t * float64(count[m]) / directory.Buckets
	}
}

// FineWindowReads is how many mean read times the fine score's window
// spans (FineWindow). Two: the planes learn t per reply (EWMA weight 0.5),
// and on a device a node's replies are cache hits of a millisecond and
// misses of tens, so t jumps reply to reply. A window of 16 mean read times
// made Window/t (1–32) outweigh the queue, and requests herded to whichever
// node had just answered from its cache: netdir demo --workload C on ssd
// fell from 4,100–5,300 ops/s (1 ms window, or 2 read times) to 570.
const FineWindowReads = 2

// DefaultFineWindow is directory.Config's default window: 1 ms.
const DefaultFineWindow = time.Millisecond

// FineWindow fits the fine score's window (directory.Config.Window, in ns)
// to the nodes' mean read time t (HATS §4.3: of two candidates take the
// larger L/t − Q). The planes compute Window/t in integers, so a fixed 1 ms
// window makes the term 0 for every node slower than 1 ms, and the score
// falls back to the queue alone; a window of FineWindowReads read times
// keeps it FineWindowReads for a node at the mean and less for slower ones
// at any service time, so that the term tells fast nodes from slow ones
// without outweighing the queue. t ≤ 0 (unknown) and windows under
// DefaultFineWindow give DefaultFineWindow.
func FineWindow(t time.Duration) uint64 {
	return uint64(max(DefaultFineWindow, FineWindowReads*t))
}
