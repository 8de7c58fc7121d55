package sim

import (
	"cmp"
	"encoding/binary"
	"errors"
	"maps"
	"slices"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// control is the controller's loops over the simulated planes, deciding
// with package sched as the controller does: per rack a hot-key round
// (sched.Candidates, sched.HotKeys, sched.CopyLoad, sched.Locations), a
// spine round that spreads the hottest keys over racks, and the HATS
// coarse epoch (sched.Coarse).
type control struct {
	s     *Sim
	hot   []*sched.HotKeys // per rack: the keys homed there
	spine *sched.HotKeys
	// Slot hits at the last round, and hits since the last epoch, per
	// rack and key.
	lastHits  []map[wire.KeyHash]uint64
	epochHits []map[wire.KeyHash]uint64
	// Keys spread over racks: their racks and, per remote rack, its
	// LocationList (the rack primary first).
	spread map[int64]*spreadKey
	// A round's buffers, kept for the next: per rack its nodes' reports
	// and its rackRound, the merged candidates, a rack's (then the
	// spine's) cached keys' and candidates' counts, and the racks' counts
	// added up.
	reports [][][]sched.KeyCount
	rounds  []rackRound
	merger  sched.CandidateMerger
	cached  map[wire.KeyHash]uint64
	cands   []sched.Candidate
	global  map[wire.KeyHash]uint64
}

type spreadKey struct {
	racks  []int           // its home rack first
	remote [][]wire.NodeID // per rack after the home, its LocationList
	// announcers are the nodes whose VSBs reach the spine: the key's tail
	// and the remote racks' primaries.
	announcers nodeSet
}

// nodeSet is a set of node ids, a bit each: a commit's copies ask it once
// per VSB, up to a rack's worth at a time.
type nodeSet []uint64

func (ns *nodeSet) add(n wire.NodeID) {
	w := int(n) / 64
	if w >= len(*ns) {
		*ns = append(*ns, make([]uint64, w+1-len(*ns))...)
	}
	(*ns)[w] |= 1 << (n % 64)
}

func (ns nodeSet) has(n wire.NodeID) bool {
	w := int(n) / 64
	return w < len(ns) && ns[w]&(1<<(n%64)) != 0
}

func newControl(s *Sim) *control {
	c := &control{s: s, spread: map[int64]*spreadKey{}, reports: make([][][]sched.KeyCount, len(s.racks)),
		rounds: make([]rackRound, len(s.racks)), cached: map[wire.KeyHash]uint64{}, global: map[wire.KeyHash]uint64{}}
	for r := range s.racks {
		c.rounds[r].counts = map[wire.KeyHash]uint64{}
		c.hot = append(c.hot, sched.NewHotKeys(sched.HotKeyConfig{Capacity: s.cfg.DirSize, PromoteMin: s.cfg.PromoteMin,
			Nodes: s.cfg.RackSize, Chain: s.cfg.Replicas}))
		c.lastHits = append(c.lastHits, map[wire.KeyHash]uint64{})
		c.epochHits = append(c.epochHits, map[wire.KeyHash]uint64{})
	}
	if s.spine != nil {
		c.spine = sched.NewHotKeys(sched.HotKeyConfig{Capacity: s.cfg.SpineSize, PromoteMin: s.cfg.PromoteMin,
			Nodes: len(s.racks), Chain: 1})
	}
	return c
}

// appendTopKey appends key k as the nodes' top-k count it: its index, 8
// bytes big-endian, in place of its name (the workload's prefix and the
// index in 12 digits), which is not built for every miss then. Both order
// keys alike (for indices below 10^12), so the top-k's ties, broken by the
// smallest key, pick the same keys: the counts, the reports and every
// decision are the names'.
func appendTopKey(dst []byte, k int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(k)) }

// topKeyIndex is the index of a key that appendTopKey wrote.
func topKeyIndex(key []byte) int64 { return int64(binary.BigEndian.Uint64(key)) }

// hashOf is a top-k key's KeyHash, through the simulator's memo.
func (c *control) hashOf(key []byte) wire.KeyHash { return c.s.hash(topKeyIndex(key)) }

