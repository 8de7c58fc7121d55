package bench

import "testing"

// TestZipfTableDrawsTheGeneratorsRanks: a stream's zipf ranks through the
// table are those of go-ycsb's generator alone on the same seed, draw for
// draw, at skews below, near and above 1 and small and large key counts;
// and the table answers most draws (else it is of no use).
func TestZipfTableDrawsTheGeneratorsRanks(t *testing.T) {
	for _, tc := range []struct {
		keys     int64
		zipf     float64
		minTable float64 // share of draws the table answers, at least
	}{{100_000, 0.99, 0.5}, {100_000, 1.2, 0.5}, {20_000, 0.5, 0.2}, {1000, 0.99, 0.5}, {5000, 1.2, 0.5}, {2, 0.99, 0.5}} {
		src, err := Workload{Name: "C", Keys: tc.keys, Zipf: tc.zipf, Seed: 3}.Build()
		if err != nil {
			t.Fatal(err)
		}
		tabled, plain := src.Stream(0), src.Stream(0)
		tz, ok := tabled.keys.(*tabledZipf)
		if !ok {
			t.Fatalf("%d keys: the stream draws zipf without the table", tc.keys)
		}
		plain.keys = plain.keys.(*tabledZipf).z
		const draws = 1_000_000
		fromTable := 0
		for i := range draws {
			got, want := tabled.rank(), plain.rank()
			if got != want {
				t.Fatalf("%d keys, zipf %g: draw %d: rank %d through the table, %d from the generator", tc.keys, tc.zipf, i, got, want)
			}
			if u := float64(tz.draws.last) / (1 << 63); tz.table[int(u*float64(len(tz.table)))] >= 0 {
				fromTable++
			}
		}
		if share := float64(fromTable) / draws; share < tc.minTable {
			t.Errorf("%d keys, zipf %g: %.2f of draws from the table, want at least %.2f", tc.keys, tc.zipf, share, tc.minTable)
		}
	}
}
