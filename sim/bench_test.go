package sim

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/netdir/netdir/bench"
)

// BenchmarkSimulatedRequests reports simulated requests per CPU-second of
// the process (issue 20's goal: at least a million) on 16 nodes (one rack),
// 64 (two racks and the spine) and 1024 (32 racks) at zipf 0.99, YCSB B,
// the warm-up and the controller's rounds and epochs included.
func BenchmarkSimulatedRequests(b *testing.B) {
	for _, n := range []int{16, 64, 1024} {
		b.Run(benchName(n), func(b *testing.B) {
			var total int64
			cpu0 := cpuSeconds(b)
			for i := 0; b.Loop(); i++ {
				s, err := New(Config{Nodes: n, Capacity: 1000, Workload: bench.Workload{Name: "B", Keys: 100_000, Seed: 1},
					Concurrency: 16 * n, Warmup: time.Second, Requests: 2_000_000, Seed: uint64(i)})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Run(); err != nil {
					b.Fatal(err)
				}
				total += s.stats.issued
			}
			b.ReportMetric(float64(total)/(cpuSeconds(b)-cpu0), "requests/cpu-s")
		})
	}
}

// cpuSeconds is the process's user and system CPU time.
func cpuSeconds(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func benchName(n int) string {
	return fmt.Sprintf("nodes=%d", n)
}
