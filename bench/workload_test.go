package bench

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/netdir/netdir/wire"
)

// within reports whether the empirical frequency of count in n draws is
// within z binomial standard deviations of p (exactly p when p is 0 or 1).
func within(count, n int, p, z float64) (ok bool, bound float64) {
	f := float64(count) / float64(n)
	if p == 0 || p == 1 {
		return f == p, 0
	}
	bound = z * math.Sqrt(p*(1-p)/float64(n))
	return math.Abs(f-p) <= bound, bound
}

func build(t *testing.T, w Workload) *Source {
	t.Helper()
	s, err := w.Build()
	if err != nil {
		t.Fatalf("Build(%+v): %v", w, err)
	}
	return s
}

func TestYCSBMixes(t *testing.T) {
	const n = 100_000
	for _, name := range []string{"A", "B", "C", "D", "E", "F"} {
		t.Run(name, func(t *testing.T) {
			s := build(t, Workload{Name: name, Keys: 1000, Seed: 7})
			mix := s.Workload().Mix
			st := s.Stream(0)
			var counts [numOpKinds]int
			reads := 0
			for i := 0; i < n; i++ {
				op := st.Next()
				counts[op.Kind]++
				if op.Kind == OpRead || op.Kind == OpScan {
					reads++
				}
				st.Done(op)
			}
			if ok, b := within(reads, n, mix.ReadFraction(), 4.5); !ok {
				t.Errorf("read fraction %.4f, want %.4f ± %.4f", float64(reads)/n, mix.ReadFraction(), b)
			}
			want := [numOpKinds]float64{mix.Read, mix.Update, mix.Insert, mix.Scan, mix.RMW}
			for k := OpKind(0); k < numOpKinds; k++ {
				if ok, b := within(counts[k], n, want[k], 4.5); !ok {
					t.Errorf("%v fraction %.4f, want %.4f ± %.4f", k, float64(counts[k])/n, want[k], b)
				}
			}
		})
	}
}

func TestYCSBSpec(t *testing.T) {
	// The standard mixes, spelled out against YCSB's workload files.
	want := map[string]Mix{
		"a": {Read: .5, Update: .5}, "b": {Read: .95, Update: .05}, "c": {Read: 1},
		"d": {Read: .95, Insert: .05}, "e": {Scan: .95, Insert: .05}, "f": {Read: .5, RMW: .5},
	}
	for name, m := range want {
		got, err := YCSB(name)
		if err != nil || got != m {
			t.Errorf("YCSB(%q) = %+v, %v; want %+v", name, got, err, m)
		}
	}
	if _, err := YCSB("G"); err == nil {
		t.Error("YCSB(G) succeeded")
	}
}

func TestWriteMix(t *testing.T) {
	s := build(t, Workload{Name: "rw10", Mix: WriteMix(0.1), Keys: 100, Seed: 1})
	st := s.Stream(0)
	writes := 0
	for i := 0; i < 100_000; i++ {
		if st.Next().Kind == OpUpdate {
			writes++
		}
	}
	if ok, b := within(writes, 100_000, 0.1, 4.5); !ok || s.Workload().Name != "rw10" {
		t.Errorf("write fraction %.4f (±%.4f), name %q", float64(writes)/100_000, b, s.Workload().Name)
	}
}

func TestBuildRejects(t *testing.T) {
	for _, w := range []Workload{
		{Name: "Z"},
		{Name: "A", Keys: 1},
		{Name: "A", Dist: "pareto"},
		{Name: "A", Zipf: -1},
		{Name: "A", ValueSize: wire.MaxValue + 1},
		{Name: "A", ParetoAlpha: -2},
		{Mix: Mix{Read: 0.5, Update: 0.4}},
		{Mix: Mix{Read: 1.5, Update: -0.5}},
	} {
		if _, err := w.Build(); err == nil {
			t.Errorf("Build(%+v) succeeded", w)
		}
	}
}

func TestBuildDefaults(t *testing.T) {
	s := build(t, Workload{Name: "b"})
	w := s.Workload()
	if w.Name != "B" || w.Keys != DefaultKeys || w.ValueSize != DefaultValueSize ||
		w.Zipf != DefaultZipf || w.Dist != DistZipf || w.KeyPrefix != DefaultKeyPrefix {
		t.Errorf("defaults not applied: %+v", w)
	}
	u := build(t, Workload{Name: "C", Dist: DistUniform, Zipf: 1.2})
	if u.Workload().Zipf != 0 {
		t.Errorf("uniform workload keeps zipf %g", u.Workload().Zipf)
	}
}

