package nicagent

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// reporter sends the controller what the maps counted since the last
// report (Controller.ReportAgentStats): each directory key's hits and the
// miss sketch's growth. The maps' counters are cumulative; the reporter
// keeps the values its last report was taken at. A report that gets no
// answer is sent again as it was, with the same sequence (the controller
// takes a sequence once), before any newer one is taken, so counts are
// neither lost to a failed call nor added twice.
type reporter struct {
	name        string
	incarnation uint64

	mu      sync.Mutex
	seq     uint64
	hits    map[wire.KeyHash]uint64
	sketch  [directory.SketchRows][directory.SketchCols]uint64
	pending *api.AgentStats

	sent, failed, duplicates uint64
}

func newReporter(name string) *reporter {
	return &reporter{name: name, incarnation: rand.Uint64(), hits: map[wire.KeyHash]uint64{}}
}

// growth is cur − base for a counter that only grows, except when its map
// was reset (a slot reused, the maps reconfigured): then all of cur is new.
func growth(cur, base uint64) uint64 {
	if cur < base {
		return cur
	}
	return cur - base
}

// takeLocked reads the maps and builds the next report.
func (r *reporter) takeLocked(d *Dataplane) (*api.AgentStats, error) {
	hits, err := d.SlotHits()
	if err != nil {
		return nil, err
	}
	sk, err := d.Sketch()
	if err != nil {
		return nil, err
	}
	r.seq++
	s := &api.AgentStats{Agent: r.name, Incarnation: r.incarnation, Sequence: r.seq,
		SketchRows: directory.SketchRows, SketchCols: directory.SketchCols}
	for h, n := range hits {
		if g := growth(n, r.hits[h]); g > 0 {
			s.Hits = append(s.Hits, &api.SlotHits{KeyHash: append([]byte(nil), h[:]...), Hits: g})
		}
	}
	for row := range sk {
		for col, n := range sk[row] {
			if g := growth(n, r.sketch[row][col]); g > 0 {
				s.Sketch = append(s.Sketch, &api.SketchCell{Index: uint32(row*directory.SketchCols + col), Count: g})
			}
		}
	}
	r.hits, r.sketch = hits, *sk
	return s, nil
}

// report sends one report: the pending one, else a new one if anything
// was counted.
func (r *reporter) report(ctx context.Context, d *Dataplane, cs *controller.Controllers) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		s, err := r.takeLocked(d)
		if err != nil {
			return err
		}
		if len(s.Hits) == 0 && len(s.Sketch) == 0 {
			r.seq-- // nothing to say; the sequence is not used
			return nil
		}
		r.pending = s
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var resp *api.ReportAgentStatsResponse
	err := cs.Call(cctx, func(ctx context.Context, cl api.ControllerClient) error {
		var err error
		resp, err = cl.ReportAgentStats(ctx, r.pending)
		return err
	})
	if err != nil {
		r.failed++
		return err
	}
	r.pending = nil
	r.sent++
	if resp.GetDuplicate() {
		r.duplicates++
	}
	return nil
}

// ReportStats count the agent's reports to the controller.
type ReportStats struct {
	Sent       uint64 // reports the controller answered
	Failed     uint64 // calls that failed (the report is sent again)
	Duplicates uint64 // reports the controller had taken already
	Pending    bool   // a report waits to be sent again
}

// ReportStats returns the reporter's counts.
func (a *Agent) ReportStats() ReportStats {
	r := a.reporter
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReportStats{Sent: r.sent, Failed: r.failed, Duplicates: r.duplicates, Pending: r.pending != nil}
}

// reportLoop reports every ReportEvery until ctx ends, and once more then
// (with a short deadline) so the last counts are not lost on a clean stop.
func (a *Agent) reportLoop(ctx context.Context, cl *controller.Controllers) {
	t := time.NewTicker(a.cfg.ReportEvery)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = a.reporter.report(fctx, a.dp, cl)
			cancel()
			return
		case <-t.C:
		}
		if err := a.reporter.report(ctx, a.dp, cl); err != nil && ctx.Err() == nil {
			if !warned {
				a.log.Warn("counter report to the controller failed; it is sent again", "err", err)
			}
			warned = true
		} else {
			warned = false
		}
	}
}