// announced reports whether key k's commits are announced: it is in its
// home rack's directory or spread over racks.
func (c *control) announced(k int64) bool { return c.s.promoted[k] || c.spread[k] != nil }

// copies appends to out the nodes that get key k's committed versions
// besides its chain: its extras in its home rack, then per remote rack the
// primary and its extras.
func (c *control) copies(out []wire.NodeID, k int64) []wire.NodeID {
	s := c.s
	h := s.hash(k)
	home := 0
	if s.spine != nil {
		home = s.spine.Home(h)
	}
	if sl, ok := s.racks[home].Lookup(h); ok {
		out = append(out, sl.Locs[sl.R:sl.N]...)
	}
	if sk := c.spread[k]; sk != nil {
		for _, locs := range sk.remote {
			out = append(out, locs...)
		}
	}
	return out
}

// installLayout is directory.InstallLayout of the run's layout into rack
// directory d; a rack after the first copies the first's partition table
// whole, the same chains and buckets, where setting its 2^PartitionBits
// partitions one by one (strided over the table) was 5 % of a 1024-node
// run's CPU.
func (s *Sim) installLayout(d *directory.Directory) error {
	if len(s.racks) == 0 {
		return directory.InstallLayout(d, s.lay)
	}
	return d.CopyPartitions(s.racks[0])
}

func (c *control) dirSize() int {
	n := 0
	for _, d := range c.s.racks {
		n += d.Len()
	}
	if c.s.spine != nil {
		n += c.s.spine.Len()
	}
	return n
}

// rackRound is one rack's slot hits since the last round, and all its
// requests as the controller counts them: the hits and the candidates'
// counts.
type rackRound struct {
	counts map[wire.KeyHash]uint64
	hits   uint64
	all    uint64
}

// round is one hot-key round: every rack's, then the spine's.
func (c *control) round() error {
	s := c.s
	reports := c.reports
	for r := range reports {
		reports[r] = reports[r][:0]
	}
	for i := range s.nodes {
		n := &s.nodes[i]
		reports[n.rack] = append(reports[n.rack], n.top.All())
	}
	rounds := c.rounds
	var errs []error
	for r, d := range s.racks {
		rr := &rounds[r]
		clear(rr.counts)
		rr.hits, rr.all = 0, 0
		d.Each(func(_ uint32, sl *directory.Slot) {
			last := c.lastHits[r][sl.Hash]
			delta := sl.Hits - min(last, sl.Hits)
			c.lastHits[r][sl.Hash] = sl.Hits
			c.epochHits[r][sl.Hash] += delta
			rr.counts[sl.Hash] = delta
			rr.hits += delta
		})
		errs = append(errs, c.rackRound(r, reports[r], rr))
		d.ResetSketch()
	}
	if s.spine != nil {
		errs = append(errs, c.spineRound(rounds))
	}
	return errors.Join(errs...)
}

func (c *control) home(h wire.KeyHash) int {
	if c.s.spine == nil {
		return 0
	}
	return c.s.spine.Home(h)
}