func TestKeyNames(t *testing.T) {
	s := build(t, Workload{Name: "C", Keys: 10})
	if got := string(s.Key(42)); got != "user000000000042" {
		t.Errorf("Key(42) = %q", got)
	}
	op := s.Stream(0).Next()
	if string(op.Key) != string(s.Key(op.Index)) {
		t.Errorf("op key %q does not name index %d", op.Key, op.Index)
	}
}

func TestStreamsDeterministic(t *testing.T) {
	a := build(t, Workload{Name: "A", Keys: 1000, Seed: 3})
	b := build(t, Workload{Name: "A", Keys: 1000, Seed: 3})
	sa, sb, sc := a.Stream(1), b.Stream(1), a.Stream(2)
	same := 0
	for i := 0; i < 1000; i++ {
		x, y, z := sa.Next(), sb.Next(), sc.Next()
		if x.Kind != y.Kind || x.Index != y.Index || len(x.Value) != len(y.Value) {
			t.Fatalf("draw %d differs for the same seed and stream: %+v vs %+v", i, x, y)
		}
		if x.Kind == z.Kind && x.Index == z.Index {
			same++
		}
	}
	if same > 500 {
		t.Errorf("streams 1 and 2 agree on %d of 1000 draws", same)
	}
}

// zipfCounts draws n key ranks and counts them.
func zipfCounts(t *testing.T, keys int64, theta float64, n int) []int {
	t.Helper()
	s := build(t, Workload{Name: "C", Keys: keys, Zipf: theta, Seed: 11})
	st := s.Stream(0)
	c := make([]int, keys)
	for i := 0; i < n; i++ {
		op := st.Next()
		if op.Index < 0 || op.Index >= keys {
			t.Fatalf("index %d outside [0, %d)", op.Index, keys)
		}
		c[op.Index]++
	}
	return c
}

func TestZipfHottestKeys(t *testing.T) {
	const keys, n = 100, 200_000
	for _, theta := range []float64{0.9, 0.99, 1.0, 1.2} {
		c := zipfCounts(t, keys, theta, n)
		hot := 0
		for i := range c {
			if c[i] > c[hot] {
				hot = i
			}
		}
		if hot != 0 {
			t.Errorf("θ=%g: hottest key is %d, want 0", theta, hot)
		}
		// Gray's method draws ranks 0 and 1 exactly (the rest are
		// approximate), so those two must match the pmf.
		for r := int64(0); r < 2; r++ {
			p := ZipfPMF(r, keys, theta)
			if ok, b := within(c[r], n, p, 4.5); !ok {
				t.Errorf("θ=%g rank %d: frequency %.4f, pmf %.4f ± %.4f", theta, r, float64(c[r])/n, p, b)
			}
		}
		// Skew orders the mass: the top 10% of keys carry more than under
		// a lower θ.
		top := 0
		for _, x := range c[:keys/10] {
			top += x
		}
		if f := float64(top) / n; f < 0.4 {
			t.Errorf("θ=%g: top 10%% of keys carry %.3f of draws", theta, f)
		}
	}
}

func TestZipfPMF(t *testing.T) {
	// θ=1, n=4: H_4 = 25/12.
	if got, want := ZipfPMF(0, 4, 1), 12.0/25; math.Abs(got-want) > 1e-12 {
		t.Errorf("ZipfPMF(0,4,1) = %g, want %g", got, want)
	}
	sum := 0.0
	for r := int64(0); r < 50; r++ {
		sum += ZipfPMF(r, 50, 1.2)
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("pmf sums to %g", sum)
	}
}

