package system

import (
	"math"
	"testing"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/wire"
)

// TestHotKeyFigures: the hottest key's reads over its locations, counted
// from the measured run only; a node outside the final LocationList that
// served it counts as a location (an extra).
func TestHotKeyFigures(t *testing.T) {
	before := Sample{HotReads: []uint64{100, 0, 0, 0, 7}}
	after := Sample{
		HotReads: []uint64{100 + 300, 200, 100, 0, 7 + 200},
		HotLocs:  []wire.NodeID{1, 2, 3, 5}, // chain (1,2,3), extra 5
		HotR:     3,
	}
	var run bench.Run
	hotKeyFigures(&run, before, after)
	// Reads 300, 200, 100, 200: mean 200, max 300.
	if run.HotKeyLocations != 4 || math.Abs(run.HotKeyReadMaxOverMean-1.5) > 1e-9 || math.Abs(run.HotKeyExtraShare-0.25) > 1e-9 {
		t.Fatalf("locations %d, max/mean %g, extra share %g; want 4, 1.5, 0.25", run.HotKeyLocations, run.HotKeyReadMaxOverMean, run.HotKeyExtraShare)
	}
	// Node 4 served reads though the directory no longer lists it.
	after.HotReads[3] = 200
	run = bench.Run{}
	hotKeyFigures(&run, before, after)
	if run.HotKeyLocations != 5 || math.Abs(run.HotKeyExtraShare-0.4) > 1e-9 {
		t.Fatalf("locations %d, extra share %g; want 5, 0.4", run.HotKeyLocations, run.HotKeyExtraShare)
	}
	// No hot key tracked: no figure.
	run = bench.Run{}
	hotKeyFigures(&run, Sample{}, Sample{})
	if run.HotKeyLocations != 0 || run.HotKeyReadMaxOverMean != 0 {
		t.Fatalf("figures without a hot key: %+v", run)
	}
}
