package controller_test

import (
	"context"
	"slices"
	"testing"
	"time"

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
