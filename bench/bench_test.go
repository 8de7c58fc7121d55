package bench

import (
	"context"
	"testing"
	"time"

	"github.com/netdir/netdir/wire"
)

func BenchmarkZipfNext(b *testing.B) {
	for _, theta := range []float64{0.99, 1.2} {
		b.Run(map[float64]string{0.99: "theta=0.99", 1.2: "theta=1.2"}[theta], func(b *testing.B) {
			s, err := Workload{Name: "B", Keys: 1_000_000, Zipf: theta}.Build()
			if err != nil {
				b.Fatal(err)
			}
			st := s.Stream(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				st.Next()
			}
		})
	}
}

func BenchmarkParetoSize(b *testing.B) {
	s, err := Workload{Name: "A", Keys: 1000, ValueSize: 100, ParetoAlpha: 1.5}.Build()
	if err != nil {
		b.Fatal(err)
	}
	st := s.Stream(0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if st.ValueSize() > wire.MaxValue {
			b.Fatal("size over MaxValue")
		}
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	b.Run("hdr", func(b *testing.B) {
		h := NewHistogram()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			recordNS(h, time.Duration(i&0xfffff)*time.Nanosecond+10*time.Microsecond)
		}
	})
	b.Run("recorder", func(b *testing.B) {
		r := NewRecorder(time.Now())
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r.Record(OpRead, time.Duration(i&0xfffff)*time.Nanosecond+10*time.Microsecond, nil)
		}
	})
	b.Run("recorder-parallel", func(b *testing.B) {
		r := NewRecorder(time.Now())
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				r.Record(OpRead, time.Duration(i&0xfffff)*time.Nanosecond+10*time.Microsecond, nil)
				i++
			}
		})
	})
}

// BenchmarkClosedLoopMem is the harness's own ceiling: the closed-loop
// driver against the in-memory target, YCSB B at zipf 0.99.
func BenchmarkClosedLoopMem(b *testing.B) {
	s, err := Workload{Name: "B", Keys: 10_000}.Build()
	if err != nil {
		b.Fatal(err)
	}
	mem := NewMemTarget()
	if _, _, err := Load(context.Background(), mem, s, 2, 0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	res, err := ClosedLoop(context.Background(), mem, s, Options{Workers: 2, Ops: int64(b.N)})
	if err != nil || res.Ops != int64(b.N) {
		b.Fatalf("ops %d of %d, %v", res.Ops, b.N, err)
	}
}
