package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// agentsOnly is a controller with no data plane it programs: agents only.
func agentsOnly(t *testing.T) *Controller {
	t.Helper()
	c, err := New(Config{Layout: ringLayout(t, 4), PromoteMin: 16, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sketchOf is the sketch growth n misses of key make.
func sketchOf(key string, n uint64) []*api.SketchCell {
	h := wire.HashKey([]byte(key))
	var out []*api.SketchCell
	for r := range directory.SketchRows {
		out = append(out, &api.SketchCell{Index: uint32(r*directory.SketchCols) + directory.SketchIndex(&h, r), Count: n})
	}
	return out
}

func hitsOf(key string, n uint64) []*api.SlotHits {
	h := wire.HashKey([]byte(key))
	return []*api.SlotHits{{KeyHash: h[:], Hits: n}}
}

// reportAgent hands c an agent's report as the API does.
func reportAgent(c *Controller, s *api.AgentStats) (duplicate bool, err error) {
	r, err := agentReportFromProto(s)
	if err != nil {
		return false, err
	}
	return c.ReportAgent(r)
}

func agentReport(name string, seq uint64, hits []*api.SlotHits, sketch []*api.SketchCell) *api.AgentStats {
	return &api.AgentStats{Agent: name, Incarnation: 7, Sequence: seq, Hits: hits,
		SketchRows: directory.SketchRows, SketchCols: directory.SketchCols, Sketch: sketch}
}

// TestAgentReportsDriveHotKeys: with agents and no switch, a key a node
// names with too small a count is promoted by the agents' miss sketch; the
// agents' slot hits keep it cached round after round, and without them it
// is evicted after the cold rounds.
func TestAgentReportsDriveHotKeys(t *testing.T) {
	c := agentsOnly(t)
	ctx := context.Background()
	const key = "hot"
	named := func() {
		// A node served 5 of the key's reads (the others went to the
		// other chain members): below PromoteMin.
		c.Report(NodeReport{Node: 1, HotKeys: []sched.KeyCount{{Key: []byte(key), Count: 5}}})
	}
	named()
	if err := c.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(c.Entries()); n != 0 {
		t.Fatalf("promoted on the node's count alone: %d entries", n)
	}

	// Two agents saw 12 and 9 misses of it: 21 ≥ 16.
	named()
	for i, n := range []uint64{12, 9} {
		if dup, err := reportAgent(c, agentReport(fmt.Sprint("a", i), 1, nil, sketchOf(key, n))); err != nil || dup {
			t.Fatalf("report: duplicate %v, %v", dup, err)
		}
	}
	// A report sent again (its answer was lost) is not counted twice.
	if dup, err := reportAgent(c, agentReport("a0", 1, nil, sketchOf(key, 12))); err != nil || !dup {
		t.Fatalf("a repeated report: duplicate %v, %v", dup, err)
	}
	if err := c.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	ents := c.Entries()
	if len(ents) != 1 || string(ents[0].Key) != key {
		t.Fatalf("after the agents' sketches: %+v; want %q promoted", ents, key)
	}
	tot := c.AgentTotals()
	if tot.Reports != 2 || tot.Duplicates != 1 || tot.Misses != 21 || tot.Hits != 0 {
		t.Errorf("agent totals %+v", tot)
	}

	// Cached: the agents' slot hits are its count, round after round.
	seq := uint64(1)
	for round := range 5 {
		seq++
		for i, n := range []uint64{10, 4} {
			if _, err := reportAgent(c, agentReport(fmt.Sprint("a", i), seq, hitsOf(key, n), nil)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.HotKeyRound(ctx); err != nil {
			t.Fatal(err)
		}
		ents := c.Entries()
		if len(ents) != 1 || ents[0].Hits != 14 {
			t.Fatalf("round %d with 14 hits reported: %+v", round, ents)
		}
	}
	// Without them it goes cold and is evicted after ColdRounds (3).
	for round := range 3 {
		if len(c.Entries()) != 1 {
			t.Fatalf("evicted after %d cold rounds, want 3", round)
		}
		if err := c.HotKeyRound(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.Entries()); n != 0 {
		t.Fatalf("%d entries after 3 cold rounds", n)
	}
}

// TestAgentReportsSequence: a new incarnation starts its sequence afresh;
// older sequences of one are duplicates.
func TestAgentReportsSequence(t *testing.T) {
	c := agentsOnly(t)
	r := agentReport("a", 5, nil, sketchOf("k", 1))
	for i, want := range []bool{false, true} {
		if dup, err := reportAgent(c, r); err != nil || dup != want {
			t.Fatalf("report %d: duplicate %v, %v; want %v", i, dup, err, want)
		}
	}
	if dup, _ := reportAgent(c, agentReport("a", 4, nil, sketchOf("k", 1))); !dup {
		t.Error("an older sequence was taken")
	}
	r = agentReport("a", 1, nil, sketchOf("k", 1))
	r.Incarnation = 8
	if dup, err := reportAgent(c, r); err != nil || dup {
		t.Errorf("a restarted agent's first report: duplicate %v, %v", dup, err)
	}
	if tot := c.AgentTotals(); tot.Reports != 2 || tot.Misses != 2 {
		t.Errorf("totals %+v", tot)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	if got["netdir_controller_agent_reports_total"] != 2 || got["netdir_controller_agent_misses_total"] != 2 {
		t.Errorf("metrics: %v", got)
	}
}

// TestAgentReportsRefused: malformed reports are refused whole.
func TestAgentReportsRefused(t *testing.T) {
	c := agentsOnly(t)
	for name, r := range map[string]*api.AgentStats{
		"no name":      {Sequence: 1},
		"short hash":   agentReport("a", 1, []*api.SlotHits{{KeyHash: []byte{1, 2}, Hits: 1}}, nil),
		"sketch shape": {Agent: "a", Sequence: 1, SketchRows: 2, SketchCols: 1024, Sketch: []*api.SketchCell{{Index: 0, Count: 1}}},
		"sketch cell":  agentReport("a", 1, nil, []*api.SketchCell{{Index: directory.SketchRows * directory.SketchCols, Count: 1}}),
	} {
		if _, err := reportAgent(c, r); !errors.Is(err, ErrAgentReport) {
			t.Errorf("%s: %v, want ErrAgentReport", name, err)
		}
	}
	if tot := c.AgentTotals(); tot != (AgentTotals{}) {
		t.Errorf("refused reports counted: %+v", tot)
	}
}
