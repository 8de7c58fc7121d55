package controller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	p4 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// TestP4PlaneLayoutChange: a P4Runtime switch set up with a layout and a
// directory entry takes a layout change (a node spliced out, then back as
// tail) as a re-sync does it, without a pipeline push: Setup again and the
// entry installed again, each accepted, and the switch's chains follow.
func TestP4PlaneLayoutChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const bits = 4
	sw, addr := serveModel(ctx, t, bits)
	pc, err := p4rt.Dial(ctx, p4rt.Config{Addr: addr, DeviceID: 1, Election: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	plane := controller.NewP4Plane("model", pc, p4info(t))
	if err := plane.PushPipeline(ctx, nil); err != nil {
		t.Fatal(err)
	}
	m, err := layout.New(layout.Config{Epoch: 1, PartitionBits: bits, Replicas: 3, Nodes: []layout.Node{
		{ID: 1, Addr: "127.0.0.1:7501"}, {ID: 2, Addr: "127.0.0.1:7502"}, {ID: 3, Addr: "127.0.0.1:7503"}}})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("hot")
	h := wire.HashKey(key)
	entry := func(m *layout.Map) controller.Entry {
		ch := m.ChainOf(h)
		b := make([]uint8, directory.Buckets)
		for i := range b {
			b[i] = uint8(i % len(ch))
		}
		return controller.Entry{Hash: h, Key: key, Slot: 3, Locs: ch, R: len(ch), Buckets: b, Gen: 1, Ver: 1}
	}
	without, err := m.Without(2)
	if err != nil {
		t.Fatal(err)
	}
	back, err := without.WithTail(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*layout.Map{m, without, back} {
		if err := plane.Setup(ctx, m, nil); err != nil {
			t.Fatalf("epoch %d: setup: %v", m.Epoch(), err)
		}
		e := entry(m)
		if err := plane.InstallEntries(ctx, []controller.Entry{e}); err != nil {
			t.Fatalf("epoch %d: entries: %v", m.Epoch(), err)
		}
		for part := range m.Chains() {
			got, ok := sw.Partition(uint32(part))
			if want := m.Chain(uint32(part)); !ok || !slices.Equal(got.Chain[:got.R], want) {
				t.Fatalf("epoch %d: partition %d chain %v, want %v", m.Epoch(), part, got.Chain[:got.R], want)
			}
		}
	}
}

// TestP4PlaneBucketRuns: a P4Runtime switch gets each bucket table as one
// range entry per run (directory.Runs), and a change of weights rewrites
// only the runs that changed: afterwards the switch's tables hold exactly
// the new runs, and the model's slot splits by the new table.
func TestP4PlaneBucketRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sw, addr := serveModel(ctx, t, runsBits)
	pc, err := p4rt.Dial(ctx, p4rt.Config{Addr: addr, DeviceID: 1, Election: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	bucketRunsScenario(ctx, t, pc, nil, func(h wire.KeyHash) ([]uint8, bool) {
		sl, ok := sw.Lookup(h)
		return sl.Buckets[:], ok
	})
}

// runsBits is bucketRunsScenario's partition bits.
const runsBits = 2

// bucketRunsScenario programs the device behind pc (after a pipeline push
// with deviceConfig) with a layout, then a directory entry whose weights
// change four times, the weights of a partition with them, and removes the
// entry, counting the bucket tables' entries by reading them back after
// each step. split, if not nil, returns the bucket table the device splits
// a key by.
func bucketRunsScenario(ctx context.Context, t *testing.T, pc *p4rt.Client, deviceConfig []byte, split func(wire.KeyHash) ([]uint8, bool)) {
	t.Helper()
	schema := p4info(t)
	plane := controller.NewP4Plane("runs", pc, schema)
	if err := plane.PushPipeline(ctx, deviceConfig); err != nil {
		t.Fatal(err)
	}
	m, err := layout.New(layout.Config{Epoch: 1, PartitionBits: runsBits, Replicas: 3, Nodes: []layout.Node{
		{ID: 1, Addr: "127.0.0.1:7501"}, {ID: 2, Addr: "127.0.0.1:7502"}, {ID: 3, Addr: "127.0.0.1:7503"},
		{ID: 4, Addr: "127.0.0.1:7504"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := plane.Setup(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	// count returns the number of entries in a table.
	count := func(table string) int {
		t.Helper()
		tb, err := schema.Table(table)
		if err != nil {
			t.Fatal(err)
		}
		es, err := pc.Read(ctx, &p4.Entity{Entity: &p4.Entity_TableEntry{TableEntry: &p4.TableEntry{TableId: tb.GetPreamble().GetId()}}})
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	parts := 1 << runsBits
	if got := count("buckets_a") + count("buckets_b"); got != 2*3*parts {
		t.Fatalf("even partitions: %d bucket entries, want %d (one run per chain member, two copies)", got, 2*3*parts)
	}
	key := []byte("hot")
	h := wire.HashKey(key)
	locs := append(m.ChainOf(h), 0)
	for _, n := range []wire.NodeID{1, 2, 3, 4} {
		if !slices.Contains(locs, n) {
			locs[3] = n
		}
	}
	e := controller.Entry{Hash: h, Key: key, Slot: 5, Locs: locs, R: 3, Buckets: directory.BucketsForWeights([]uint32{1, 1, 1, 1}), Gen: 1, Ver: 1}
	if err := plane.InstallEntries(ctx, []controller.Entry{e}); err != nil {
		t.Fatal(err)
	}
	for i, w := range [][]uint32{{1, 1, 1, 1}, {0, 1, 0, 3}, {5, 1, 1, 0}, {0, 0, 0, 1}, {1, 1, 1, 1}} {
		e.Buckets = directory.BucketsForWeights(w)
		if i > 0 {
			if err := plane.SetSlotBuckets(ctx, &e); err != nil {
				t.Fatalf("weights %v: %v", w, err)
			}
		}
		if got, want := count("slot_buckets_a")+count("slot_buckets_b"), 2*len(directory.Runs(e.Buckets)); got != want {
			t.Fatalf("weights %v: %d slot bucket entries, want %d", w, got, want)
		}
		if split != nil {
			if got, ok := split(h); !ok || !slices.Equal(got, e.Buckets) {
				t.Fatalf("weights %v: the switch splits by %v, want %v", w, got, e.Buckets)
			}
		}
		chain := m.Chain(1)
		pb := directory.BucketsForWeights(w[:3])
		if err := plane.SetPartitionBuckets(ctx, 1, chain, pb); err != nil {
			t.Fatalf("partition weights %v: %v", w[:3], err)
		}
		if got, want := count("buckets_a"), 3*(parts-1)+len(directory.Runs(pb)); got != want {
			t.Fatalf("partition weights %v: %d entries in buckets_a, want %d", w[:3], got, want)
		}
	}
	if err := plane.RemoveEntry(ctx, &e); err != nil {
		t.Fatal(err)
	}
	if got := count("slot_buckets_a") + count("slot_buckets_b"); got != 0 {
		t.Fatalf("removed: %d slot bucket entries left", got)
	}
}

// BenchmarkResync measures what a re-sync after a switch restart writes to
// the model switch over P4Runtime on loopback: the pipeline push, Setup with
// 1024 partitions over 8 nodes, and 4096 directory entries (chains of 3 and
// one extra, even weights) in one InstallEntries. Run:
//
//	go test -run '^$' -bench Resync -benchtime 5x ./controller/
func BenchmarkResync(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const bits, entries = 10, 4096
	_, addr := serveModelSlots(ctx, b, bits, entries)
	pc, err := p4rt.Dial(ctx, p4rt.Config{Addr: addr, DeviceID: 1, Election: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	plane := controller.NewP4Plane("model", pc, p4info(b))
	var nodes []layout.Node
	for i := 1; i <= 8; i++ {
		nodes = append(nodes, layout.Node{ID: wire.NodeID(i), Addr: fmt.Sprintf("127.0.0.1:%d", 7500+i)})
	}
	m, err := layout.New(layout.Config{Epoch: 1, PartitionBits: bits, Replicas: 3, Nodes: nodes})
	if err != nil {
		b.Fatal(err)
	}
	es := make([]controller.Entry, entries)
	for i := range es {
		key := fmt.Appendf(nil, "key-%d", i)
		h := wire.HashKey(key)
		ch := m.ChainOf(h)
		extra := ch[0]%8 + 1
		for slices.Contains(ch, extra) {
			extra = extra%8 + 1
		}
		locs := append(slices.Clone(ch), extra)
		es[i] = controller.Entry{Hash: h, Key: key, Slot: uint32(i), Locs: locs, R: len(ch),
			Buckets: directory.BucketsForWeights(make([]uint32, len(locs))), Gen: 1, Ver: 1}
	}
	var setup, install time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := plane.PushPipeline(ctx, nil); err != nil {
			b.Fatal(err)
		}
		if err := plane.Setup(ctx, m, nil); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := plane.InstallEntries(ctx, es); err != nil {
			b.Fatal(err)
		}
		setup += t1.Sub(t0)
		install += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(setup.Milliseconds())/n, "setup-ms")
	b.ReportMetric(float64(install.Milliseconds())/n, "entries-ms")
}
