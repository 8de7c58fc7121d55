package nicagent

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// benchSetup readies the shared Dataplane for packet benchmarks: 1024
// partitions of three nodes, a directory of 4096 keys (hot-key, and 4095
// others so that the hash map is full), node latencies learnt (so the fine
// score divides), the real clock. Every node listens on the service port and
// the service address is "any", so that a request the program rewrote is
// a request to route again: prog.Benchmark runs the program repeatedly on
// one buffer.
func benchSetup(b *testing.B, router bool, mode directory.Mode) *Dataplane {
	d := loadTest(b)
	if err := d.Reset(directory.Config{PartitionBits: 10, Slots: 4096, Mode: mode}); err != nil {
		b.Fatal(err)
	}
	if err := d.SetService(netip.AddrPortFrom(netip.IPv4Unspecified(), wire.ServicePort)); err != nil {
		b.Fatal(err)
	}
	if err := d.SetRouter(router); err != nil {
		b.Fatal(err)
	}
	if err := d.SetInterfaceMAC(agentMAC); err != nil {
		b.Fatal(err)
	}
	if err := d.ClearClock(); err != nil {
		b.Fatal(err)
	}
	for p := range uint32(1 << 10) {
		if err := d.SetPartition(p, []wire.NodeID{wire.NodeID(1 + p%8), wire.NodeID(1 + (p+1)%8), wire.NodeID(1 + (p+2)%8)}, nil); err != nil {
			b.Fatal(err)
		}
	}
	for n := wire.NodeID(1); n <= 8; n++ {
		a := testNodeAddr(n)
		a.Addr = netip.AddrPortFrom(a.Addr.Addr(), wire.ServicePort)
		if err := d.SetNodeAddr(n, a); err != nil {
			b.Fatal(err)
		}
		if err := d.SetNodeStats(n, directory.NodeStats{Latency: uint64(1000 + 100*n), Load: uint16(n)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Insert(wire.HashKey([]byte("hot-key")), []wire.NodeID{1, 2, 3, 4, 5}, 3, 1, nil); err != nil {
		b.Fatal(err)
	}
	for i := 1; i < 4096; i++ {
		if err := d.Insert(wire.HashKey(fmt.Appendf(nil, "other-%d", i)), []wire.NodeID{1, 2, 3}, 3, 1, nil); err != nil {
			b.Fatal(err)
		}
	}
	return d
}

func benchPacket(op wire.Op, key string, reqid uint64, node wire.NodeID) []byte {
	p := wire.Packet{Header: wire.Header{Op: op, ReqID: reqid, KeyHash: wire.HashKey([]byte(key)), Node: node, Load: 3,
		Stamp: 1, Timestamp: 1}, Key: []byte(key), Value: make([]byte, 64)}
	b, _ := p.AppendEncode(nil)
	return frame(portSource(9), netip.AddrPortFrom(netip.MustParseAddr("10.201.0.1"), wire.ServicePort), b)
}

// benchProg reports the kernel's time per run of prog over one frame.
func benchProg(b *testing.B, d *Dataplane, tc bool, frame []byte, want func(Stats, Stats) bool) {
	prog := d.XDP()
	if tc {
		prog = d.TC()
	}
	before, _ := d.Stats()
	const repeat = 1_000_000
	var total time.Duration
	runs := 0
	for b.Loop() {
		_, per, err := prog.Benchmark(frame, repeat, nil)
		if err != nil {
			b.Fatal(err)
		}
		total += per
		runs++
	}
	after, _ := d.Stats()
	if !want(before, after) {
		b.Fatalf("the benchmark did not take the intended path: before %+v, after %+v", before, after)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(runs), "ns/pkt")
	b.ReportMetric(0, "ns/op") // the kernel's figure above is the one that counts
}

// BenchmarkPacket measures ns per packet through BPF_PROG_TEST_RUN on the
// agent's paths: TC egress routing a GET (directory hit: slot lookup, two
// candidates, fine score; miss: partition lookup, fine score, sketch), a PUT
// hit, the XDP reply path (learning, the reply rule) and a VSB, and the
// router shape's XDP routing.
func BenchmarkPacket(b *testing.B) {
	hits := func(a, z Stats) bool { return z.Hits > a.Hits && z.Misses == a.Misses && z.DropTotal == a.DropTotal }
	misses := func(a, z Stats) bool { return z.Misses > a.Misses && z.Hits == a.Hits && z.DropTotal == a.DropTotal }
	replies := func(a, z Stats) bool { return z.Replies > a.Replies && z.DropTotal == a.DropTotal }
	vsbs := func(a, z Stats) bool { return z.VSBs > a.VSBs && z.DropTotal == a.DropTotal }
	cases := []struct {
		name   string
		router bool
		mode   directory.Mode
		tc     bool
		frame  []byte
		want   func(Stats, Stats) bool
	}{
		{"tc/get-hit", false, directory.ModeHost, true, benchPacket(wire.OpGet, "hot-key", 0x0201, 0), hits},
		{"tc/get-miss", false, directory.ModeHost, true, benchPacket(wire.OpGet, "cold-key", 0x0201, 0), misses},
		{"tc/put-hit", false, directory.ModeHost, true, benchPacket(wire.OpPut, "hot-key", 0x0201, 0), hits},
		{"xdp/get-reply", false, directory.ModeHost, false, benchPacket(wire.OpGetReply, "hot-key", 1, 2), replies},
		{"xdp/put-reply-hit", false, directory.ModeHost, false, benchPacket(wire.OpPutReply, "hot-key", 1, 3), replies},
		{"xdp/vsb-tail", false, directory.ModeHost, false, benchPacket(wire.OpVSB, "hot-key", 1, 3), vsbs},
		{"xdp-router/get-hit", true, directory.ModeToR, false, benchPacket(wire.OpGet, "hot-key", 0x0201, 0), hits},
		{"xdp-router/get-miss", true, directory.ModeToR, false, benchPacket(wire.OpGet, "cold-key", 0x0201, 0), misses},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			d := benchSetup(b, c.router, c.mode)
			if c.name == "xdp/vsb-tail" {
				if err := d.SetSource(portSource(9), directory.PortStorage); err != nil {
					b.Fatal(err)
				}
			}
			benchProg(b, d, c.tc, c.frame, c.want)
		})
	}
}

// BenchmarkSync measures the map-sync rate: directory updates from the
// controller's subscription applied to the maps.
func BenchmarkSync(b *testing.B) {
	d := loadTest(b)
	a := &Agent{dp: d, nodes: map[wire.NodeID]netip.AddrPort{}, resolved: map[wire.NodeID]NodeAddr{},
		resolveKick: make(chan struct{}, 1), ifmac: agentMAC, cfg: Config{Service: service}}
	a.log = quietLog()
	nodes := []*api.Node{{Id: 1, Addr: "10.100.0.1:7420"}, {Id: 2, Addr: "10.100.0.2:7420"}, {Id: 3, Addr: "10.100.0.3:7420"},
		{Id: 4, Addr: "10.100.0.4:7420"}, {Id: 5, Addr: "10.100.0.5:7420"}}
	parts := make([]*api.Partition, 1<<10)
	for p := range parts {
		parts[p] = &api.Partition{Index: uint32(p), Chain: []uint32{uint32(1 + p%5), uint32(1 + (p+1)%5), uint32(1 + (p+2)%5)}}
	}
	entry := func(i int) *api.DirectoryEntry {
		h := wire.HashKey(fmt.Appendf(nil, "key-%d", i))
		return &api.DirectoryEntry{KeyHash: h[:], Locations: []uint32{1, 2, 3, 4, 5}, ChainLength: 3,
			Buckets: []uint32{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1}}
	}
	snapshot := func(n int) *api.DirectoryUpdate {
		u := &api.DirectoryUpdate{Kind: api.DirectoryUpdate_SNAPSHOT, PartitionBits: 10, Partitions: parts, Nodes: nodes}
		for i := range n {
			u.Entries = append(u.Entries, entry(i))
		}
		return u
	}
	b.Run("snapshot-1024-partitions-4096-entries", func(b *testing.B) {
		u := snapshot(4096)
		for b.Loop() {
			a.snapshots.Store(0) // a first snapshot: reset, then install everything
			if err := a.Apply(u); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(u.Entries))/(b.Elapsed().Seconds()/float64(b.N)), "entries/s")
	})
	b.Run("delta-upsert-new", func(b *testing.B) {
		a.snapshots.Store(0)
		if err := a.Apply(snapshot(0)); err != nil {
			b.Fatal(err)
		}
		seq := a.seq
		i := 0
		for b.Loop() {
			if i == 4096 { // full: start again from an empty directory
				b.StopTimer()
				a.snapshots.Store(0)
				if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_SNAPSHOT, Sequence: seq, PartitionBits: 10, Partitions: parts, Nodes: nodes}); err != nil {
					b.Fatal(err)
				}
				i = 0
				b.StartTimer()
			}
			seq++
			if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_UPSERT, Sequence: seq, Entries: []*api.DirectoryEntry{entry(i)}}); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
	})
	b.Run("delta-upsert-weights", func(b *testing.B) {
		a.snapshots.Store(0)
		if err := a.Apply(snapshot(1)); err != nil {
			b.Fatal(err)
		}
		seq := a.seq
		for b.Loop() {
			seq++
			if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_UPSERT, Sequence: seq, Entries: []*api.DirectoryEntry{entry(0)}}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
	})
	b.Run("delta-delete-insert", func(b *testing.B) {
		a.snapshots.Store(0)
		if err := a.Apply(snapshot(0)); err != nil {
			b.Fatal(err)
		}
		seq := a.seq
		for b.Loop() {
			seq++
			if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_UPSERT, Sequence: seq, Entries: []*api.DirectoryEntry{entry(0)}}); err != nil {
				b.Fatal(err)
			}
			seq++
			if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_DELETE, Sequence: seq, Entries: []*api.DirectoryEntry{entry(0)}}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(2*float64(b.N)/b.Elapsed().Seconds(), "updates/s")
	})
}

