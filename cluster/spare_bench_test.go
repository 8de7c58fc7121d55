package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

var (
	spareKeys    = flag.Int("spare-keys", 4096, "BenchmarkSpareFill: keys written before the kill")
	spareValue   = flag.Int("spare-value", 4096, "BenchmarkSpareFill: value bytes")
	spareSyncMiB = flag.Float64("spare-sync-mib", 4, "BenchmarkSpareFill: the nodes' catch-up rate (MiB/s, per node)")
	spareRatio   = flag.Float64("spare-min-ratio", 0.6, "BenchmarkSpareFill: the least client ops/s during the fill, as a share of before the kill")
	spareProfile = flag.String("spare-cpuprofile", "", "BenchmarkSpareFill: write a CPU profile of the fill (R members to filled) to this file")
)

// BenchmarkSpareFill measures spares (issue 15, item 2): 4 nodes (R=3)
// hold -spare-keys keys of -spare-value bytes; node 2 is killed for good,
// the controller splices it out, and after spare_after (1 s here) spares
// take its place in every chain it was in and fill at -spare-sync-mib per
// node while a client keeps writing and reading. It reports the time from
// the kill until every chain has R members again (members-ms), until every
// spare has caught up and the layout serves its reads (filled-ms), the
// data copied (copied-MiB) and its rate over the fill (fill-MiB/s, all
// spares together), and the client's ops/s and failed ops during the fill
// and in the second after it. It fails if the client's rate during the
// fill is below -spare-min-ratio of its rate before the kill. Run:
//
//	go test -run '^$' -bench SpareFill -benchtime 1x ./cluster/
func BenchmarkSpareFill(b *testing.B) {
	for range b.N {
		spareFillOnce(b)
	}
}

func spareFillOnce(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(Options{N: 4, R: 3, PartitionBits: 6, Dir: b.TempDir(), Controller: true, Round: 100 * time.Millisecond,
		Node: func(o *storagenode.Options) { o.SyncRate = int64(*spareSyncMiB * (1 << 20)) }})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	pl, err := c.StartPlane(ctx, PlaneConfig{Controller: ControllerConfig{Round: 100 * time.Millisecond, CoarseEpoch: time.Minute, SpareAfter: time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	defer pl.Close()
	copts := client.Options{Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond}
	cl, err := c.Client(copts)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	val := make([]byte, *spareValue)
	var wg sync.WaitGroup
	var werr atomic.Value
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < *spareKeys; i += 8 {
				if _, err := cl.Put(ctx, []byte(fmt.Sprintf("fill-%d", i)), val); err != nil {
					werr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := werr.Load().(error); err != nil {
		b.Fatal(err)
	}
	const victim = 1
	copied0 := uint64(0)
	for i := range c.N() {
		if i != victim {
			copied0 += c.Node(i).Stats().SyncedBytes
		}
	}
	// A client writing and reading throughout.
	stop := make(chan struct{})
	var ops, fails atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
			key := []byte(fmt.Sprintf("fill-%d", i%*spareKeys))
			var err error
			if i%2 == 0 {
				_, err = cl.Put(octx, key, val)
			} else {
				_, _, err = cl.Get(octx, key)
			}
			ocancel()
			if err != nil {
				fails.Add(1)
			} else {
				ops.Add(1)
			}
		}
	}()
	time.Sleep(time.Second)
	before := ops.Load()
	killed := time.Now()
	if err := c.Crash(victim); err != nil {
		b.Fatal(err)
	}
	var members, filled time.Duration
	var ops0, fails0 int64
	for members == 0 || filled == 0 {
		if ctx.Err() != nil {
			b.Fatal("spares did not fill in time")
		}
		time.Sleep(20 * time.Millisecond)
		m := pl.Controller.Layout()
		if members == 0 {
			if m.Placed(wire.NodeID(victim+1)) == 0 {
				members = time.Since(killed)
				ops0, fails0 = ops.Load(), fails.Load()
				if *spareProfile != "" {
					f, err := os.Create(*spareProfile)
					if err != nil {
						b.Fatal(err)
					}
					defer f.Close()
					if err := pprof.StartCPUProfile(f); err != nil {
						b.Fatal(err)
					}
				}
			}
			continue
		}
		// Filled: every spare caught up and serving its chains' reads.
		ready := len(m.FillingParts()) == 0
		for i := range c.N() {
			if n := c.Node(i); n != nil && (n.Layout().Epoch() != m.Epoch() || !n.Ready()) {
				ready = false
			}
		}
		if ready {
			filled = time.Since(killed)
		}
	}
	fillOps, fillFails := ops.Load()-ops0, fails.Load()-fails0
	if *spareProfile != "" {
		pprof.StopCPUProfile()
	}
	// The same second after the fill: what the client gets from the
	// chains with their spares, against which the fill's rate compares.
	ops1 := ops.Load()
	time.Sleep(time.Second)
	after := ops.Load() - ops1
	close(stop)
	wg.Wait()
	var copied uint64
	for i := range c.N() {
		if n := c.Node(i); n != nil {
			copied += n.Stats().SyncedBytes
		}
	}
	copied -= copied0
	fill := (filled - members).Seconds()
	b.Logf("before the kill %d ops/s, after the fill %d ops/s", before, after)
	b.Logf("killed node %d: R members after %v, filled after %v; %.1f MiB copied at %.1f MiB/s (limit %.1f MiB/s per node); during the fill %d ops (%.0f/s), %d failed",
		victim+1, members.Round(time.Millisecond), filled.Round(time.Millisecond), float64(copied)/(1<<20), float64(copied)/(1<<20)/fill,
		*spareSyncMiB, fillOps, float64(fillOps)/fill, fillFails)
	b.ReportMetric(float64(members.Milliseconds()), "members-ms")
	b.ReportMetric(float64(filled.Milliseconds()), "filled-ms")
	b.ReportMetric(float64(copied)/(1<<20), "copied-MiB")
	b.ReportMetric(float64(copied)/(1<<20)/fill, "fill-MiB/s")
	b.ReportMetric(float64(before), "before-ops/s")
	b.ReportMetric(float64(fillOps)/fill, "fill-ops/s")
	b.ReportMetric(float64(after), "after-ops/s")
	if r := float64(fillOps) / fill / float64(before); r < *spareRatio {
		b.Errorf("client ops/s during the fill %.0f is %.2fx those before the kill (%d), below %.2fx", float64(fillOps)/fill, r, before, *spareRatio)
	}
	b.ReportMetric(float64(fillFails), "fill-failed-ops")
}