// rackRound decides rack r's promotions and evictions of the keys homed in
// it, as controller.HotKeyRound does.
func (c *control) rackRound(r int, reports [][]sched.KeyCount, rr *rackRound) error {
	s := c.s
	d := s.racks[r]
	cached := c.cached
	clear(cached)
	for h, n := range rr.counts {
		if c.home(h) == r {
			cached[h] = n
		}
	}
	// Merging reads each reported key's memoized hash: prefetching them
	// all first overlaps their cache misses (at 1024 nodes a rack's 2048
	// report entries, in megabytes of key state) instead of taking them
	// one after the other.
	for _, rep := range reports {
		for _, kc := range rep {
			if k := topKeyIndex(kc.Key); k < int64(len(s.keys)) {
				prefetchAt(&s.keys[k])
			}
		}
	}
	all := rr.hits
	cands := c.cands[:0]
	for _, cd := range c.merger.Merge(reports, c.hashOf, func(h wire.KeyHash) uint64 { return uint64(d.SketchEstimate(h)) }) {
		if c.home(cd.Hash) != r {
			continue
		}
		all += cd.Count
		cands = append(cands, cd)
	}
	c.cands = cands
	rr.all = all
	dec := c.hot[r].Round(cached, cands)
	slices.SortFunc(dec.Evict, func(a, b wire.KeyHash) int { return slices.Compare(a[:], b[:]) })
	for _, h := range dec.Evict {
		if err := d.Evict(h); err != nil {
			return err
		}
		delete(c.lastHits[r], h)
		s.promoted[s.keyOf[h]] = false
	}
	load := sched.CopyLoad(c.slotLoads(r, rr.counts), all)
	for _, cd := range dec.Promote {
		k := topKeyIndex(cd.Key)
		s.keyOf[cd.Hash] = k
		share := float64(cd.Count) / float64(max(all, 1))
		ch := s.chains[cd.Hash.Partition(s.cfg.PartitionBits)]
		locs := sched.Locations(ch, s.rackNodes(r), share, load)
		ones := make([]uint32, len(locs))
		for i := range ones {
			ones[i] = 1
		}
		if _, err := d.Insert(cd.Hash, locs, len(ch), wire.MakeStamp(0, s.keys[k].version), directory.BucketsForWeights(ones)); err != nil {
			c.hot[r].Forget(cd.Hash)
			if errors.Is(err, directory.ErrFull) {
				continue
			}
			return err
		}
		s.promoted[k] = true
		s.sendVSBs(2*s.link(), k, s.keys[k].committed, 0, locs[len(ch):]...)
	}
	return nil
}

// slotLoads is rack r's directory keys with their hits in the round; their
// Locs are the slots', for sched.CopyLoad before the directory changes.
func (c *control) slotLoads(r int, counts map[wire.KeyHash]uint64) []sched.HotKeyLoad {
	var out []sched.HotKeyLoad
	c.s.racks[r].Each(func(_ uint32, sl *directory.Slot) {
		out = append(out, sched.HotKeyLoad{Locs: sl.Locs[:sl.N], Requests: counts[sl.Hash]})
	})
	return out
}

