package directory_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

const benchKeys = 4096

// benchDir is a default-sized directory (1024 partitions of chain 3, 4096
// slots) full of hot keys with one fresh extra each, and learnt latencies so
// that the fine score compares real numbers.
func benchDir(b *testing.B) *directory.Directory {
	d := newDir(b, directory.Config{})
	for p := uint32(0); p < uint32(d.Partitions()); p++ {
		n := wire.NodeID(p % 32)
		if err := d.SetPartition(p, []wire.NodeID{n, (n + 1) % 32, (n + 2) % 32}, nil); err != nil {
			b.Fatal(err)
		}
	}
	d.SetPort(1, directory.PortStorage)
	for n := wire.NodeID(0); n < 32; n++ {
		d.SetNodeStats(n, directory.NodeStats{Load: n, Latency: 1000 + uint64(n)*37})
	}
	for i := 0; i < benchKeys; i++ {
		k := fmt.Sprintf("hot-%d", i)
		n := wire.NodeID(i % 32)
		locs := []wire.NodeID{n, (n + 1) % 32, (n + 2) % 32, (n + 3) % 32}
		if _, err := d.Insert(key(k), locs, 3, 1, directory.BucketsForWeights([]uint32{1, 1, 1, 2})); err != nil {
			b.Fatal(err)
		}
		if v := d.Process(pkt(b, wire.OpVSB, k, 0, 1, locs[3]), 1, 0); v.Action != directory.Multicast {
			b.Fatal(v)
		}
	}
	return d
}

// packets builds one packet per key, with varied request ids.
func packets(b *testing.B, op wire.Op, prefix string, node wire.NodeID) [][]byte {
	ps := make([][]byte, benchKeys)
	for i := range ps {
		ps[i] = pkt(b, op, fmt.Sprintf("%s-%d", prefix, i), uint64(i)*0x9e3779b97f4a7c15, 0, node)
	}
	return ps
}

func benchProcess(b *testing.B, ps [][]byte, port uint32, want directory.Action, each func(p []byte, i int)) {
	d := benchDir(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := ps[i%len(ps)]
		if each != nil {
			each(p, i)
		}
		if v := d.Process(p, port, uint64(i)); v.Action != want {
			b.Fatal(v)
		}
		i++
	}
}

// BenchmarkRouteHit: a GET of a directory key (split plus fine score).
func BenchmarkRouteHit(b *testing.B) {
	benchProcess(b, packets(b, wire.OpGet, "hot", 0), 9, directory.Forward, nil)
}

// BenchmarkRouteMiss: a GET of a key not in the directory (partition split,
// fine score, sketch update).
func BenchmarkRouteMiss(b *testing.B) {
	benchProcess(b, packets(b, wire.OpGet, "cold", 0), 9, directory.Forward, nil)
}

// BenchmarkWriteHit: a PUT of a directory key (stamp, clear extras).
func BenchmarkWriteHit(b *testing.B) {
	benchProcess(b, packets(b, wire.OpPut, "hot", 0), 9, directory.Forward, nil)
}

// BenchmarkReply: a put-reply of a directory key that raises ver_done, with
// latency and load learning.
func BenchmarkReply(b *testing.B) {
	ps := packets(b, wire.OpPutReply, "hot", 2)
	benchProcess(b, ps, 2, directory.ToClient, func(p []byte, i int) {
		wire.Frame(p).SetStamp(uint64(2 + i/len(ps)))
		wire.Frame(p).SetTimestamp(uint64(i))
	})
}

// BenchmarkVSB: an extra's VSB that is accepted.
func BenchmarkVSB(b *testing.B) {
	ps := make([][]byte, benchKeys)
	for i := range ps {
		ps[i] = pkt(b, wire.OpVSB, fmt.Sprintf("hot-%d", i), 0, 1, wire.NodeID((i+3)%32))
	}
	benchProcess(b, ps, 1, directory.Multicast, nil)
}

// heapAfter is the live heap after a full GC.
func heapAfter() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// memoryPerEntry measures the live heap of a directory of slots entries, all
// in use, minus that of a one-slot directory: bytes per directory entry.
func memoryPerEntry(t testing.TB, slots int) float64 {
	cfg := directory.Config{PartitionBits: 1, MaxNodes: 1}
	base := heapAfter()
	d0 := newDir(t, cfg)
	one := heapAfter() - base
	runtime.KeepAlive(d0)
	d0 = nil

	cfg.Slots = slots
	base = heapAfter()
	d := newDir(t, cfg)
	var h wire.KeyHash
	for i := 0; i < slots; i++ {
		h[0], h[1], h[2], h[3] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		if _, err := d.Insert(h, []wire.NodeID{0}, 1, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	full := heapAfter() - base
	runtime.KeepAlive(d)
	return float64(full-one) / float64(slots-1)
}

// memoryPerPartition measures bytes per partition of a directory with
// 1<<bits partitions, against one with 2.
func memoryPerPartition(t testing.TB, bits uint) float64 {
	cfg := directory.Config{PartitionBits: 1, Slots: 1, MaxNodes: 1}
	base := heapAfter()
	d0 := newDir(t, cfg)
	small := heapAfter() - base
	runtime.KeepAlive(d0)
	d0 = nil

	cfg.PartitionBits = bits
	base = heapAfter()
	d := newDir(t, cfg)
	big := heapAfter() - base
	runtime.KeepAlive(d)
	return float64(big-small) / float64(uint64(1)<<bits-2)
}

// TestMemoryPerEntry holds a full directory to at most 256 bytes per entry
// (slot, index and free list) and a partition to at most 64 bytes. Heap
// sizes, not times, so the assertion is deterministic.
func TestMemoryPerEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a 2^16-slot directory")
	}
	got := memoryPerEntry(t, 1<<16)
	t.Logf("%.1f bytes per directory entry", got)
	if got > 256 || got < 100 {
		t.Errorf("%.1f bytes per directory entry; want 100..256", got)
	}
	got = memoryPerPartition(t, 16)
	t.Logf("%.1f bytes per partition", got)
	// A partition is one cache line, 64 bytes (TestCacheLines); the heap
	// adds a fraction of a byte per partition of other allocations.
	if got > 64.5 || got < 40 {
		t.Errorf("%.1f bytes per partition; want 40..64", got)
	}
}

// BenchmarkMemory reports bytes per directory entry (a full 2^20-slot
// directory) and per partition (2^20 partitions), measured on the heap.
func BenchmarkMemory(b *testing.B) {
	var perEntry, perPart float64
	for b.Loop() {
		perEntry = memoryPerEntry(b, 1<<20)
		perPart = memoryPerPartition(b, 20)
	}
	b.ReportMetric(perEntry, "B/entry")
	b.ReportMetric(perPart, "B/partition")
}
