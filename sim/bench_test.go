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
// the warm-up and the controller's rounds and epochs included; and at 1024
// nodes with a copy on every node of each remote rack (Config.WholeRacks).
func BenchmarkSimulatedRequests(b *testing.B) {
	for _, c := range []struct {
		nodes      int
		wholeRacks bool
	}{{16, false}, {64, false}, {1024, false}, {1024, true}} {
		n := c.nodes
		b.Run(benchName(n, c.wholeRacks), func(b *testing.B) {
			var total int64
			cpu0 := cpuSeconds(b)
			for i := 0; b.Loop(); i++ {
				s, err := New(Config{Nodes: n, Capacity: 1000, Workload: bench.Workload{Name: "B", Keys: 100_000, Seed: 1},
					Concurrency: 16 * n, Warmup: time.Second, Requests: 2_000_000, Seed: uint64(i), WholeRacks: c.wholeRacks})
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

func benchName(n int, wholeRacks bool) string {
	if wholeRacks {
		return fmt.Sprintf("nodes=%d,whole-racks", n)
	}
	return fmt.Sprintf("nodes=%d", n)
}