// spineRound spreads the hottest keys over racks (the spine's HotKeys
// over the rack directories' keys): a key with share of all requests gets
// sched.RackCount(share, racks) racks and at least two, so that the
// spine's two choices can even out the racks' load (DistCache), its
// home first and the others placed by sched.PlaceExtras against the racks'
// load of keys already spread; in each other rack, a LocationList of
// sched.RackCopies nodes by the key's load there (Config.WholeRacks:
// every node of the rack), placed by sched.PlaceExtras against the rack's
// nodes' load of its directory keys (placeLoads), its least loaded first:
// the rack primary.
func (c *control) spineRound(rounds []rackRound) error {
	s := c.s
	nracks := len(s.racks)
	global := c.global
	clear(global)
	var all uint64
	for _, rr := range rounds {
		all += rr.all
		for h, n := range rr.counts {
			global[h] += n
		}
	}
	// The rack rounds are done with c.cached and c.cands. Round takes the
	// candidates in any order.
	cached, cands := c.cached, c.cands[:0]
	clear(cached)
	for h, n := range global {
		if c.spread[s.keyOf[h]] != nil {
			cached[h] = n
			continue
		}
		cands = append(cands, sched.Candidate{Hash: h, Count: n})
	}
	c.cands = cands
	dec := c.spine.Round(cached, cands)
	slices.SortFunc(dec.Evict, func(a, b wire.KeyHash) int { return slices.Compare(a[:], b[:]) })
	for _, h := range dec.Evict {
		k := s.keyOf[h]
		sk := c.spread[k]
		if sk == nil {
			continue
		}
		if err := s.spine.Evict(h); err != nil {
			return err
		}
		for _, r := range sk.racks[1:] {
			if err := s.racks[r].Evict(h); err != nil && !errors.Is(err, directory.ErrNotFound) {
				return err
			}
			delete(c.lastHits[r], h)
		}
		delete(c.spread, k)
	}
	// The racks' load of spread keys, for placing the next ones.
	var spreadLoads []sched.HotKeyLoad
	for _, k := range c.spreadKeys() {
		sk := c.spread[k]
		ids := make([]wire.NodeID, len(sk.racks))
		for i, r := range sk.racks {
			ids[i] = wire.NodeID(r)
		}
		spreadLoads = append(spreadLoads, sched.HotKeyLoad{Locs: ids, Requests: global[s.hash(k)]})
	}
	rackLoad := sched.CopyLoad(spreadLoads, all)
	rackIDs := make([]wire.NodeID, nracks)
	for r := range rackIDs {
		rackIDs[r] = wire.NodeID(r)
	}
	spreadOver := map[wire.KeyHash]int{} // the racks of each key spread, this round's too
	for _, k := range c.spreadKeys() {
		spreadOver[s.hash(k)] = len(c.spread[k].racks)
	}
	for _, cd := range dec.Promote { // at least two racks, for two choices
		spreadOver[cd.Hash] = max(2, sched.RackCount(float64(cd.Count)/float64(max(all, 1)), nracks))
	}
	nodeLoad := make([]map[wire.NodeID]float64, nracks) // per rack, as placing needs it
	var lastLoad []map[wire.NodeID]float64              // Config.WholeRacks: per rack, the last round's
	if s.cfg.WholeRacks {
		lastLoad = make([]map[wire.NodeID]float64, nracks)
	}
	for _, cd := range dec.Promote {
		k := s.keyOf[cd.Hash]
		home := s.spine.Home(cd.Hash)
		// Only a key promoted in its home rack is spread, seeded with the
		// highest version its home directory stamped: a write that passed
		// the spine before the key was spread (not pending there) was
		// stamped by then, as a request passes the spine and its rack
		// directory in one event, so it cannot commit above the version a
		// fresh remote rack serves.
		homeSlot, ok := s.racks[home].Lookup(cd.Hash)
		if !ok {
			c.spine.Forget(cd.Hash)
			continue
		}
		share := float64(cd.Count) / float64(max(all, 1))
		kr := spreadOver[cd.Hash]
		others := sched.PlaceExtras([]wire.NodeID{wire.NodeID(home)}, rackIDs, rackLoad, kr-1, share/float64(kr))
		ch := s.chains[cd.Hash.Partition(s.cfg.PartitionBits)]
		sk := &spreadKey{racks: []int{home}}
		sk.announcers.add(ch[len(ch)-1])
		local := min(1, share/float64(kr)*float64(nracks)) // its share of a rack's requests
		for _, id := range others {
			r := int(id)
			nodes := s.rackNodes(r)
			switch {
			case s.cfg.WholeRacks:
				// Every node holds a copy; the primary is chosen against
				// the last round's loads, as before: the same for each key
				// of the round (the copies placed since had no hits in
				// it, adding 0 to every sum), so worked out once.
				if lastLoad[r] == nil {
					lastLoad[r] = sched.CopyLoad(c.slotLoads(r, rounds[r].counts), rounds[r].all)
				}
				nodeLoad[r] = maps.Clone(lastLoad[r])
			case nodeLoad[r] == nil:
				nodeLoad[r] = c.placeLoads(r, &rounds[r], spreadOver)
			}
			// As many nodes as the key's load in the rack needs, least
			// loaded (the primary) first; the load placed adds up over
			// the round's keys, or they would all take the same nodes.
			// (Config.WholeRacks: every node of the rack.)
			copies := len(nodes)
			if !s.cfg.WholeRacks {
				copies = sched.RackCopies(share, kr, nracks, len(nodes), s.cfg.RackCopyHeadroom)
			}
			locs := sched.PlaceExtras(nil, nodes, nodeLoad[r], copies, local/float64(copies))
			if _, err := s.racks[r].Insert(cd.Hash, locs, 1, wire.MakeStamp(0, s.keys[k].committed), nil); err != nil {
				if errors.Is(err, directory.ErrFull) {
					continue
				}
				return err
			}
			sk.racks = append(sk.racks, r)
			sk.remote = append(sk.remote, locs)
			sk.announcers.add(locs[0])
		}
		if len(sk.racks) < 2 {
			c.spine.Forget(cd.Hash)
			continue
		}
		if err := s.spine.Insert(cd.Hash, sk.racks, max(homeSlot.VerNext, s.keys[k].committed)); err != nil {
			return err
		}
		c.spread[k] = sk
		for _, locs := range sk.remote {
			s.sendVSBs(4*s.link(), k, s.keys[k].committed, 0, locs...)
		}
	}
	return nil
}

