package directory_test

import (
	"testing"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// fuzzDir is a small populated directory: two partitions on different
// chains, a hot key with extras of which one is fresh, a key with a pending
// write, learnt node stats, and storage ports 1..5.
func fuzzDir(t testing.TB) *directory.Directory {
	d := newDir(t, directory.Config{PartitionBits: 1, Slots: 4, MaxNodes: 16})
	if err := d.SetPartition(0, []wire.NodeID{1, 2, 3}, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.SetPartition(1, []wire.NodeID{3, 4, 5}, directory.BucketsForWeights([]uint32{1, 0, 3})); err != nil {
		t.Fatal(err)
	}
	for p := uint32(1); p <= 5; p++ {
		d.SetPort(p, directory.PortStorage)
	}
	for n := wire.NodeID(1); n <= 6; n++ {
		d.SetNodeStats(n, directory.NodeStats{Load: n * 3, Latency: uint64(n) * 1000})
	}
	if _, err := d.Insert(key("apple"), []wire.NodeID{1, 2, 3, 4, 5}, 3, 7, directory.BucketsForWeights([]uint32{1, 1, 1, 5, 5})); err != nil {
		t.Fatal(err)
	}
	if v := d.Process(pkt(t, wire.OpVSB, "apple", 0, 7, 4), 4, 0); v.Action != directory.Multicast {
		t.Fatal(v)
	}
	if _, err := d.Insert(key("cherry"), []wire.NodeID{3, 4, 5, 6}, 1, wire.MakeStamp(3, 2), nil); err != nil { // seeded in incarnation 3
		t.Fatal(err)
	}
	if v := d.Process(pkt(t, wire.OpPut, "cherry", 0, 0, 0), 9, 0); v.Action != directory.Forward {
		t.Fatal(v)
	}
	return d
}

// FuzzProcess feeds two packets through Process on a populated directory:
// it never panics; the verdict is one of the actions with a valid reason;
// a drop moves DropTotal and its reason's counter by exactly one, and
// nothing else moves them; a forward names a node of the key's LocationList
// or partition chain, rewritten into the header with ts = now; the bytes
// after the header never change; and the slots keep their invariants
// (ver_done <= ver_next, the chain always fresh, no fresh bit beyond the
// LocationList).
func FuzzProcess(f *testing.F) {
	for _, op := range []wire.Op{wire.OpGet, wire.OpPut, wire.OpDel, wire.OpVSB, wire.OpGetReply, wire.OpPutReply, wire.OpErr, wire.OpCopy, 0x2b, 0x77} {
		for _, k := range []string{"apple", "cherry", "kiwi"} {
			for _, node := range []wire.NodeID{3, 4, 6} {
				f.Add(pkt(f, op, k, 0x0304, 7, node), pkt(f, wire.OpGet, k, 0x0103, 0, 0), uint8(0x49), uint64(5000))
			}
		}
	}
	f.Add([]byte{}, []byte{0x4e, 0x44, wire.Version}, uint8(0), uint64(0))
	f.Fuzz(func(t *testing.T, p1, p2 []byte, ports uint8, now uint64) {
		d := fuzzDir(t)
		// Port nibbles: 0..15, of which 1..5 are storage ports.
		for i, b := range [][]byte{p1, p2} {
			port := uint32(ports>>(4*i)) & 15
			check(t, d, b, port, now+uint64(i))
		}
	})
}

func check(t *testing.T, d *directory.Directory, b []byte, port uint32, now uint64) {
	in := append([]byte(nil), b...)
	before := d.Counters()
	v := d.Process(b, port, now)
	after := d.Counters()

	if len(b) != len(in) || len(b) > wire.HeaderLen && string(b[wire.HeaderLen:]) != string(in[wire.HeaderLen:]) {
		t.Fatal("Process changed bytes after the header")
	}
	dropped := after.DropTotal - before.DropTotal
	switch v.Action {
	case directory.Drop:
		if v.Reason == directory.ReasonNone || int(v.Reason) > len(directory.Reasons()) {
			t.Fatalf("drop with reason %d", v.Reason)
		}
		if dropped != 1 || after.Drops[v.Reason]-before.Drops[v.Reason] != 1 {
			t.Fatalf("drop %v moved DropTotal by %d and its reason by %d", v.Reason, dropped, after.Drops[v.Reason]-before.Drops[v.Reason])
		}
		if string(b) != string(in) {
			t.Fatal("a dropped packet was rewritten")
		}
	case directory.Forward, directory.ToClient, directory.Multicast, directory.Pass:
		if dropped != 0 || after.Drops != before.Drops {
			t.Fatalf("%v moved the drop counters", v)
		}
		if v.Reason != directory.ReasonNone {
			t.Fatalf("%v carries reason %v", v.Action, v.Reason)
		}
	default:
		t.Fatalf("action %d", v.Action)
	}

	var h wire.Header
	herr := h.DecodeHeader(b)
	switch herr {
	case wire.ErrShort:
		if v.Reason != directory.ReasonShort {
			t.Fatalf("short packet: %v", v)
		}
	case wire.ErrMagic:
		if v.Reason != directory.ReasonMagic {
			t.Fatalf("bad magic: %v", v)
		}
	case wire.ErrVersion:
		if v.Reason != directory.ReasonVersion {
			t.Fatalf("bad version: %v", v)
		}
	}

	if v.Action == directory.Forward {
		if h.Node != v.Node || h.Timestamp != now {
			t.Fatalf("forward to %d, header node %d ts %d (now %d)", v.Node, h.Node, h.Timestamp, now)
		}
		if h.Op != wire.OpGet && h.Op != wire.OpPut && h.Op != wire.OpDel {
			t.Fatalf("forwarded op %v", h.Op)
		}
		allowed := map[wire.NodeID]bool{}
		if s, ok := d.Lookup(h.KeyHash); ok {
			for _, n := range s.Locs[:s.N] {
				allowed[n] = true
			}
			if h.Op != wire.OpGet && v.Node != s.Locs[0] {
				t.Fatalf("write to %d, head is %d", v.Node, s.Locs[0])
			}
			if h.Op != wire.OpGet && (h.Flags&wire.FlagStamped == 0 || h.Stamp != wire.MakeStamp(s.Inc, s.VerNext)) {
				t.Fatalf("write hit: flags %#x stamp %#x, ver_next %d in incarnation %d", h.Flags, h.Stamp, s.VerNext, s.Inc)
			}
		} else {
			p, _ := d.Partition(h.KeyHash.Partition(1))
			for _, n := range p.Chain[:p.R] {
				allowed[n] = true
			}
			if h.Flags&(wire.FlagStamped|wire.FlagHit) != 0 {
				t.Fatalf("miss left flags %#x", h.Flags)
			}
			if h.Op != wire.OpGet && h.Stamp != 0 {
				t.Fatalf("write miss left stamp %d", h.Stamp)
			}
		}
		if !allowed[v.Node] {
			t.Fatalf("forward to node %d, not a member", v.Node)
		}
	} else if v.Action != directory.Drop && string(b) != string(in) {
		t.Fatalf("%v rewrote the packet", v.Action)
	}

	d.Each(func(_ uint32, s *directory.Slot) {
		chain := uint32(1)<<s.R - 1
		if s.VerDone > s.VerNext || s.Fresh&chain != chain || s.N < 32 && s.Fresh>>s.N != 0 {
			t.Fatalf("slot invariant broken: %+v", *s)
		}
	})
}
