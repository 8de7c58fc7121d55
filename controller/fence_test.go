package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// fencePlane is a corePlane that checks, before each call the controller
// makes and once more at the end (check), that it routes no read to node
// out (partition buckets, and the buckets of keys) once the nodes may
// hold a layout of epoch from or later, as gossip carries it.
type fencePlane struct {
	*corePlane
	g          *gossip.Gossip
	out        wire.NodeID
	from       uint32 // 0: not yet checking
	keys       []wire.KeyHash
	violations []string
}

func (p *fencePlane) check(call string) {
	if p.from == 0 || p.g.LayoutEpoch() < p.from {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for part := range uint32(16) {
		pt, _ := p.d.Partition(part)
		for _, b := range pt.Buckets {
			if pt.Chain[b] == p.out {
				p.violations = append(p.violations, fmt.Sprintf("%s at epoch %d: partition %d reads node %d", call, p.g.LayoutEpoch(), part, p.out))
				break
			}
		}
	}
	for _, h := range p.keys {
		sl, _ := p.d.Lookup(h)
		for _, b := range sl.Buckets {
			if sl.Locs[b] == p.out {
				p.violations = append(p.violations, fmt.Sprintf("%s at epoch %d: a hot key reads node %d", call, p.g.LayoutEpoch(), p.out))
				break
			}
		}
	}
}

func (p *fencePlane) Setup(ctx context.Context, m *layout.Map, vsbGroup []uint32) error {
	p.check("Setup")
	return p.corePlane.Setup(ctx, m, vsbGroup)
}

func (p *fencePlane) SetPartitionBuckets(ctx context.Context, part uint32, chain []wire.NodeID, b []uint8) error {
	p.check("SetPartitionBuckets")
	return p.corePlane.SetPartitionBuckets(ctx, part, chain, b)
}

func (p *fencePlane) SetSlotBuckets(ctx context.Context, e *Entry) error {
	p.check("SetSlotBuckets")
	return p.corePlane.SetSlotBuckets(ctx, e)
}

// InstallEntry replaces the key's slot, as a re-sync does on a device.
func (p *fencePlane) InstallEntry(ctx context.Context, e *Entry) error {
	p.check("InstallEntry")
	if _, ok := p.d.Lookup(e.Hash); ok {
		if err := p.corePlane.RemoveEntry(ctx, e); err != nil {
			return err
		}
	}
	return p.corePlane.InstallEntry(ctx, e)
}

// TestSpliceFencesReadsFirst: a node spliced out while alive may hear of
// the new layout from no one and serve at the old epoch, while its chains'
// other members, once they hold the new layout, commit writes without it.
// So the controller takes it out of every plane's read routing (partition
// buckets, hot keys' buckets) before it gossips the layout to the nodes:
// from the moment gossip carries the new epoch, the plane sends the node
// no read.
func TestSpliceFencesReadsFirst(t *testing.T) {
	ctx := context.Background()
	p := &fencePlane{corePlane: newCorePlane(t)}
	c, err := New(Config{Layout: ringLayout(t, 8), PromoteMin: 10}, []DataPlane{p}, &recStorage{promoted: map[string][]wire.NodeID{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if p.g, err = gossip.Start(gossip.Config{Name: "controller", Bind: "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	defer p.g.Close()
	c.AttachGossip(p.g)
	key := []byte("fenced-hot")
	p.out = c.Layout().ChainOf(wire.HashKey(key))[1]
	if _, err := c.Pin(ctx, key); err != nil {
		t.Fatal(err)
	}
	p.keys = []wire.KeyHash{wire.HashKey(key)}
	p.from = c.Layout().Epoch() + 1
	if err := c.NodeDown(ctx, p.out); err != nil {
		t.Fatal(err)
	}
	if got := p.g.LayoutEpoch(); got != p.from {
		t.Fatalf("gossip carries epoch %d, want %d", got, p.from)
	}
	p.check("after NodeDown")
	for _, v := range p.violations {
		t.Error(v)
	}
	// Adding the node back takes no member out of a chain: nothing to
	// fence, the nodes hear of it first.
	back, err := c.Layout().WithTail(p.out)
	if err != nil {
		t.Fatal(err)
	}
	if f := ReadFence(c.Layout(), back, c.Entries()); len(f.Parts) != 0 || len(f.Entries) != 0 {
		t.Errorf("adding node %d back fences partitions %v and %d keys", p.out, f.Parts, len(f.Entries))
	}
}

// TestExtrasSkipDownNodes: a key promoted while a node is spliced out gets
// no extra copy there (it would never be made, and its slot would name a
// node that serves nothing).
func TestExtrasSkipDownNodes(t *testing.T) {
	ctx := context.Background()
	c, _, _ := testController(t)
	key := []byte("hot-while-down")
	chain := c.Layout().ChainOf(wire.HashKey(key))
	var down wire.NodeID
	for _, id := range c.Layout().Nodes() {
		if !slices.Contains(chain, id) {
			down = id
			break
		}
	}
	if err := c.NodeDown(ctx, down); err != nil {
		t.Fatal(err)
	}
	c.keysMu.Lock()
	e, err := c.promote(ctx, key, 1, map[wire.NodeID]float64{}, false)
	c.keysMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Locs) <= e.R || slices.Contains(e.Locs, down) {
		t.Fatalf("locations %v (chain %d) with node %d down: want extras, none of them node %d", e.Locs, e.R, down, down)
	}
}
