package storagenode

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// joinsLayout is epoch 1 of five nodes in chains of three over four
// partitions: node 1 heads partition 0 and is the middle of partition 3;
// partitions 1 and 2 are node 5's, without node 1.
func joinsLayout(t *testing.T) *layout.Map {
	t.Helper()
	c := layout.Config{Epoch: 1, PartitionBits: 2, Replicas: 3, Chains: map[uint32][]wire.NodeID{
		0: {1, 2, 3}, 1: {3, 4, 5}, 2: {4, 5, 3}, 3: {2, 1, 3}}}
	for id := 1; id <= 5; id++ {
		c.Nodes = append(c.Nodes, layout.Node{ID: wire.NodeID(id), Addr: fmt.Sprintf("127.0.0.1:%d", 7600+id)})
	}
	m, err := layout.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestJoinsSkipsUnchangedChains: a node that skips an epoch which changed
// other nodes' chains only (node 5 spliced out and back) catches up with
// none of its own, which served throughout; one that skips an epoch which
// spliced it out and back (flaw I: the same chain before and after)
// catches up with each chain it is in below the head.
func TestJoinsSkipsUnchangedChains(t *testing.T) {
	must := func(m *layout.Map, err error) *layout.Map {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	e1 := joinsLayout(t)
	e3 := must(must(e1.Without(5)).WithTail(5))
	for _, p := range []uint32{0, 3} {
		if e3.Joined(p, 1) != 0 {
			t.Errorf("partition %d: node 1 joined at %d, want 0 (as placed)", p, e3.Joined(p, 1))
		}
	}
	if got := joins(e1, e3, 1); len(got) != 0 {
		t.Errorf("node 1 from epoch 1 to 3 (node 5 out and back): catches up with %v, want none", slices.Sorted(maps.Keys(got)))
	}
	if got := joins(e1, e3, 5); !slices.Equal(slices.Sorted(maps.Keys(got)), []uint32{1, 2}) {
		t.Errorf("node 5 from epoch 1 to 3 (itself out and back): catches up with %v, want [1 2]", slices.Sorted(maps.Keys(got)))
	}

	// Flaw I: node 3, tail of partitions 0 and 3, spliced out and back;
	// both chains are the same at epochs 1 and 3.
	f2 := must(e1.Without(3))
	f3 := must(f2.WithTail(3))
	if !slices.Equal(f3.Chain(0), e1.Chain(0)) || f3.Joined(0, 3) != 3 {
		t.Fatalf("partition 0: chain %v, node 3 joined at %d at epoch 3, want %v, joined at 3", f3.Chain(0), f3.Joined(0, 3), e1.Chain(0))
	}
	if got := joins(e1, f3, 3); !slices.Equal(slices.Sorted(maps.Keys(got)), []uint32{0, 1, 2, 3}) {
		t.Errorf("node 3 from epoch 1 to 3 (itself out and back): catches up with %v, want [0 1 2 3]", slices.Sorted(maps.Keys(got)))
	}
	// Node 1 skipped the same epochs: partition 3's chain changed (node 3
	// left and came back), but node 1 was in it throughout, so every write
	// the chain committed passed through it: it catches up with nothing.
	if got := joins(e1, f3, 1); len(got) != 0 {
		t.Errorf("node 1 from epoch 1 to 3 (node 3 out and back): catches up with %v, want none", slices.Sorted(maps.Keys(got)))
	}
	// One epoch at a time, a node catches up only with the chains it joins.
	if got := joins(f2, f3, 1); len(got) != 0 {
		t.Errorf("node 1 from epoch 2 to 3: catches up with %v, want none", slices.Sorted(maps.Keys(got)))
	}
}