// placeLoads is rack r's nodes' load of its directory keys, for placing
// copies by sched.PlaceExtras: sched.CopyLoad of the slots' hits in the
// round, except that the home slot of a key spread over n racks counts
// 1/n of its hits. The spine now sends the slot only its part of the
// key's reads; the hits of a round before the key was spread (every
// hottest key's, in the first rounds) would keep the copies off the
// slot's nodes and pile them on the rack's others: at 1024 nodes 30
// spread keys' copies each on a few nodes of the hottest key's home rack,
// 2-3 on the rest, and the open loop's max/mean at 1.08-1.11, not 1.05.
func (c *control) placeLoads(r int, rr *rackRound, spreadOver map[wire.KeyHash]int) map[wire.NodeID]float64 {
	var keys []sched.HotKeyLoad
	c.s.racks[r].Each(func(_ uint32, sl *directory.Slot) {
		n := rr.counts[sl.Hash]
		if over := spreadOver[sl.Hash]; over > 0 && c.home(sl.Hash) == r {
			n /= uint64(over)
		}
		keys = append(keys, sched.HotKeyLoad{Locs: sl.Locs[:sl.N], Requests: n})
	})
	return sched.CopyLoad(keys, rr.all)
}

func (c *control) spreadKeys() []int64 {
	ks := make([]int64, 0, len(c.spread))
	for k := range c.spread {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// epoch is one HATS coarse epoch over the whole cluster: the nodes' reads
// per chain position and every directory entry's hits since the last
// epoch go to sched.Coarse, whose partition weights go to each
// partition's home rack and whose key weights go to the key's slot.
func (c *control) epoch() error {
	s := c.s
	in := sched.CoarseInput{Epoch: s.cfg.Epoch, Chains: s.chains, Weights: make([][]uint32, len(s.chains)),
		Settle: s.cfg.Settle}
	for i := range s.nodes {
		n := &s.nodes[i]
		in.Nodes = append(in.Nodes, sched.NodeStats{Node: n.id, ReadLatency: n.latency,
			Requests: slices.Clone(n.byPos), Capacity: s.cfg.Capacity})
		clear(n.byPos)
	}
	for p, ch := range s.chains {
		part, _ := s.racks[s.rackOf(s.chains[p][0])].Partition(uint32(p))
		in.Weights[p] = directory.BucketShares(part.Buckets[:], len(ch))
	}
	type keyAt struct {
		rack int
		hash wire.KeyHash
	}
	var keys []keyAt
	for r, d := range s.racks {
		d.Each(func(_ uint32, sl *directory.Slot) {
			keys = append(keys, keyAt{r, sl.Hash})
			in.HotKeys = append(in.HotKeys, sched.HotKeyLoad{Hash: sl.Hash, Locs: slices.Clone(sl.Locs[:sl.N]), R: int(sl.R),
				Requests: c.epochHits[r][sl.Hash], Weights: directory.BucketShares(sl.Buckets[:], int(sl.N))})
		})
		clear(c.epochHits[r])
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(keys[a].rack, keys[b].rack), slices.Compare(keys[a].hash[:], keys[b].hash[:]))
	})
	sorted := make([]sched.HotKeyLoad, len(order))
	for i, j := range order {
		sorted[i] = in.HotKeys[j]
	}
	in.HotKeys = sorted
	plan, err := sched.Coarse(in)
	if err != nil {
		return err
	}
	for p, w := range plan.Partitions {
		d := s.racks[s.rackOf(s.chains[p][0])]
		part, _ := d.Partition(uint32(p))
		b := directory.BucketsForWeights(w)
		if directory.BucketsMoved(part.Buckets[:], b, len(w)) {
			if err := d.SetPartitionBuckets(uint32(p), b); err != nil {
				return err
			}
		}
	}
	for i, j := range order {
		if err := s.racks[keys[j].rack].SetSlotBuckets(keys[j].hash, directory.BucketsForWeights(plan.HotKeys[i])); err != nil {
			return err
		}
	}
	return nil
}
