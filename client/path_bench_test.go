package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/storagenode"
)

// BenchmarkWholePath: the whole system in this process, uncapped: N=4
// storage nodes (R=3), the software switch in front, and Clients goroutines
// sharing one client library instance, running YCSB B (95 % GET, 5 % PUT)
// over 10,000 uniform keys of 100 B. ops/cpu-s is operations per CPU-second
// of the whole process: client, switch and nodes together. As in `netdir
// bench`, Pebble's files are on tmpfs (/dev/shm) where there is one, so a
// synced write costs no disk flush.
func BenchmarkWholePath(b *testing.B) {
	const keys, clients = 10000, 64
	c, err := cluster.Start(cluster.Options{N: 4, R: 3, Switch: true, PartitionBits: 6, Dir: dataDir(b),
		Node: func(o *storagenode.Options) {
			o.CacheBytes = storagenode.DefaultCacheBytes
			o.MemTableBytes = storagenode.DefaultMemTableBytes
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cl, err := c.Client(client.Options{Service: c.Service()})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	names := make([][]byte, keys)
	val := make([]byte, 100)
	run(b, clients, keys, func(_ *rand.Rand, i int) error {
		names[i] = fmt.Appendf(nil, "user%08d", i)
		_, err := cl.Put(ctx, names[i], val)
		return err
	})
	var gets, puts atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	run(b, clients, b.N, func(r *rand.Rand, _ int) error {
		k := names[r.IntN(keys)]
		if r.IntN(100) < 5 {
			puts.Add(1)
			_, err := cl.Put(ctx, k, val)
			return err
		}
		gets.Add(1)
		_, _, err := cl.Get(ctx, k)
		return err
	})
	el, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "ops/cpu-s")
	b.ReportMetric(cpu.Seconds()/el.Seconds(), "cores")
	b.ReportMetric(float64(puts.Load()), "puts")
}

// run calls op n times (with i = 0..n-1) from workers goroutines, each
// with its own random source, and fails b on the first error.
func run(b *testing.B, workers, n int, op func(r *rand.Rand, i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := op(r, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// dataDir is a temporary directory in /dev/shm when that is writable, else
// the test's.
func dataDir(b *testing.B) string {
	d, err := os.MkdirTemp("/dev/shm", "netdir-bench-")
	if err != nil {
		return b.TempDir()
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