func TestUniformChiSquare(t *testing.T) {
	const keys, n = 100, 100_000
	s := build(t, Workload{Name: "C", Keys: keys, Dist: DistUniform, Seed: 5})
	st := s.Stream(0)
	c := make([]float64, keys)
	for i := 0; i < n; i++ {
		c[st.Next().Index]++
	}
	e := float64(n) / keys
	chi := 0.0
	for _, x := range c {
		chi += (x - e) * (x - e) / e
	}
	crit := distuv.ChiSquared{K: keys - 1}.Quantile(0.999)
	if chi > crit {
		t.Errorf("χ² = %.1f over %d keys, 99.9%% critical value %.1f", chi, keys, crit)
	}
	// And zipf keys fail the same test, so it can tell.
	z := zipfCounts(t, keys, 0.99, n)
	chi = 0
	for _, x := range z {
		chi += (float64(x) - e) * (float64(x) - e) / e
	}
	if chi <= crit {
		t.Errorf("zipf draws pass the uniformity test (χ² = %.1f)", chi)
	}
}

func TestParetoSizes(t *testing.T) {
	const n = 200_000
	for _, alpha := range []float64{1.5, 2.5} {
		s := build(t, Workload{Name: "A", Keys: 100, ValueSize: 100, ParetoAlpha: alpha, Seed: 9})
		st := s.Stream(0)
		sizes := make([]float64, n)
		sum := 0.0
		for i := range sizes {
			v := st.ValueSize()
			if v < 100 || v > wire.MaxValue {
				t.Fatalf("α=%g: size %d outside [100, %d]", alpha, v, wire.MaxValue)
			}
			sizes[i] = float64(v)
			sum += float64(v)
		}
		// Rounding up to whole bytes adds half a byte on average.
		want := ClampedParetoMean(100, alpha, wire.MaxValue) + 0.5
		tol := 0.02 * want
		if alpha < 2 {
			tol = 0.06 * want // infinite variance below the clamp: slower convergence
		}
		if got := sum / n; math.Abs(got-want) > tol {
			t.Errorf("α=%g: mean size %.1f, want %.1f ± %.1f", alpha, got, want, tol)
		}
		if alpha > 2 {
			// The tail slope: Hill over the sizes recovers α.
			if h := Hill(sizes, 0); math.Abs(h-alpha) > 0.15 {
				t.Errorf("α=%g: Hill over sizes %.3f", alpha, h)
			}
		}
	}
	// α ≤ 1: the clamp bites.
	s := build(t, Workload{Name: "A", Keys: 100, ValueSize: 1000, ParetoAlpha: 0.5, Seed: 1})
	st := s.Stream(0)
	clamped := 0
	for i := 0; i < 10_000; i++ {
		if st.ValueSize() == wire.MaxValue {
			clamped++
		}
	}
	// P(X > 32768) = (1000/32768)^0.5 ≈ 0.175.
	if ok, b := within(clamped, 10_000, math.Sqrt(1000.0/wire.MaxValue), 4.5); !ok {
		t.Errorf("clamped fraction %.4f, want %.4f ± %.4f", float64(clamped)/10_000, math.Sqrt(1000.0/wire.MaxValue), b)
	}
}

func TestClampedParetoMean(t *testing.T) {
	// Large clamp: the Pareto mean α·xm/(α−1).
	if got := ClampedParetoMean(10, 3, 1e12); math.Abs(got-15) > 1e-6 {
		t.Errorf("ClampedParetoMean(10,3,∞) = %g, want 15", got)
	}
	// α = 1: xm(1 + ln(c/xm)).
	if got, want := ClampedParetoMean(1, 1, math.E), 2.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("ClampedParetoMean(1,1,e) = %g, want %g", got, want)
	}
	if got := ClampedParetoMean(10, 2, 5); got != 5 {
		t.Errorf("clamp below xm: %g", got)
	}
}

func TestFixedSizes(t *testing.T) {
	s := build(t, Workload{Name: "A", Keys: 100, ValueSize: 777})
	st := s.Stream(0)
	for i := 0; i < 1000; i++ {
		op := st.Next()
		switch op.Kind {
		case OpUpdate:
			if len(op.Value) != 777 {
				t.Fatalf("update value of %d bytes", len(op.Value))
			}
		case OpRead:
			if op.Value != nil {
				t.Fatalf("read carries a value")
			}
		}
	}
}

