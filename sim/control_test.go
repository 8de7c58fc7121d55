package sim

import (
	"testing"

	"github.com/netdir/netdir/directory"
)

// Every rack directory holds the layout as directory.InstallLayout
// installs it, the racks after the first copying the first's.
func TestRacksHoldTheLayout(t *testing.T) {
	cfg := smallConfig(1)
	cfg.Nodes, cfg.RackSize = 12, 4
	s := newSim(t, cfg)
	if len(s.racks) < 2 {
		t.Fatalf("%d racks, want several", len(s.racks))
	}
	want, err := directory.New(directory.Config{PartitionBits: s.cfg.PartitionBits, Slots: 1, MaxNodes: s.cfg.Nodes + 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := directory.InstallLayout(want, s.lay); err != nil {
		t.Fatal(err)
	}
	for r, d := range s.racks {
		for p := range s.chains {
			got, _ := d.Partition(uint32(p))
			if w, _ := want.Partition(uint32(p)); got != w {
				t.Fatalf("rack %d partition %d: %v, want %v", r, p, got, w)
			}
		}
	}
}
