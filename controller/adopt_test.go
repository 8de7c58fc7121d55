package controller

import (
	"context"
	"slices"
	"testing"

	"github.com/netdir/netdir/layout"
)

// TestAdoptLayout: a controller takes a layout the nodes hold only if its
// epoch is above its own, and then programs its data plane with it; an
// older or equal one changes nothing.
func TestAdoptLayout(t *testing.T) {
	ctx := context.Background()
	c, p, _ := testController(t)
	down, err := c.Layout().Without(3)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := down.WithTail(3)
	if err != nil {
		t.Fatal(err)
	}
	if newer, err = newer.Without(3); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.AdoptLayout(ctx, newer, true); !ok || err != nil {
		t.Fatalf("adopting epoch %d over %d: %v, %v", newer.Epoch(), c.Layout().Epoch(), ok, err)
	}
	if got := c.Layout(); got.Epoch() != newer.Epoch() || !slices.Equal(got.Down(), []uint16{3}) {
		t.Fatalf("layout epoch %d down %v after adopting epoch %d", got.Epoch(), got.Down(), newer.Epoch())
	}
	for part := range newer.Partitions() {
		if pt, ok := p.d.Partition(uint32(part)); !ok || slices.Contains(pt.Chain[:pt.R], 3) {
			t.Fatalf("partition %d installed as %+v: still routes to node 3", part, pt)
		}
	}
	// An older layout (the YAML's, or the one before) is refused.
	for _, m := range []*layout.Map{down, newer} {
		if ok, err := c.AdoptLayout(ctx, m, true); ok || err != nil {
			t.Fatalf("adopting epoch %d over %d: %v, %v", m.Epoch(), c.Layout().Epoch(), ok, err)
		}
	}
	if c.Layout().Epoch() != newer.Epoch() {
		t.Fatalf("epoch %d after refusing older layouts, want %d", c.Layout().Epoch(), newer.Epoch())
	}
}

// TestNodeReplace: a node down is replaced by spares in every chain of its
// placement, with a new epoch; a node not down is left.
func TestNodeReplace(t *testing.T) {
	ctx := context.Background()
	c, p, _ := testController(t)
	before := c.Layout().Epoch()
	if err := c.NodeReplace(ctx, 5); err != nil || c.Layout().Epoch() != before {
		t.Fatalf("replacing a live node: %v, epoch %d→%d", err, before, c.Layout().Epoch())
	}
	if err := c.NodeDown(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := c.NodeReplace(ctx, 5); err != nil {
		t.Fatal(err)
	}
	m := c.Layout()
	if m.Epoch() != before+2 || m.Placed(5) != 0 {
		t.Fatalf("epoch %d (was %d), node 5 placed in %d chains", m.Epoch(), before, m.Placed(5))
	}
	for part := range m.Partitions() {
		pt, ok := p.d.Partition(uint32(part))
		if !ok || pt.R != 3 || slices.Contains(pt.Chain[:pt.R], 5) || !slices.Equal(pt.Chain[:pt.R], m.Chain(uint32(part))) {
			t.Fatalf("partition %d installed as %+v, layout chain %v", part, pt, m.Chain(uint32(part)))
		}
	}
	if err := c.NodeReplace(ctx, 5); err != nil || c.Layout().Epoch() != m.Epoch() {
		t.Fatalf("replacing again: %v, epoch %d", err, c.Layout().Epoch())
	}
}
