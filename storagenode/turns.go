package storagenode

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/sched"
)

// compactionTurns is the node's place in staggered compaction
// (sched.CompactionTurns): its colour among the layout's nodes, cached per
// layout epoch, and the turn's length (0: off).
type compactionTurns struct {
	turn atomic.Int64 // ns; 0: not staggered

	mu     sync.Mutex
	epoch  uint32
	known  bool
	colour int
	turns  int
}

// SetCompactionTurn staggers the node's paced compaction with its chain
// partners' in turns of length turn (sched.DefaultTurn; 0 turns it off):
// in its own turn the node compacts at its budget times the number of
// turns and reports sched.TurnLoadPenalty more load, in the others' at
// sched.OffTurnShare of it. An unthrottled budget is never staggered.
func (n *Node) SetCompactionTurn(turn time.Duration) {
	n.turns.turn.Store(int64(max(turn, 0)))
	n.sched.kick()
}

// turnNow is how many turns the layout has and whether it is this node's
// turn at now; 0 turns while staggering is off.
func (n *Node) turnNow(now time.Time) (int, bool) {
	turn := time.Duration(n.turns.turn.Load())
	if turn <= 0 {
		return 0, false
	}
	lay := n.layout()
	if lay == nil {
		return 0, false
	}
	t := &n.turns
	t.mu.Lock()
	if !t.known || t.epoch != lay.Epoch() {
		colours, turns := sched.CompactionTurns(lay.Chains())
		c, ok := colours[n.id]
		t.epoch, t.known, t.turns = lay.Epoch(), true, turns
		t.colour = c
		if !ok {
			t.turns = 0 // on no chain: nothing to stagger with
		}
	}
	colour, turns := t.colour, t.turns
	t.mu.Unlock()
	return turns, sched.TurnAt(now, turn, turns) == colour
}
