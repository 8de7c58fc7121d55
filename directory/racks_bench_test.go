package directory_test

import (
	"fmt"
	"math/rand"
	"syscall"
	"testing"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// BenchmarkRackedRequests is a request's path through the planes of 1024
// nodes in 32 racks, as the simulator drives it: the spine, the chosen
// rack's directory, the replying node's rack directory, the spine again.
// 100k keys drawn by zipf, 10 % writes; each rack directory holds its
// racks' 500 hottest keys and the spine spreads the 32 hottest over 8
// racks. The state (32 directories) is larger than a core's caches, so
// this measures the cache lines a request touches as much as the code.
// It reports CPU time per request too (getrusage), which other
// processes on a shared machine sway less than the wall clock.
func BenchmarkRackedRequests(b *testing.B) {
	const (
		racks, rackSize = 32, 32
		nkeys           = 100_000
		spinePort       = 1 << 15
	)
	sp, err := directory.NewSpine(racks, 10)
	if err != nil {
		b.Fatal(err)
	}
	dirs := make([]*directory.Directory, racks)
	for r := range dirs {
		dirs[r] = newDir(b, directory.Config{PartitionBits: 10, Slots: 1280})
		for n := 0; n < racks*rackSize; n++ {
			dirs[r].SetPort(uint32(n), directory.PortStorage)
			dirs[r].SetNodeStats(wire.NodeID(n), directory.NodeStats{Load: uint16(n % 7), Latency: 1000 + uint64(n%13)*37})
		}
		dirs[r].SetPort(spinePort, directory.PortSpine)
	}
	inRack := func(r, i int) wire.NodeID { return wire.NodeID(r*rackSize + i%rackSize) }
	for p := 0; p < 1<<10; p++ {
		r := p % racks
		if err := sp.SetHome(uint32(p), r); err != nil {
			b.Fatal(err)
		}
		chain := []wire.NodeID{inRack(r, p/racks), inRack(r, p/racks+1), inRack(r, p/racks+2)}
		for _, d := range dirs {
			if err := d.SetPartition(uint32(p), chain, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	hashes := make([]wire.KeyHash, nkeys)
	for k := range hashes {
		hashes[k] = key(fmt.Sprintf("user%d", k))
	}
	for k := 0; k < racks*500; k++ {
		h := hashes[k]
		home := sp.Home(h)
		locs := make([]wire.NodeID, 8)
		for i := range locs {
			locs[i] = inRack(home, k+i)
		}
		if _, err := dirs[home].Insert(h, locs, 3, 0, nil); err != nil && err != directory.ErrFull {
			b.Fatal(err)
		}
		if k >= 32 {
			continue
		}
		spread := []int{home}
		for i := 1; i < 8; i++ {
			r := (home + i*3) % racks
			spread = append(spread, r)
			for j := range locs {
				locs[j] = inRack(r, k+j)
			}
			if _, err := dirs[r].Insert(h, locs, 1, 0, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := sp.Insert(h, spread, 0); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewSource(1))
	zipf := rand.NewZipf(rng, 1.01, 1, nkeys-1)
	ranks := make([]uint32, 1<<20)
	for i := range ranks {
		ranks[i] = uint32(zipf.Uint64())
	}
	pkt := pkt(b, wire.OpGet, "x", 0, 0, 0)
	f := wire.Frame(pkt)
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	i := 0
	for b.Loop() {
		now := uint64(i) * 1000
		write := i%10 == 0
		f.SetOp(wire.OpGet)
		if write {
			f.SetOp(wire.OpPut)
		}
		f.SetFlags(0)
		f.SetStamp(0)
		f.SetReqID(uint64(i) * 0x9e3779b97f4a7c15)
		f.SetKeyHash(hashes[ranks[i&(len(ranks)-1)]])
		r := sp.Request(pkt)
		v := dirs[r].Process(pkt, spinePort, now)
		if v.Action != directory.Forward {
			b.Fatal(v)
		}
		f.SetOp(wire.OpGetReply)
		if write {
			f.SetOp(wire.OpPutReply)
		}
		f.SetCode(wire.CodeOK)
		f.SetLoad(uint16(i % 5))
		dirs[int(v.Node)/rackSize].Process(pkt, uint32(v.Node), now+500)
		sp.Reply(pkt, r)
		i++
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(i), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
