package bench

import (
	"math"
	"math/rand"

	"github.com/pingcap/go-ycsb/pkg/generator"
)

// zipfTableBits: the zipf draw's table has 2^zipfTableBits ranges of u.
const zipfTableBits = 14

// zipfMargin is how far from an integer the generator's formula over n
// keys must be, at both ends of a range, for the range to draw one rank:
// math.Pow's rounding moves n·x^α by about n·1e-14 (1e-9 at 100k keys),
// far less.
func zipfMargin(n int64) float64 { return 1e-6 + float64(n)*1e-10 }

// tabledZipf is go-ycsb's Zipfian through a table of the rank it draws
// for each of 2^zipfTableBits equal ranges of its uniform u, where that
// rank is provably the same for every u of the range (-1 elsewhere); u
// in any other range goes to the generator itself, with the same u. The
// draws are the generator's, with math.Pow (in the generator's formula)
// skipped for most of them: 55 % at 100k keys and zipf 0.99.
type tabledZipf struct {
	z      *generator.Zipfian
	table  []int32
	draws  *drawSource // the stream's source: its last Int63 is u's
	again  *replaySource
	replay *rand.Rand // over again: hands the generator that Int63 again
}

func (t *tabledZipf) Next(r *rand.Rand) int64 { return t.rankOf(t.draw(r)) }

// draw is a rank's uniform draw: u, and the Int63 it came from.
func (t *tabledZipf) draw(r *rand.Rand) (u float64, v int64) {
	u = r.Float64()
	return u, t.draws.last
}

// entry is u's table entry.
func (t *tabledZipf) entry(u float64) *int32 { return &t.table[int(u*float64(len(t.table)))] }

// rankOf is the rank of draw (u, v): the table's, else the generator's
// from the same Int63 v.
func (t *tabledZipf) rankOf(u float64, v int64) int64 {
	if k := *t.entry(u); k >= 0 {
		return int64(k)
	}
	t.again.v = v
	return t.z.Next(t.replay)
}

// drawSource is a Source64 that notes the last Int63 it returned
// (math/rand's Float64 is float64(Int63()) / 2^63).
type drawSource struct {
	rand.Source64
	last int64
}

func (d *drawSource) Int63() int64 {
	d.last = d.Source64.Int63()
	return d.last
}

// replaySource returns v from every Int63.
type replaySource struct{ v int64 }

func (r *replaySource) Int63() int64 { return r.v }
func (r *replaySource) Seed(int64)   {}

// newZipfTable is the table of a Zipfian over n keys (go-ycsb's
// NewZipfian(0, n−1, theta, zetan)), nil if n does not fit an int32. A
// range [lo, hi] (hi the largest u = float64(Int63()) / 2^63 below the
// next range) draws one rank if the generator draws the same at lo and hi, and both by the same
// threshold of u·ζ(n) (ranks 0 and 1) or both by its formula
// n·(η·u − η + 1)^α far enough from an integer: every step of either is
// monotone in u (the formula to within Pow's rounding, which the margin
// covers), so every u between draws that rank too.
func newZipfTable(n int64, theta, zetan float64) []int32 {
	if n > math.MaxInt32 {
		return nil
	}
	z := generator.NewZipfian(0, n-1, theta, zetan)
	again := &replaySource{}
	replay := rand.New(again)
	// at is the generator's rank for the draw of Int63 v, u = v / 2^63.
	at := func(v int64) (int64, float64) {
		again.v = v
		return z.Next(replay), float64(v) / (1 << 63)
	}
	// The generator's constants, as it computes them (the margin covers
	// any last-bit difference).
	alpha := 1 / (1 - theta)
	zeta2 := 1/math.Pow(1, theta) + 1/math.Pow(2, theta)
	eta := (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan)
	second := 1 + math.Pow(0.5, theta)
	// branch is which way the generator goes at u: 0 or 1 by threshold,
	// 2 by the formula, whose value it returns too.
	branch := func(u float64) (int, float64) {
		switch uz := u * zetan; {
		case uz < 1:
			return 0, 0
		case uz < second:
			return 1, 0
		}
		return 2, float64(n) * math.Pow(eta*u-eta+1, alpha)
	}
	m, margin := 1<<zipfTableBits, zipfMargin(n)
	table := make([]int32, m)
	for b := range table {
		table[b] = -1
		next := float64(b+1) * (1 << (63 - zipfTableBits)) // as a float: the last range's int64 would overflow
		k, lo := at(int64(b) << (63 - zipfTableBits))
		khi, hi := at(int64(math.Nextafter(next, 0)))
		if k != khi || k < 0 || k >= n {
			continue
		}
		blo, vlo := branch(lo)
		bhi, vhi := branch(hi)
		if blo != bhi {
			continue
		}
		if blo == 2 && (int64(vlo) != k || int64(vhi) != k || vlo-float64(k) < margin || float64(k+1)-vhi < margin) {
			continue
		}
		table[b] = int32(k)
	}
	return table
}
