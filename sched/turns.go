package sched

import (
	"slices"
	"time"

	"github.com/netdir/netdir/wire"
)

// Staggered compaction: a node's compaction slows every read its device
// serves meanwhile, and a chain whose members all compact at once has no
// member left to take its reads. So nodes take turns: the nodes are
// coloured so that no two members of a chain share a colour, and one
// colour at a time compacts, at the node's budget times the number of
// turns (the same bytes on average), while the others hold their
// compactions to a trickle. The node whose turn it is reports
// TurnLoadPenalty more load on its replies, so the fine score sends its
// reads to a chain partner, none of which compacts.

// DefaultTurn is how long one colour's turn lasts: short enough that the
// others' L0 grows by a few flushes while they wait (a 256 KiB memtable a
// second at the bench's background write rate), long enough that the
// compactions a turn starts mostly finish within it.
const DefaultTurn = 2 * time.Second

// TurnLoadPenalty is what a node in its turn adds to the load on its
// replies: more than the queue difference between two nodes at the loads
// the fine score balances, so that of two candidates the one not
// compacting wins, yet finite, so that a chain partner whose own queue is
// that much longer still loses to it.
const TurnLoadPenalty = 8

// OffTurnShare is the part of its budget a node compacts at while another
// colour has the turn: a trickle, so that a tree whose L0 deepens still
// makes progress (a deep L0 is paced at raised rates beyond L0Urgent
// whatever the turn, storagenode's DeepL0Rate).
const OffTurnShare = 0.05

// turnSearchSteps bounds the search for fewer colours than DSATUR found.
const turnSearchSteps = 100_000

// CompactionTurns colours the nodes of chains so that no two members of a
// chain share a colour, and returns each node's colour and the number of
// colours (turns). It starts from DSATUR's greedy colouring (the node with
// the most distinct colours among its chain partners next, ties to more
// partners, then to the lower id; each node the lowest colour its partners
// leave free), then searches, within turnSearchSteps, for a colouring with
// fewer, down to the longest chain's length (fewer is impossible): DSATUR
// alone gives a ring of 8 nodes with chains of 3 five colours, where four
// suffice. Deterministic: every node computes the same turns from the same
// layout.
func CompactionTurns(chains [][]wire.NodeID) (map[wire.NodeID]int, int) {
	partners, nodes, longest := chainPartners(chains)
	colour, turns := dsatur(partners, nodes)
	for k := turns - 1; k >= max(longest, 1); k-- {
		steps := turnSearchSteps
		c := map[wire.NodeID]int{}
		if !colourWith(k, 0, nodes, partners, c, &steps) {
			break
		}
		colour, turns = c, k
	}
	return colour, turns
}

// chainPartners is each node's chain partners, the nodes by id, and the
// longest chain's length.
func chainPartners(chains [][]wire.NodeID) (map[wire.NodeID]map[wire.NodeID]bool, []wire.NodeID, int) {
	longest := 0
	partners := map[wire.NodeID]map[wire.NodeID]bool{}
	for _, c := range chains {
		longest = max(longest, len(c))
		for _, a := range c {
			if partners[a] == nil {
				partners[a] = map[wire.NodeID]bool{}
			}
			for _, b := range c {
				if a != b {
					partners[a][b] = true
				}
			}
		}
	}
	nodes := make([]wire.NodeID, 0, len(partners))
	for n := range partners {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	return partners, nodes, longest
}

// colourWith colours nodes[i:] with colours below k by backtracking, in
// colour, and reports whether it did within *steps.
func colourWith(k, i int, nodes []wire.NodeID, partners map[wire.NodeID]map[wire.NodeID]bool, colour map[wire.NodeID]int, steps *int) bool {
	if i == len(nodes) {
		return true
	}
	n := nodes[i]
	for c := range k {
		if *steps--; *steps < 0 {
			return false
		}
		if partnerHas(partners[n], colour, c) {
			continue
		}
		colour[n] = c
		if colourWith(k, i+1, nodes, partners, colour, steps) {
			return true
		}
		delete(colour, n)
	}
	return false
}

// partnerHas reports whether one of partners has colour c.
func partnerHas(partners map[wire.NodeID]bool, colour map[wire.NodeID]int, c int) bool {
	for p := range partners {
		if pc, ok := colour[p]; ok && pc == c {
			return true
		}
	}
	return false
}

// dsatur is the greedy DSATUR colouring.
func dsatur(partners map[wire.NodeID]map[wire.NodeID]bool, nodes []wire.NodeID) (map[wire.NodeID]int, int) {
	colour := make(map[wire.NodeID]int, len(nodes))
	turns := 0
	saturation := func(n wire.NodeID) int {
		seen := map[int]bool{}
		for p := range partners[n] {
			if c, ok := colour[p]; ok {
				seen[c] = true
			}
		}
		return len(seen)
	}
	for range nodes {
		next, best, deg := wire.NodeID(0), -1, -1
		for _, n := range nodes {
			if _, done := colour[n]; done {
				continue
			}
			if s, d := saturation(n), len(partners[n]); s > best || s == best && d > deg {
				next, best, deg = n, s, d
			}
		}
		c := 0
		for partnerHas(partners[next], colour, c) {
			c++
		}
		colour[next] = c
		turns = max(turns, c+1)
	}
	return colour, turns
}

// TurnAt is the colour whose turn it is at time now: turns of length turn
// in colour order, counted from the Unix epoch so that every node that
// reads the same clock agrees without talking. turns ≤ 1 or turn ≤ 0: 0
// (always colour 0's turn: nothing to stagger).
func TurnAt(now time.Time, turn time.Duration, turns int) int {
	if turns <= 1 || turn <= 0 {
		return 0
	}
	return int((now.UnixNano() / int64(turn)) % int64(turns))
}

// TurnBudget is a node's compaction budget (bytes/s) at this moment of the
// turns: budget × turns in its own turn, OffTurnShare × budget in
// another's, so that over a round it compacts about its budget. A budget
// ≤ 0 (unthrottled) and a single turn leave the budget as it is.
func TurnBudget(budget int64, turns int, mine bool) int64 {
	switch {
	case budget <= 0 || turns <= 1:
		return budget
	case mine:
		return budget * int64(turns)
	}
	return max(1, int64(OffTurnShare*float64(budget)))
}
