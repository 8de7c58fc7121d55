package sim

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

func smallConfig(seed uint64) Config {
	return Config{Nodes: 8, Capacity: 1000, Workload: bench.Workload{Name: "B", Keys: 5000, Zipf: 1.2, Seed: 1},
		Warmup: 6 * time.Second, Requests: 40_000, Seed: seed}
}

// newSim is New(cfg), failing the test on an error.
func newSim(t *testing.T, cfg Config) *Sim {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func runJSON(t *testing.T, cfg Config) []byte {
	t.Helper()
	run, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := bench.WriteJSON(&b, bench.Results{Runs: []bench.Run{run}}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestSameSeedSameJSON: a run is a function of its configuration, seed
// included, down to the byte; another seed gives another run. Both with
// one directory and layered (three racks of four under a spine).
func TestSameSeedSameJSON(t *testing.T) {
	layered := smallConfig(7)
	layered.Nodes, layered.RackSize, layered.Concurrency = 12, 4, 192
	for name, cfg := range map[string]Config{"flat": smallConfig(7), "layered": layered} {
		cfg.Service = ServiceExponential // draws service times from the PCG too
		a, b := runJSON(t, cfg), runJSON(t, cfg)
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: two runs of the same seed wrote different JSON", name)
		}
		cfg.Seed = 8
		if bytes.Equal(a, runJSON(t, cfg)) {
			t.Fatalf("%s: runs of seeds 7 and 8 wrote the same JSON", name)
		}
	}
}

// TestNetdirBalancesWhereStaticDoesNot: at zipf 1.2 on 8 nodes the chain
// head of the hottest key limits static hashing; netdir's directory and
// weights spread it, so throughput reaches the ideal N×C.
func TestNetdirBalancesWhereStaticDoesNot(t *testing.T) {
	runs := map[string]bench.Run{}
	for _, pol := range []string{"static", "netdir"} {
		cfg := smallConfig(1)
		cfg.Policy = pol
		run, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		runs[pol] = run
	}
	ideal := 8 * 1000.0
	if n := runs["netdir"]; n.ThroughputOps < 0.95*ideal || n.LoadMaxOverMean > 1.05 || n.DirHitRate < 0.3 {
		t.Errorf("netdir: %.0f ops/s of %.0f, max/mean %.3f, hit rate %.2f; want ≥ 0.95 of ideal, ≤ 1.05, hits", n.ThroughputOps, ideal,
			n.LoadMaxOverMean, n.DirHitRate)
	}
	if s := runs["static"]; s.LoadMaxOverMean < 1.5 || s.ThroughputOps > 0.7*ideal {
		t.Errorf("static: %.0f ops/s, max/mean %.3f; want the hot chain head to limit it", s.ThroughputOps, s.LoadMaxOverMean)
	}
}

// TestOpenLoopServesTheOfferedRate: under half the capacity every arrival
// is served and none is dropped.
func TestOpenLoopServesTheOfferedRate(t *testing.T) {
	cfg := smallConfig(3)
	cfg.Rate, cfg.Concurrency, cfg.Requests = 4000, 512, 20_000
	run, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if run.Dropped != 0 || run.Errors != 0 || run.ThroughputOps < 3800 || run.ThroughputOps > 4200 {
		t.Errorf("open loop at 4000/s: %.0f ops/s, %d dropped, %d errors", run.ThroughputOps, run.Dropped, run.Errors)
	}
}

// TestWrittenHotKeysAreReadAtExtrasVerified: under YCSB A's writes the
// hot keys' extras are often not fresh; the directory still sends them
// reads, flagged (issue 18), and each such read's version query goes to
// the tail. Static hashing has no extras and verifies nothing.
func TestWrittenHotKeysAreReadAtExtrasVerified(t *testing.T) {
	for _, pol := range []string{"netdir", "static"} {
		cfg := smallConfig(5)
		cfg.Policy, cfg.Workload.Name, cfg.Requests = pol, "A", 20_000
		s := newSim(t, cfg)
		run, err := s.Run()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case pol == "netdir" && (s.stats.verified == 0 || run.Errors != 0):
			t.Errorf("netdir: %d reads verified, %d errors; want verified reads and no errors", s.stats.verified, run.Errors)
		case pol == "static" && s.stats.verified != 0:
			t.Errorf("static: %d reads verified; want none", s.stats.verified)
		}
	}
}

// TestBadConfigIsAnError: bad input is refused, not a panic.
func TestBadConfigIsAnError(t *testing.T) {
	for name, cfg := range map[string]Config{
		"nodes":    {Nodes: 5000},
		"rack":     {RackSize: 33},
		"policy":   {Policy: "best"},
		"service":  {Service: "gamma"},
		"capacity": {Capacity: -1},
		"replicas": {Nodes: 2, Replicas: 3},
		"workload": {Workload: bench.Workload{Name: "Z"}},
		"epoch":    {Epoch: time.Second},
		"settle":   {Settle: sched.Settle{Tolerance: -0.1}},
		"copies":   {RackCopyHeadroom: math.NaN()},
		"headroom": {RackCopyHeadroom: -0.1},
	} {
		if _, err := Run(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestEventsComeInTimeThenSchedulingOrder: the queue returns events by
// time, and events of one time in the order they were scheduled, whether
// they wait in a lane of one delay or in the heap (more delays than
// lanes).
func TestEventsComeInTimeThenSchedulingOrder(t *testing.T) {
	q := newEvents()
	now := uint64(0)
	n := 0
	for step := range 40 {
		for j := range 3 {
			d := uint64((step*7+j*5)%13) * 10 // 13 delays: lanes and heap
			q.after(now, d, event{a: int32(n)})
			n++
		}
		now += 3
	}
	var prev event
	for got := 0; ; got++ {
		src, at, ok := q.earliest()
		if !ok {
			if got != n {
				t.Fatalf("%d events out of %d", got, n)
			}
			return
		}
		e := q.take(src)
		if e.t != at {
			t.Fatalf("earliest said t=%d, take gave t=%d", at, e.t)
		}
		if got > 0 && (e.t < prev.t || e.t == prev.t && e.seq < prev.seq) {
			t.Fatalf("event (t=%d, seq %d) after (t=%d, seq %d)", e.t, e.seq, prev.t, prev.seq)
		}
		prev = e
	}
}

// TestEventsInterleavedMatchASortedList: scheduling and taking events
// interleaved at random, as the simulator does (lanes emptying and
// refilling, the heap for delays past the lanes and for events queued
// rarely), the queue gives at each
// step the earliest (t, seq) of the events scheduled and not yet taken,
// as a plain list searched in full does.
func TestEventsInterleavedMatchASortedList(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := newEvents()
	var pending []event // the reference: every event queued, in no order
	now := uint64(0)
	for step := range 200_000 {
		if rng.IntN(2) == 0 || len(pending) == 0 {
			d := uint64(rng.IntN(12)) * 5 // 12 delays: the lanes and the heap
			if rng.IntN(8) == 0 {
				q.rarely(now, d, event{a: int32(step)})
			} else {
				q.after(now, d, event{a: int32(step)})
			}
			pending = append(pending, event{t: now + d, seq: q.seq, a: int32(step)})
			continue
		}
		first := 0
		for i := range pending {
			if before(&pending[i], &pending[first]) {
				first = i
			}
		}
		src, at, ok := q.earliest()
		if !ok {
			t.Fatalf("step %d: no event, %d queued", step, len(pending))
		}
		e := q.take(src)
		if want := pending[first]; e != want || at != want.t {
			t.Fatalf("step %d: event %+v (earliest said t=%d), want %+v", step, e, at, want)
		}
		pending = slices.Delete(pending, first, first+1)
		now = e.t
	}
}

// TestSpineReadsAreLinearizable: under YCSB A's writes, racks of four
// under a spine, copies held back 20 ms, every read a client gets is
// checked (CheckReads): the spine sends reads of written keys to racks it
// cannot vouch for, flagged, and each is verified at the key's tail. The
// mutant whose rack directories do not know the spine's port clears that
// flag (as the P4 and eBPF planes would): its remote racks answer from
// their copies, and the check catches a read older than an acknowledged
// write.
func TestSpineReadsAreLinearizable(t *testing.T) {
	layered := func(mutant bool) Config {
		cfg := smallConfig(3)
		cfg.Nodes, cfg.RackSize, cfg.Concurrency = 12, 4, 192
		cfg.Workload.Name, cfg.Requests, cfg.CheckReads, cfg.noSpinePort = "A", 40_000, true, mutant
		cfg.copyDelay = 20 * time.Millisecond
		return cfg
	}
	s := newSim(t, layered(false))
	run, err := s.Run()
	if err != nil {
		t.Fatalf("with the spine's rule: %v", err)
	}
	if c := s.spine.Counters(); c.Verified == 0 || run.Errors != 0 {
		t.Fatalf("spine sent %d reads flagged to racks not fresh, %d errors; want some and none", c.Verified, run.Errors)
	}
	_, err = Run(layered(true))
	if err == nil {
		t.Fatal("racks that drop the spine's FlagVerify passed the linearizability check")
	}
	t.Log("mutant:", err)
}

// TestRequestIsTwoCacheLines: a request is touched cold at each event of
// its way, so its size is kept to two cache lines, each request starting
// one (the slab is page-aligned).
func TestRequestIsTwoCacheLines(t *testing.T) {
	if n := unsafe.Sizeof(request{}); n != 128 {
		t.Errorf("request is %d bytes, want 128", n)
	}
}

// TestDrawingAheadIsTheSameRun: drawing each operation ahead (prepared
// two issues early to prefetch its zipf table line, completed one issue
// early to prefetch its key's state) gives the run drawing it at its
// issue gives, inserts included; not for workload D, whose reads follow the
// inserts acknowledged so far, so it draws at the issue.
func TestDrawingAheadIsTheSameRun(t *testing.T) {
	run := func(w string, noAhead bool) string {
		cfg := smallConfig(5)
		cfg.Workload.Name, cfg.Requests = w, 10_000
		s := newSim(t, cfg)
		s.noAhead = noAhead
		r, err := s.Run()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%+v", r)
	}
	for _, w := range []string{"A", "E"} {
		if run(w, false) != run(w, true) {
			t.Errorf("workload %s: drawn ahead, another run", w)
		}
	}
	if run("D", false) == run("D", true) {
		t.Error("workload D: drawn ahead, the same run; then it need not draw at the issue")
	}
}

// TestRackCopiesByLoad: a remote rack lists a spread key on the nodes its
// load there needs, the rack primary first, and reads stay linearizable;
// with Config.WholeRacks, on every node of the rack.
func TestRackCopiesByLoad(t *testing.T) {
	remoteLens := func(wholeRacks bool) map[int]int {
		cfg := smallConfig(2)
		cfg.Nodes, cfg.RackSize, cfg.Concurrency = 64, 16, 512
		cfg.Workload.Name, cfg.Requests, cfg.CheckReads, cfg.WholeRacks = "A", 40_000, true, wholeRacks
		s := newSim(t, cfg)
		if _, err := s.Run(); err != nil {
			t.Fatalf("whole racks %v: %v", wholeRacks, err)
		}
		lens := map[int]int{}
		for k, sk := range s.ctl.spread {
			for i, locs := range sk.remote {
				sl, ok := s.racks[sk.racks[i+1]].Lookup(s.hash(k))
				if !ok || int(sl.N) != len(locs) || sl.Locs[0] != locs[0] || !sk.announcers.has(locs[0]) {
					t.Fatalf("whole racks %v: key %d's slot in rack %d is not its LocationList %v, primary first", wholeRacks, k, sk.racks[i+1], locs)
				}
				lens[len(locs)]++
			}
		}
		return lens
	}
	if lens := remoteLens(true); len(lens) != 1 || lens[16] == 0 {
		t.Errorf("whole racks: remote LocationList lengths %v, want 16 only", lens)
	}
	lens := remoteLens(false)
	t.Log("remote LocationList lengths by load:", lens)
	short := 0
	for n, c := range lens {
		if n < 16 {
			short += c
		}
	}
	if short == 0 {
		t.Errorf("by load: remote LocationList lengths %v, want some shorter than the rack", lens)
	}
}

// TestRefusedCopiesRetryInOneEvent: the copies a VSB delivery refuses ask
// again together, in one event a retry's delay later, in the order
// refused, at the next attempt and the committed version; a node that is
// no member is dropped, not retried.
func TestRefusedCopiesRetryInOneEvent(t *testing.T) {
	s := newSim(t, smallConfig(1))
	const k = 42
	h := s.hash(k)
	a, b, c, x := s.ids[0], s.ids[1], s.ids[2], s.ids[3]
	const ver = 100
	if _, err := s.racks[0].Insert(h, []wire.NodeID{a, b, c}, 1, ver, nil); err != nil {
		t.Fatal(err)
	}
	s.keys[k].committed = 7
	// Not the version complete: each extra's VSB is refused.
	s.sendVSBs(s.link(), k, ver+1, 1, c, x, b)
	events := func() []event {
		var out []event
		for {
			src, _, ok := s.ev.earliest()
			if !ok {
				return out
			}
			out = append(out, s.ev.take(src))
		}
	}
	sent := events()
	if len(sent) != 1 || sent[0].kind != evVSB {
		t.Fatalf("queued %v; want one VSB event", sent)
	}
	s.now = sent[0].t
	s.deliverVSBs(sent[0])
	retries := events()
	if len(retries) != 1 || retries[0].kind != evVSB || retries[0].t != s.now+4*s.link() {
		t.Fatalf("queued %v after the delivery; want one VSB event at %d", retries, s.now+4*s.link())
	}
	m := s.vsbs[retries[0].a]
	if want := []wire.NodeID{c, b}; !slices.Equal(m.nodes, want) || m.key != k || m.v != 7 || m.attempt != 2 {
		t.Fatalf("retry %+v; want nodes %v, key %d, version 7, attempt 2", m, want, k)
	}
	if c := s.racks[0].Counters(); c.VSBs != 0 {
		t.Fatalf("directory accepted %d VSBs; want none", c.VSBs)
	}
}

// TestOverloadedRunEnds: an open loop at three times the cluster's
// capacity with 5 ms client timeouts fails most of its operations, as the
// nodes' queues fill with resends; the run still ends once its requests
// are answered or failed (it ran until memory ran out when only answered
// ones counted).
func TestOverloadedRunEnds(t *testing.T) {
	cfg := Config{Nodes: 2, Capacity: 1000, Rate: 6000, ClientTimeout: 5 * time.Millisecond,
		Workload: bench.Workload{Name: "C", Keys: 5000, Zipf: 0.99, Seed: 1}, Warmup: time.Second, Requests: 5000, Seed: 1}
	run, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if run.Errors == 0 || run.Ops+run.Errors < cfg.Requests {
		t.Fatalf("%d answered and %d failed; want some failed, at least %d in all", run.Ops, run.Errors, cfg.Requests)
	}
}