// BenchmarkReport measures the agent's counter report at full size: 4096
// directory keys each hit and 4096 cold keys each missed once through the
// TC program, so every slot's per-CPU hit counter and most sketch cells
// have grown. "take" reads the maps and builds the report (Agent side
// only); "grpc" also sends it over loopback gRPC to a controller, which
// validates and adds it (ReportAgentStats).
func BenchmarkReport(b *testing.B) {
	d := benchSetup(b, false, directory.ModeHost)
	for i := range 4096 {
		key := fmt.Sprintf("other-%d", i)
		if i == 0 {
			key = "hot-key"
		}
		if ret, _, err := run(d.TC(), benchPacket(wire.OpGet, key, uint64(i+1), 0)); err != nil || ret != tcOK {
			b.Fatalf("hit %s: %d, %v", key, ret, err)
		}
		if ret, _, err := run(d.TC(), benchPacket(wire.OpGet, fmt.Sprintf("cold-%d", i), uint64(i+1), 0)); err != nil || ret != tcOK {
			b.Fatalf("miss: %d, %v", ret, err)
		}
	}
	r := newReporter("bench/agent")
	fresh := func() { // every counter counts as grown again
		r.hits = map[wire.KeyHash]uint64{}
		r.sketch = [directory.SketchRows][directory.SketchCols]uint64{}
	}
	b.Run("take-4096-keys", func(b *testing.B) {
		var s *api.AgentStats
		for b.Loop() {
			fresh()
			var err error
			if s, err = r.takeLocked(d); err != nil {
				b.Fatal(err)
			}
		}
		if len(s.Hits) != 4096 {
			b.Fatalf("a report of %d keys, want 4096", len(s.Hits))
		}
		b.ReportMetric(float64(len(s.Sketch)), "cells")
		b.ReportMetric(float64(proto.Size(s)), "bytes")
	})
	b.Run("grpc-4096-keys", func(b *testing.B) {
		ctl, err := controller.New(controller.Config{Layout: testLayout(b, 3), Round: time.Hour, Log: quietLog()}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		cl := serveController(b, ctl)
		for b.Loop() {
			fresh()
			if err := r.report(context.Background(), d, cl); err != nil {
				b.Fatal(err)
			}
		}
		if tot := ctl.AgentTotals(); tot.Reports != uint64(b.N) || tot.Hits != uint64(4096*b.N) {
			b.Fatalf("the controller took %+v from %d reports", tot, b.N)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
	})
}
