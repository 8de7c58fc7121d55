package storagenode

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/storagenode/device"
	"github.com/netdir/netdir/wire"
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

// TestStatsLoadWithoutTurnPenalty: in its turn of staggered compaction a
// node's replies carry sched.TurnLoadPenalty on top of its requests, but
// Stats.Load and the netdir_node_queue_depth metric are the requests alone
// (a bench waits for them to drain; a node in its turn with none queued
// has none).
func TestStatsLoadWithoutTurnPenalty(t *testing.T) {
	none, _ := device.Parse("none")
	n, _ := startOnDevice(t, none, device.RealClock{})
	n.sched.setTurns(func(time.Time) (int, bool) { return 4, true })
	n.sched.sample()
	if !n.sched.inTurn.Load() {
		t.Fatal("not in its turn with the turn always its own")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.Collector())
	queueDepth := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "netdir_node_queue_depth" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no netdir_node_queue_depth metric")
		return 0
	}

	// Two writes wait at the held shard; a GET of a stored key, served
	// where it arrives, reports them and the penalty.
	cl := newUDPEnd(t)
	addr, _ := n.opts.Layout.Addr(n.opts.ID)
	key := []byte("k")
	cl.send(addr, wire.Header{Op: wire.OpPut, ReqID: 9, KeyHash: wire.HashKey(key)}, key, []byte("v"))
	if r := cl.recv("the first write's reply", func(p *wire.NodePacket) bool { return p.ReqID == 9 }); r.Op != wire.OpPutReply {
		t.Fatalf("first write: %s %s", r.Op, r.Code)
	}
	release := holdShard(t, n.admit.shards[0])
	const queued = 2
	for i := range queued {
		cl.send(addr, wire.Header{Op: wire.OpPut, ReqID: uint64(10 + i), KeyHash: wire.HashKey(key)}, key, []byte("v"))
	}
	waitFor(t, "the writes queued", func() bool { return n.admit.load() == queued })
	cl.send(addr, wire.Header{Op: wire.OpGet, ReqID: 1, KeyHash: wire.HashKey(key)}, key, nil)
	r := cl.recv("the GET's reply", func(p *wire.NodePacket) bool { return p.ReqID == 1 })
	if want := uint16(queued + sched.TurnLoadPenalty); r.Load != want {
		t.Errorf("reply load %d in its turn with %d queued, want %d", r.Load, queued, want)
	}
	if st := n.Stats(); st.Load != queued {
		t.Errorf("Stats.Load %d in its turn with %d queued, want %d (no penalty)", st.Load, queued, queued)
	}
	if d := queueDepth(); d != queued {
		t.Errorf("netdir_node_queue_depth %v in its turn with %d queued, want %d (no penalty)", d, queued, queued)
	}
	release()
	for range queued {
		cl.recv("a write's reply", func(p *wire.NodePacket) bool { return p.ReqID >= 10 })
	}
	waitFor(t, "the node drained", func() bool { return n.admit.load() == 0 })
	if st, d := n.Stats(), queueDepth(); st.Load != 0 || d != 0 || !n.sched.inTurn.Load() {
		t.Errorf("drained in its turn (%v): Stats.Load %d, queue depth %v, want 0, 0", n.sched.inTurn.Load(), st.Load, d)
	}
}
