package bench

import (
	"math"
	"math/rand"
	"testing"

	"github.com/pingcap/go-ycsb/pkg/generator"
)

// TestZipfTableDrawsTheGeneratorsRanks: a stream's zipf ranks through the
// table are those of go-ycsb's generator alone on the same seed, draw for
// draw, at skews below, near and above 1 and small and large key counts;
// the table answers most draws (else it is of no use), and the formula
// nearly all the others.
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
		if tz.formula == nil && tc.keys > 2 { // 2 keys: η = 0/0, the table answers all
			t.Fatalf("%d keys, zipf %g: no formula", tc.keys, tc.zipf)
		}
		fromTable, fromGenerator := 0, 0
		for i := range draws {
			got, want := tabled.rank(), plain.rank()
			if got != want {
				t.Fatalf("%d keys, zipf %g: draw %d: rank %d through the table, %d from the generator", tc.keys, tc.zipf, i, got, want)
			}
			if u := float64(tz.draws.last) / (1 << 63); tz.table[int(u*float64(len(tz.table)))] >= 0 {
				fromTable++
			} else if tz.formula == nil {
				fromGenerator++
			} else if _, sure := tz.formula.rank(u); !sure {
				fromGenerator++
			}
		}
		if share := float64(fromTable) / draws; share < tc.minTable {
			t.Errorf("%d keys, zipf %g: %.2f of draws from the table, want at least %.2f", tc.keys, tc.zipf, share, tc.minTable)
		}
		if share := float64(fromGenerator) / draws; share > 0.001 {
			t.Errorf("%d keys, zipf %g: %.4f of draws from the generator, want at most 0.001", tc.keys, tc.zipf, share)
		}
	}
}

// TestZipfFormulaMatchesTheGenerator: where the formula is sure, its rank
// is the generator's for the same u, over u spread evenly and u in the
// top 1/64 (the coldest ranks, where the formula alone answers), at skews
// from 0.5 to 1.5.
func TestZipfFormulaMatchesTheGenerator(t *testing.T) {
	for _, tc := range []struct {
		keys int64
		zipf float64
	}{{100_000, 0.99}, {100_000, 0.9}, {1_000_000, 0.99}, {50_000, 1.5}, {300, 0.5}, {10, 1.2}} {
		src, err := Workload{Name: "C", Keys: tc.keys, Zipf: tc.zipf, Seed: 1}.Build()
		if err != nil {
			t.Fatal(err)
		}
		f := newZipfFormula(tc.keys, src.theta, src.zetan)
		if f == nil {
			t.Fatalf("%d keys, zipf %g: no formula", tc.keys, tc.zipf)
		}
		z := generator.NewZipfian(0, tc.keys-1, src.theta, src.zetan)
		again := &replaySource{}
		replay := rand.New(again)
		sure := 0
		const draws = 200_000
		for i := range int64(draws) {
			v := i * (math.MaxInt64 / draws)
			if i%2 == 1 {
				v = math.MaxInt64 - i*(math.MaxInt64/64/draws)
			}
			again.v = v
			want := z.Next(replay)
			got, ok := f.rank(float64(v) / (1 << 63))
			if !ok {
				continue
			}
			sure++
			if got != want {
				t.Fatalf("%d keys, zipf %g: Int63 %d: rank %d by the formula, %d by the generator", tc.keys, tc.zipf, v, got, want)
			}
		}
		if sure < draws*99/100 {
			t.Errorf("%d keys, zipf %g: the formula sure of %d of %d draws", tc.keys, tc.zipf, sure, draws)
		}
	}
}
