package storagenode

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

func TestRecordCodec(t *testing.T) {
	r := record{
		Clean: version{Ver: 3, Val: []byte("clean")},
		Dirty: []version{
			{Ver: 5, Val: []byte("five"), ReqID: 77, TS: 9, Tenant: 2, Op: uint8(wire.OpPut), Addr: netip.MustParseAddrPort("127.0.0.1:99"), Reservation: true},
			{Ver: 6, Del: true, ReqID: 78, Op: uint8(wire.OpDel), Addr: netip.MustParseAddrPort("[::1]:7")},
		},
	}
	got, err := decodeRecord(r.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Clean.Ver != 3 || string(got.Clean.Val) != "clean" || len(got.Dirty) != 2 ||
		got.Dirty[0].Addr != r.Dirty[0].Addr || got.Dirty[1].Addr != r.Dirty[1].Addr || !got.Dirty[1].Del ||
		got.Dirty[0].ReqID != 77 || got.Dirty[0].Tenant != 2 || string(got.Dirty[0].Val) != "five" ||
		!got.Dirty[0].Reservation || got.Dirty[1].Reservation {
		t.Fatalf("round trip: %+v", got)
	}
	enc := r.encode()
	for i := 0; i < len(enc); i++ {
		if _, err := decodeRecord(enc[:i]); err == nil {
			t.Fatalf("truncated record (%d of %d bytes) decoded", i, len(enc))
		}
	}
	// CRAQ bookkeeping: versions merge by number, whatever the order.
	var x record
	for _, v := range []uint64{4, 2, 3, 2} {
		x.addDirty(version{Ver: v})
	}
	if x.Latest().Ver != 4 || len(x.Dirty) != 3 {
		t.Fatalf("dirty: %+v", x.Dirty)
	}
	if !x.commit(3) || x.Clean.Ver != 3 || len(x.Dirty) != 1 {
		t.Fatalf("commit 3: %+v", x)
	}
	if x.commit(9) || x.addDirty(version{Ver: 3}) {
		t.Fatal("commit of an unknown version or re-adding a clean one changed the record")
	}
	if !x.setClean(version{Ver: 4}) || len(x.Dirty) != 0 || x.setClean(version{Ver: 4}) {
		t.Fatalf("setClean: %+v", x)
	}
}

// TestSyncDataCodec; the node-op layout's own tests are wire's.
func TestSyncDataCodec(t *testing.T) {
	body := appendSyncRecord(nil, []byte("k1"), &version{Ver: 7, Val: []byte("v")})
	ext := append([]byte{1, 0, 1}, body...)
	recs, more, ok := decodeSyncData(ext)
	if !ok || !more || len(recs) != 1 || string(recs[0].Key) != "k1" || recs[0].V.Ver != 7 {
		t.Fatalf("sync data: %+v %v %v", recs, more, ok)
	}
}

// FuzzDecoders: no decoder of this package's records panics on any input
// (wire fuzzes the node-op layout).
func FuzzDecoders(f *testing.F) {
	r := record{Clean: version{Ver: 1, Val: []byte("x")}, Dirty: []version{{Ver: 2, Addr: netip.MustParseAddrPort("127.0.0.1:1")}}}
	f.Add(r.encode())
	f.Add(append([]byte{0, 0, 1}, appendSyncRecord(nil, []byte("k"), &version{Ver: 1})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeRecord(b)
		decodeSyncData(b)
		decodeDedup(b)
	})
}

// fakeDB is a DBForCompaction that always has a compaction waiting.
type fakeDB struct {
	allowed   int
	scheduled int
	// idle: no compaction waits, so the scheduler's loop grants none in
	// the background while a test calls TrySchedule itself.
	idle bool
}

func (f *fakeDB) GetAllowedWithoutPermission() int { return f.allowed }
func (f *fakeDB) GetWaitingCompaction() (bool, pebble.WaitingCompaction) {
	return !f.idle, pebble.WaitingCompaction{}
}
func (f *fakeDB) Schedule(pebble.CompactionGrantHandle) bool { f.scheduled++; return true }

func TestSchedulerShares(t *testing.T) {
	s := NewScheduler(100<<20, 1<<20, AllocatorFunc(func(tl []TreeLoad) []float64 { return []float64{3, 1, 0} }))
	defer s.Close()
	var ts []*treeSched
	for i := range 3 {
		x := s.forTree(&tree{pos: i, lat: newLatencyRing(8)})
		x.Register(1, &fakeDB{allowed: 0})
		ts = append(ts, x)
	}
	s.sample()
	// The zero share is pooled at the floor; the rest of the budget is
	// split 3:1.
	rates := s.Rates()
	want := []int64{(99 << 20) * 3 / 4, (99 << 20) / 4, 1 << 20}
	for i := range want {
		if rates[i] != want[i] {
			t.Fatalf("rates %v, want %v", rates, want)
		}
	}
	if p := s.Pooled(); p[0] || p[1] || !p[2] {
		t.Fatalf("pooled %v, want the third tree only", p)
	}
	s.SetAllocator(EqualShares{})
	s.sample()
	for _, r := range s.Rates() {
		if r != (100<<20)/3 {
			t.Fatalf("equal shares: %v", s.Rates())
		}
	}
	for _, x := range ts {
		x.Unregister()
	}
}

func TestSchedulerGrants(t *testing.T) {
	s := NewScheduler(0, 0, nil)
	defer s.Close()
	a := s.forTree(&tree{lat: newLatencyRing(8)})
	b := s.forTree(&tree{lat: newLatencyRing(8)})
	da, db := &fakeDB{allowed: 3, idle: true}, &fakeDB{allowed: 1, idle: true}
	a.Register(1, da)
	b.Register(1, db)
	var handles []pebble.CompactionGrantHandle
	for range 5 {
		if ok, h := a.TrySchedule(); ok {
			handles = append(handles, h)
		}
	}
	// Node cap 2 for paced compactions: tree a gets 2 of its 3.
	if len(handles) != DefaultMaxCompactions {
		t.Fatalf("granted %d, want %d", len(handles), DefaultMaxCompactions)
	}
	// Every tree may run one even at the node cap: no starvation.
	ok, hb := b.TrySchedule()
	if !ok {
		t.Fatal("tree b starved")
	}
	if ok, _ := b.TrySchedule(); ok {
		t.Fatal("tree b over its own limit")
	}
	// A tree with a deep L0 is not held by the node cap.
	a.l0Files.Store(DefaultL0Urgent)
	if ok, h := a.TrySchedule(); !ok {
		t.Fatal("urgent tree refused")
	} else {
		handles = append(handles, h)
	}
	for _, h := range append(handles, hb) {
		h.Started()
		h.Done()
	}
	a.Unregister()
	b.Unregister()
}

func TestPacingHoldsL0UntilUrgent(t *testing.T) {
	s := NewScheduler(1<<20, 1<<20, nil)
	defer s.Close()
	tr := &tree{lat: newLatencyRing(8)}
	x := s.forTree(tr)
	x.Register(1, &fakeDB{allowed: 2})
	s.sample()
	if r := x.rate.Load(); r != 1<<20 {
		t.Fatalf("shallow L0: rate %d, want the budget", r)
	}
	// An L0 compaction over the bucket, L0 shallow: paced.
	g := &grant{ts: x}
	g.l0.Store(true)
	g.Started()
	g.CumulativeStats(pebble.CompactionGrantHandleStats{CumWriteBytes: 256 << 10})
	g.Done()
	if tr.throttledNanos.Load() == 0 || tr.deepL0Bytes.Load() != 0 {
		t.Fatalf("an L0 compaction over the budget, L0 shallow: throttled %d ns, deep-L0 %d bytes; want paced at the budget",
			tr.throttledNanos.Load(), tr.deepL0Bytes.Load())
	}
	// With L0Urgent files in L0 the rate doubles, and doubles again
	// sched.DeepL0DoublingFiles files deeper: still paced, never unpaced.
	for _, c := range []struct {
		l0   int64
		rate int64
	}{{DefaultL0Urgent, 2 << 20}, {DefaultL0Urgent + sched.DeepL0DoublingFiles, 4 << 20}} {
		x.l0Files.Store(c.l0)
		s.sample()
		if r := x.rate.Load(); r != c.rate {
			t.Fatalf("L0 %d files: rate %d, want %d", c.l0, r, c.rate)
		}
	}
	throttled, deep := tr.throttledNanos.Load(), tr.deepL0Bytes.Load()
	g2 := &grant{ts: x}
	g2.Started()
	g2.CumulativeStats(pebble.CompactionGrantHandleStats{CumWriteBytes: 2 << 20})
	g2.Done()
	if tr.throttledNanos.Load() == throttled || tr.deepL0Bytes.Load()-deep != 2<<20 {
		t.Fatalf("deep L0: throttled %d ns more, deep-L0 %d bytes more; want paced and all 2 MiB counted",
			tr.throttledNanos.Load()-throttled, tr.deepL0Bytes.Load()-deep)
	}
	if tr.compactBytes.Load() != 2<<20+256<<10 {
		t.Fatalf("compaction bytes %d", tr.compactBytes.Load())
	}
	x.Unregister()
}

// TestCompactionsRun drives a real node's trees past their memtables so
// that flushes and compactions run under the node scheduler.
func TestCompactionsRun(t *testing.T) {
	m, err := layout.New(layout.Config{PartitionBits: 2, Replicas: 1, Nodes: []layout.Node{{ID: 1, Addr: "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := Start(Options{ID: 1, Dir: filepath.Join(t.TempDir(), "n"), Layout: m, MemTableBytes: 256 << 10, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	tr := n.trees[0]
	val := bytes.Repeat([]byte("x"), 1000)
	for round := 0; round < 40 && tr.compactions.Load() == 0; round++ {
		b := tr.db.NewBatch()
		for i := range 1000 {
			k := []byte(fmt.Sprintf("k%06d", (round*1000+i)%7000))
			r := record{Clean: version{Ver: uint64(round + 1), Val: val}}
			b.Set(recordKey(0, k), r.encode(), nil)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		b.Close()
		tr.db.Flush()
	}
	deadline := time.Now().Add(20 * time.Second)
	for (tr.compactions.Load() == 0 || tr.compactBytes.Load() == 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := n.Stats()
	if st.Trees[0].Compactions == 0 || st.Trees[0].CompactionBytes == 0 {
		t.Fatalf("no compaction ran under the scheduler: %+v", st.Trees[0])
	}
}
