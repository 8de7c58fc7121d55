package directory

import (
	"fmt"
	"testing"

	"github.com/netdir/netdir/wire"
)

func TestRingMap(t *testing.T) {
	m, err := RingMap(3, []wire.NodeID{30, 10, 20, 40}, 3, 7)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m.Chains[0], m.Chains[3], m.Chains[5]) != "[10 20 30] [40 10 20] [20 30 40]" {
		t.Fatalf("chains %v", m.Chains)
	}
	// Every node holds each chain position equally often.
	pos := map[[2]int]int{}
	for _, c := range m.Chains {
		for j, n := range c {
			pos[[2]int{int(n), j}]++
		}
	}
	for k, v := range pos {
		if v != 2 {
			t.Errorf("node %d at position %d in %d partitions, want 2", k[0], k[1], v)
		}
	}
	if m.Position(3, 10) != 1 || m.Position(3, 30) != -1 {
		t.Error("Position wrong")
	}
	for _, bad := range []struct {
		nodes []wire.NodeID
		r     int
	}{{[]wire.NodeID{1, 1, 2}, 2}, {[]wire.NodeID{1, 2}, 3}, {[]wire.NodeID{1}, 0}} {
		if _, err := RingMap(2, bad.nodes, bad.r, 1); err == nil {
			t.Errorf("RingMap(%v, r=%d) accepted", bad.nodes, bad.r)
		}
	}
	d, _ := New(Config{PartitionBits: 3})
	if err := m.Install(d); err != nil {
		t.Fatal(err)
	}
	if p, ok := d.Partition(3); !ok || p.Chain[0] != 40 || p.R != 3 {
		t.Fatalf("installed partition 3: %+v", p)
	}
}
