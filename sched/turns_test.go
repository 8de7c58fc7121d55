package sched

import (
	"testing"
	"time"

	"github.com/netdir/netdir/wire"
)

func TestCompactionTurns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chains [][]wire.NodeID
		turns  int // the colours DSATUR must reach (the least possible here)
	}{
		{"ring 8, R=3", ring(t, 8, 3, 1024), 4},
		{"ring 9, R=3", ring(t, 9, 3, 1024), 3},
		{"ring 16, R=3", ring(t, 16, 3, 1024), 4},
		{"ring 4, R=3", ring(t, 4, 3, 64), 4},
		{"ring 6, R=2", ring(t, 6, 2, 64), 2},
		{"one chain", [][]wire.NodeID{{3, 1, 2}}, 3},
		{"two disjoint chains", [][]wire.NodeID{{1, 2}, {3, 4}}, 2},
		{"single nodes", [][]wire.NodeID{{1}, {2}}, 1},
		{"none", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			colour, turns := CompactionTurns(tc.chains)
			if turns != tc.turns {
				t.Errorf("turns %d, want %d (colours %v)", turns, tc.turns, colour)
			}
			for _, c := range tc.chains {
				seen := map[int]wire.NodeID{}
				for _, n := range c {
					col, ok := colour[n]
					if !ok || col < 0 || col >= turns {
						t.Fatalf("node %d: colour %d of %d (ok %v)", n, col, turns, ok)
					}
					if m, dup := seen[col]; dup {
						t.Errorf("chain %v: nodes %d and %d share colour %d", c, m, n, col)
					}
					seen[col] = n
				}
			}
			again, _ := CompactionTurns(tc.chains)
			for n, c := range colour {
				if again[n] != c {
					t.Fatalf("node %d: colour %d, then %d: not deterministic", n, c, again[n])
				}
			}
		})
	}
}

func TestTurnAt(t *testing.T) {
	base := time.Unix(1_000_000, 0) // a multiple of 8 s
	for _, tc := range []struct {
		at    time.Duration
		turn  time.Duration
		turns int
		want  int
	}{
		{0, 2 * time.Second, 4, 0},
		{1999 * time.Millisecond, 2 * time.Second, 4, 0},
		{2 * time.Second, 2 * time.Second, 4, 1},
		{7 * time.Second, 2 * time.Second, 4, 3},
		{8 * time.Second, 2 * time.Second, 4, 0},
		{3 * time.Second, 2 * time.Second, 1, 0},
		{3 * time.Second, 0, 4, 0},
	} {
		if got := TurnAt(base.Add(tc.at), tc.turn, tc.turns); got != tc.want {
			t.Errorf("TurnAt(+%v, %v, %d) = %d, want %d", tc.at, tc.turn, tc.turns, got, tc.want)
		}
	}
}

func TestTurnBudget(t *testing.T) {
	const b = 1 << 20
	for _, tc := range []struct {
		budget int64
		turns  int
		mine   bool
		want   int64
	}{
		{b, 4, true, 4 * b},
		{b, 4, false, b / 20},
		{b, 1, false, b},
		{0, 4, true, 0},
		{-1, 4, false, -1},
		{1, 4, false, 1},
	} {
		if got := TurnBudget(tc.budget, tc.turns, tc.mine); got != tc.want {
			t.Errorf("TurnBudget(%d, %d, %v) = %d, want %d", tc.budget, tc.turns, tc.mine, got, tc.want)
		}
	}
	// Over a round, a node compacts about its budget: its own turn's
	// bytes and the trickle of the others' turns.
	for _, turns := range []int{2, 3, 4, 8} {
		var sum int64
		for k := range turns {
			sum += TurnBudget(b, turns, k == 0)
		}
		if mean := float64(sum) / float64(turns); mean < b || mean > b*(1+OffTurnShare) {
			t.Errorf("%d turns: mean budget %.0f, want %d … %.0f", turns, mean, b, b*(1+OffTurnShare))
		}
	}
}
