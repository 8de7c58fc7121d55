//go:build linux

package model

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/wire"
	"golang.org/x/sys/unix"
)

// BenchmarkForward measures request forwarding over loopback: a generator
// sends GETs in batches of 64 to the switch, which forwards each to a sink
// node. The generator keeps at most 512 requests in flight so that socket
// buffers never overflow. One op is one request; pkts/s is requests that
// reached the sink per second of wall time, and lost the requests that never
// did (expected 0). pkts/cpu-s is requests forwarded per second of CPU time
// of the switch's serving thread: its capacity on one core, which does not
// depend on what else the machine runs.
func BenchmarkForward(b *testing.B) {
	const batch, window = 64, 512
	sink := udp(b)
	s, err := New(Config{Listen: "127.0.0.1:0", Batch: batch, Nodes: []Node{{ID: 1, Addr: addrOf(sink)}}})
	if err != nil {
		b.Fatal(err)
	}
	for p := 0; p < s.Partitions(); p++ {
		if err := s.SetPartition(uint32(p), []wire.NodeID{1}, nil); err != nil {
			b.Fatal(err)
		}
	}
	// Serve on a thread of its own, so that its CPU time can be read.
	tids, errc := make(chan int, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tids <- unix.Gettid()
		errc <- s.Run(context.Background())
	}()
	clock := int32(^uint32(<-tids)<<3 | 6) // the thread's CPUCLOCK_SCHED clock id
	b.Cleanup(func() {
		s.Close()
		if err := <-errc; err != nil {
			b.Error(err)
		}
	})
	cpu := func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(clock, &ts); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	g := newLoadgen(b, s, batch)
	sink.SetReadBuffer(4 << 20)
	rx, err := udpbatch.NewReader(sink, udpbatch.Buffers(batch, wire.MaxPacket+1))
	if err != nil {
		b.Fatal(err)
	}
	var got atomic.Uint64
	progress := make(chan struct{}, 1)
	go func() {
		for {
			n, err := rx.Read()
			if err != nil {
				return // the socket closed at cleanup
			}
			got.Add(uint64(n))
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}()
	stall := time.NewTimer(time.Hour)
	var sent, lost uint64
	// wait blocks until at most limit requests are in flight. When nothing
	// arrives for 100 ms, the requests in flight are presumed lost; any that
	// arrive later are taken off the lost count again.
	wait := func(limit uint64) {
		for {
			g := got.Load()
			lost = min(lost, sent-g)
			if sent-g-lost <= limit {
				return
			}
			stall.Reset(100 * time.Millisecond)
			select {
			case <-progress:
			case <-stall.C:
				lost = sent - got.Load()
			}
			stall.Stop()
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpu()
	for sent < uint64(b.N) {
		wait(window - batch)
		n := min(batch, b.N-int(sent))
		g.send(n)
		sent += uint64(n)
	}
	wait(0)
	elapsed, busy := time.Since(start), cpu()-cpu0
	b.StopTimer()
	b.ReportMetric(float64(got.Load())/elapsed.Seconds(), "pkts/s")
	b.ReportMetric(float64(got.Load())/busy.Seconds(), "pkts/cpu-s")
	b.ReportMetric(float64(sent-got.Load()), "lost")
	_, st := s.Counters()
	b.ReportMetric(float64(st.Received)/float64(st.Batches), "pkts/batch")
}

// BenchmarkOwnership compares the two ways of serialising access to the
// directory, per batch of 64 GETs: the serving goroutine taking a mutex
// around Process (what Switch does), or handing the batch over a channel to
// a goroutine that owns the directory and handing it back. ns/op is per
// packet.
func BenchmarkOwnership(b *testing.B) {
	const batch = 64
	newBatch := func(b *testing.B) (*directory.Directory, [][]byte) {
		d, err := directory.New(directory.Config{})
		if err != nil {
			b.Fatal(err)
		}
		for p := 0; p < d.Partitions(); p++ {
			if err := d.SetPartition(uint32(p), []wire.NodeID{1, 2, 3}, nil); err != nil {
				b.Fatal(err)
			}
		}
		var pkts [][]byte
		for i := 0; i < batch; i++ {
			pkts = append(pkts, encode(b, get(string(rune('a'+i%26))+string(rune('a'+i/26)), uint64(i))))
		}
		return d, pkts
	}
	b.Run("mutex", func(b *testing.B) {
		d, pkts := newBatch(b)
		var mu sync.Mutex
		b.ReportAllocs()
		for i := 0; i < b.N; i += batch {
			mu.Lock()
			for _, p := range pkts {
				d.Process(p, 0, uint64(i))
			}
			mu.Unlock()
		}
	})
	b.Run("owner", func(b *testing.B) {
		d, pkts := newBatch(b)
		in, out := make(chan [][]byte, 1), make(chan [][]byte, 1)
		go func() {
			now := uint64(0)
			for ps := range in {
				for _, p := range ps {
					d.Process(p, 0, now)
				}
				now++
				out <- ps
			}
		}()
		defer close(in)
		b.ReportAllocs()
		for i := 0; i < b.N; i += batch {
			in <- pkts
			<-out
		}
		runtime.Gosched()
	})
}