func TestReadLatest(t *testing.T) {
	const keys = 1000
	s := build(t, Workload{Name: "D", Keys: keys, Seed: 2})
	st := s.Stream(0)
	inserts, newer := 0, 0
	for i := 0; i < 20_000; i++ {
		op := st.Next()
		switch op.Kind {
		case OpInsert:
			if want := int64(keys + inserts); op.Index != want {
				t.Fatalf("insert %d has index %d, want %d", inserts, op.Index, want)
			}
			inserts++
		case OpRead:
			if last := int64(keys + inserts - 1); op.Index < 0 || op.Index > last {
				t.Fatalf("read of %d outside [0, %d]", op.Index, last)
			}
			if op.Index >= keys {
				newer++
			}
		}
		st.Done(op)
	}
	if s.Inserted() != int64(inserts) {
		t.Errorf("Inserted() = %d, want %d", s.Inserted(), inserts)
	}
	// Reads favour the newest keys: with ~1000 inserts over the run, a
	// large share of reads fall on inserted keys.
	if newer < 5000 {
		t.Errorf("only %d reads hit inserted keys", newer)
	}
	// An insert not yet acknowledged is never read.
	s2 := build(t, Workload{Name: "D", Keys: keys, Seed: 3})
	st2 := s2.Stream(0)
	var pending []Op
	for i := 0; i < 5000; i++ {
		op := st2.Next()
		if op.Kind == OpInsert {
			pending = append(pending, op)
			continue
		}
		if op.Index >= keys {
			t.Fatalf("read of unacknowledged key %d", op.Index)
		}
	}
	if len(pending) == 0 {
		t.Fatal("no inserts drawn")
	}
}

func TestScanReadsFirstKey(t *testing.T) {
	s := build(t, Workload{Name: "E", Keys: 500, Seed: 4})
	st := s.Stream(0)
	scans := 0
	for i := 0; i < 2000; i++ {
		op := st.Next()
		if op.Kind == OpScan {
			scans++
			if op.Index < 0 || op.Index >= 500 || op.Value != nil {
				t.Fatalf("scan op %+v", op)
			}
		}
		st.Done(op)
	}
	if scans == 0 {
		t.Fatal("no scans drawn")
	}
}

// TestDrawIsNextUnnamed: Draw gives Next's operations, but for the key's
// name, which Source.AppendKey gives.
func TestDrawIsNextUnnamed(t *testing.T) {
	src, err := Workload{Name: "A", Keys: 1000, Seed: 4}.Build()
	if err != nil {
		t.Fatal(err)
	}
	named, unnamed := src.Stream(1), src.Stream(1)
	for i := range 10_000 {
		a, b := named.Next(), unnamed.Draw()
		if a.Kind != b.Kind || a.Index != b.Index || string(a.Value) != string(b.Value) || b.Key != nil ||
			string(a.Key) != string(src.AppendKey(nil, b.Index)) {
			t.Fatalf("draw %d: Next %v %d %q, Draw %v %d %q", i, a.Kind, a.Index, a.Key, b.Kind, b.Index, b.Key)
		}
	}
}

// TestPrepareAheadDrawsDrawsOperations: a caller that prepares each
// operation two draws ahead and completes it later (the simulator) gets
// Draw's operations, with zipf keys through the table and uniform keys,
// with inserts among them.
func TestPrepareAheadDrawsDrawsOperations(t *testing.T) {
	for _, w := range []Workload{{Name: "B", Keys: 100_000, Seed: 5}, {Name: "E", Keys: 5000, Zipf: 1.2, Seed: 6},
		{Name: "A", Keys: 1000, Dist: DistUniform, Seed: 7}} {
		var streams [2]*Stream // each of its own source: inserts count per source
		for i := range streams {
			src, err := w.Build()
			if err != nil {
				t.Fatal(err)
			}
			streams[i] = src.Stream(2)
		}
		plain, ahead := streams[0], streams[1]
		if (ahead.zipf != nil) != (w.Dist != DistUniform) {
			t.Fatalf("workload %s: zipf table in use %v", w.Name, ahead.zipf != nil)
		}
		var pending [2]Drawn
		ahead.Prepare(&pending[0])
		ahead.Prepare(&pending[1])
		for i := range 200_000 {
			want, got := plain.Draw(), ahead.Complete(&pending[0])
			pending[0] = pending[1]
			ahead.Prepare(&pending[1])
			if got.Kind != want.Kind || got.Index != want.Index || string(got.Value) != string(want.Value) {
				t.Fatalf("workload %s: draw %d: prepared ahead %v %d, Draw %v %d", w.Name, i, got.Kind, got.Index, want.Kind, want.Index)
			}
			plain.Done(want)
			ahead.Done(got)
		}
	}
}
