package bench

import (
	"math"
	"math/rand"
	"slices"

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
// in any other range goes to zipfFormula, and where it is not sure to the
// generator itself, with the same u. The draws are the generator's, with
// math.Pow (in the generator's formula) skipped for all but about 2e-5
// of them at 100k keys and zipf 0.99 (the table answers 55 %).
type tabledZipf struct {
	z       *generator.Zipfian
	table   []int32
	formula *zipfFormula // u the table does not answer, mostly; nil: none
	draws   *drawSource  // the stream's source: its last Int63 is u's
	again   *replaySource
	replay  *rand.Rand // over again: hands the generator that Int63 again
}

func (t *tabledZipf) Next(r *rand.Rand) int64 { return t.rankOf(t.draw(r)) }

// draw is a rank's uniform draw: u, and the Int63 it came from.
func (t *tabledZipf) draw(r *rand.Rand) (u float64, v int64) {
	u = r.Float64()
	return u, t.draws.last
}

// entry is u's table entry.
func (t *tabledZipf) entry(u float64) *int32 { return &t.table[int(u*float64(len(t.table)))] }

// rankOf is the rank of draw (u, v): the table's, else the formula's
// where it is sure, else the generator's from the same Int63 v.
func (t *tabledZipf) rankOf(u float64, v int64) int64 {
	if k := *t.entry(u); k >= 0 {
		return int64(k)
	}
	if t.formula != nil {
		if k, ok := t.formula.rank(u); ok {
			return k
		}
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

// zipfConstants are the generator's α and η, as it computes them (the
// margin covers any last-bit difference).
func zipfConstants(n int64, theta, zetan float64) (alpha, eta float64) {
	zeta2 := 1/math.Pow(1, theta) + 1/math.Pow(2, theta)
	return 1 / (1 - theta), (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan)
}

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
	alpha, eta := zipfConstants(n, theta, zetan)
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

// zipfFormula is the generator's draw for u without math.Pow: the same
// thresholds of u·ζ(n) for ranks 0 and 1, else its formula n·x^α, x =
// η·u − η + 1, as x_j^α·(1+d)^α for the grid point x_j at or below x and
// d = x/x_j − 1, (1+d)^α from its binomial series. That is the exact x^α
// to within 1e-14 of it (the grid keeps |α·d| ≤ 1/16, the series is cut
// where its tail is under 1e-15), as close as math.Pow's own rounding;
// so where n·x^α is at least the table's margin from an integer the
// generator draws the same rank, and elsewhere rank says it is not sure.
// The grid points are the float64s whose low mantissa bits are zero, so
// that x's cell is its bits shifted: 2^(52−shift) cells an octave.
type zipfFormula struct {
	n, eta, zetan, second float64
	shift                 uint
	base                  int         // the first cell's bits >> shift
	grid                  []zipfPoint // by cell
	coef                  []float64   // the series' C(α, k), highest k first
	margin                float64
}

// zipfPoint is a grid point x_j, with 1/x_j and x_j^α.
type zipfPoint struct{ x, inv, pow float64 }

// zipfGridMax bounds the grid (x over many octaves and α large); past it
// the generator draws.
const zipfGridMax = 1 << 12

// newZipfFormula is the formula of go-ycsb's NewZipfian(0, n−1, theta,
// zetan), nil where its grid would be too large or its constants are not
// finite.
func newZipfFormula(n int64, theta, zetan float64) *zipfFormula {
	alpha, eta := zipfConstants(n, theta, zetan)
	lo, hi := min(1-eta, 1), max(1-eta, 1)
	if math.IsInf(alpha, 0) || math.IsNaN(eta) || math.IsInf(eta, 0) || !(lo > 0) || math.IsInf(hi, 0) {
		return nil
	}
	// A cell spans x_j to x_j·(1 + 2^−cellBits) at most: |d| < width.
	cellBits := 4 + max(0, int(math.Ceil(math.Log2(math.Abs(alpha)))))
	if cellBits > 40 {
		return nil
	}
	f := &zipfFormula{n: float64(n), eta: eta, zetan: zetan, second: 1 + math.Pow(0.5, theta),
		shift: uint(52 - cellBits), margin: zipfMargin(n)}
	// One cell more at each end for x's rounding past lo and hi.
	f.base = int(math.Float64bits(lo)>>f.shift) - 1
	cells := int(math.Float64bits(hi)>>f.shift) + 2 - f.base
	if cells > zipfGridMax {
		return nil
	}
	f.grid = make([]zipfPoint, cells)
	for j := range f.grid {
		x := math.Float64frombits(uint64(f.base+j) << f.shift)
		f.grid[j] = zipfPoint{x: x, inv: 1 / x, pow: math.Pow(x, alpha)}
	}
	// The series' terms C(α, k)·d^k; each next is at most width·max(|α|,
	// 1) ≤ 1/16 times the last, so the tail past a term is under 16/15 of
	// the next. A slack on width covers the rounding of d.
	width := 1.01 * math.Ldexp(1, -cellBits)
	c, coef := 1.0, []float64{1}
	for k := 0; k == 0 || math.Abs(c)*math.Pow(width, float64(k)) > 1e-15; k++ {
		c *= (alpha - float64(k)) / float64(k+1)
		coef = append(coef, c)
		if len(coef) > 40 {
			return nil
		}
	}
	slices.Reverse(coef)
	f.coef = coef
	return f
}

// rank is the generator's rank for u, and whether it is sure of it.
func (f *zipfFormula) rank(u float64) (int64, bool) {
	switch uz := u * f.zetan; {
	case uz < 1:
		return 0, true
	case uz < f.second:
		return 1, true
	}
	x := f.eta*u - f.eta + 1
	j := int(math.Float64bits(x)>>f.shift) - f.base
	if j < 0 || j >= len(f.grid) {
		return 0, false
	}
	p := &f.grid[j]
	d := (x - p.x) * p.inv
	s := f.coef[0]
	for _, c := range f.coef[1:] {
		s = s*d + c
	}
	y := f.n * p.pow * s
	k := math.Floor(y)
	if y-k < f.margin || k+1-y < f.margin {
		return 0, false
	}
	return int64(k), true
}
