package storagenode

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/netdir/netdir/sched"
)

// TestTurnLoad: in its turn of staggered compaction a paced node reports
// sched.TurnLoadPenalty more load (its budget then is sched.TurnBudget's,
// tested there); in another's turn it reports its load alone; unthrottled
// or not staggered, it is never in a turn.
func TestTurnLoad(t *testing.T) {
	const budget = 1 << 20
	s := NewScheduler(budget, 1, nil)
	defer s.Close()
	n := &Node{sched: s}
	n.admit.pending.Store(3)
	var mine atomic.Bool
	mine.Store(true)
	s.setTurns(func(time.Time) (int, bool) { return 4, mine.Load() })
	s.sample()
	if !s.inTurn.Load() || n.load() != 3+sched.TurnLoadPenalty {
		t.Fatalf("in its turn: inTurn %v, load %d, want true, %d", s.inTurn.Load(), n.load(), 3+sched.TurnLoadPenalty)
	}
	mine.Store(false)
	s.sample()
	if s.inTurn.Load() || n.load() != 3 {
		t.Fatalf("in another's turn: inTurn %v, load %d, want false, 3", s.inTurn.Load(), n.load())
	}
	mine.Store(true)
	s.SetBudget(Unthrottled)
	if s.inTurn.Load() || n.load() != 3 {
		t.Fatalf("unthrottled: inTurn %v, load %d, want false, 3", s.inTurn.Load(), n.load())
	}
	s.setTurns(func(time.Time) (int, bool) { return 0, true }) // not staggered
	s.SetBudget(budget)
	if s.inTurn.Load() {
		t.Fatal("not staggered, yet in a turn")
	}
}
