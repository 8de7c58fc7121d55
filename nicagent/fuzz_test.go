package nicagent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/directory/vectors"
	"github.com/netdir/netdir/wire"
)

// The random-packet tests: random netdir packets through the programs and
// the Go core side by side (the same verdicts, output headers and state),
// and random frames of every shape through both programs (no abort, only
// the verdicts each hook has, nothing rewritten that was not routed).

var fuzzKeys = []string{"apple", "banana", "cherry", "durian"}

// randomPacket draws a netdir packet: mostly well-formed headers with
// random fields, some with a corrupted byte, some random bytes.
func randomPacket(r *rand.Rand, now uint64) []byte {
	switch x := r.IntN(10); {
	case x < 7:
		ops := []wire.Op{wire.OpGet, wire.OpGet, wire.OpGet, wire.OpPut, wire.OpDel, wire.OpGetReply,
			wire.OpPutReply, wire.OpPutReply, wire.OpDelReply, wire.OpErr, wire.OpVSB, wire.OpVSB, wire.OpVSB,
			wire.OpCopy, wire.Op(0x3f), wire.Op(r.IntN(256))}
		var p wire.Packet
		p.Op = ops[r.IntN(len(ops))]
		p.Flags = uint8(r.IntN(16))
		if r.IntN(4) == 0 {
			p.Flags = uint8(r.Uint32())
		}
		if r.IntN(3) == 0 {
			p.Code = wire.Code(r.IntN(14))
		}
		p.ReqID = r.Uint64()
		if r.IntN(5) > 0 {
			p.KeyHash = wire.HashKey([]byte(fuzzKeys[r.IntN(len(fuzzKeys))]))
		} else {
			binary.NativeEndian.PutUint64(p.KeyHash[:], r.Uint64())
			binary.NativeEndian.PutUint64(p.KeyHash[8:], r.Uint64())
		}
		p.Stamp = uint64(r.IntN(12))
		if r.IntN(10) == 0 {
			p.Stamp = r.Uint64()
		}
		p.Node = wire.NodeID(1 + r.IntN(6))
		if r.IntN(10) == 0 {
			p.Node = wire.NodeID(r.Uint32())
		}
		p.Load = uint16(r.IntN(50))
		p.Tenant = uint16(r.IntN(3)) // dmClock: a few tenants, now and then one that aliases
		if r.IntN(10) == 0 {
			p.Tenant = uint16(r.Uint32())
		}
		p.Delta, p.Rho = r.Uint32(), r.Uint32()
		p.Epoch = r.Uint32()
		p.Timestamp = uint64(r.Int64N(int64(now) + 20))
		p.Key = make([]byte, r.IntN(24))
		p.Value = make([]byte, r.IntN(24))
		b, _ := p.AppendEncode(nil)
		if r.IntN(4) == 0 {
			b = b[:wire.HeaderLen+r.IntN(len(b)-wire.HeaderLen+1)]
		}
		return b
	case x < 8:
		var p wire.Packet
		p.Op = wire.OpGet
		p.KeyHash = wire.HashKey([]byte(fuzzKeys[r.IntN(len(fuzzKeys))]))
		b, _ := p.AppendEncode(nil)
		b[r.IntN(8)] ^= byte(1 + r.IntN(255))
		return b
	default:
		b := make([]byte, r.IntN(80))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if len(b) >= 2 && r.IntN(2) == 0 {
			wire.Frame(b).SetMagic(wire.Magic)
		}
		return b
	}
}

// TestRandomPacketsMatchCore runs random packets through the programs and
// through the Go core from identical state, and compares every verdict and
// output packet, then the slots, counters and node stats.
func TestRandomPacketsMatchCore(t *testing.T) {
	d := loadTest(t)
	configs := []directory.Config{
		{PartitionBits: 1, Slots: 8},
		{PartitionBits: 1, Slots: 8, Mode: directory.ModeHost},
		{PartitionBits: 2, Slots: 8, Policy: directory.PolicyPegasus},
		{PartitionBits: 1, Slots: 8, Mode: directory.ModeHost, Policy: directory.PolicyReplicas},
	}
	const packets = 3000
	for ci, cfg := range configs {
		for _, router := range []bool{false, true} {
			t.Run(fmt.Sprintf("config%d/router=%v", ci, router), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(ci), map[bool]uint64{false: 1, true: 2}[router]))
				core := &vectors.Core{}
				plane := &bpfPlane{t: t, d: d, router: router}
				planes := []vectors.Plane{core, plane}
				do := func(f func(p vectors.Plane) error) {
					t.Helper()
					for _, p := range planes {
						if err := f(p); err != nil {
							t.Fatal(err)
						}
					}
				}
				do(func(p vectors.Plane) error { return p.Reset(cfg) })
				for part := uint32(0); part < 1<<cfg.PartitionBits; part++ {
					chain := []wire.NodeID{wire.NodeID(1 + part%3), wire.NodeID(1 + (part+1)%3), wire.NodeID(1 + (part+2)%3)}
					w := []uint32{uint32(1 + r.IntN(3)), uint32(r.IntN(3)), uint32(1 + r.IntN(3))}
					do(func(p vectors.Plane) error { return p.SetPartition(part, chain, directory.BucketsForWeights(w)) })
				}
				do(func(p vectors.Plane) error { return p.SetPort(3, directory.PortStorage) })
				do(func(p vectors.Plane) error { return p.SetPort(4, directory.PortStorage) })
				for i, k := range fuzzKeys[:3] {
					h := wire.HashKey([]byte(k))
					locs := []wire.NodeID{1, 2, 3, 4, 5}[:3+i]
					do(func(p vectors.Plane) error { return p.Insert(h, locs, 3, uint64(i), nil) })
				}
				for n := wire.NodeID(1); n <= 5; n++ {
					st := directory.NodeStats{Load: uint16(r.IntN(20)), Latency: uint64(r.IntN(3000))}
					do(func(p vectors.Plane) error { return p.SetNodeStats(n, st) })
				}
				now := uint64(1000)
				for i := range packets {
					now += uint64(r.IntN(100))
					pkt := randomPacket(r, now)
					port := []uint32{3, 4, 9}[r.IntN(3)]
					v1, out1, err1 := core.Process(bytes.Clone(pkt), port, now)
					v2, out2, err2 := plane.Process(bytes.Clone(pkt), port, now)
					if err1 != nil || err2 != nil {
						t.Fatalf("packet %d %x: core %v, programs %v", i, pkt, err1, err2)
					}
					if v1 != v2 || !bytes.Equal(out1, out2) {
						t.Fatalf("packet %d on port %d at %d: %x\ncore:     %s %x\nprograms: %s %x", i, port, now, pkt, v1, out1, v2, out2)
					}
					if i%500 == 499 || i == packets-1 {
						compareState(t, core, plane)
					}
					if r.IntN(400) == 0 { // the control plane moves too
						h := wire.HashKey([]byte(fuzzKeys[r.IntN(3)]))
						b := directory.BucketsForWeights([]uint32{1, uint32(r.IntN(3)), 1})
						do(func(p vectors.Plane) error {
							if err := p.SetSlotBuckets(h, b); err != nil && err != directory.ErrNotFound {
								return err
							}
							return nil
						})
					}
				}
			})
		}
	}
}

func compareState(t *testing.T, a, b vectors.Plane) {
	t.Helper()
	for _, k := range fuzzKeys {
		h := wire.HashKey([]byte(k))
		s1, ok1, _ := a.Lookup(h)
		s2, ok2, err := b.Lookup(h)
		if err != nil || ok1 != ok2 || s1.Fresh != s2.Fresh || s1.VerNext != s2.VerNext || s1.VerDone != s2.VerDone ||
			s1.Hits != s2.Hits || s1.Buckets != s2.Buckets || s1.Locs != s2.Locs {
			t.Fatalf("slot %s: core %+v, programs %+v (%v)", k, s1, s2, err)
		}
		e1, _ := a.SketchEstimate(h)
		e2, _ := b.SketchEstimate(h)
		if e1 != e2 {
			t.Fatalf("sketch %s: core %d, programs %d", k, e1, e2)
		}
	}
	c1, _ := a.Counters()
	c2, err := b.Counters()
	if err != nil || c1 != c2 {
		t.Fatalf("counters: core %+v, programs %+v (%v)", c1, c2, err)
	}
	for n := wire.NodeID(0); n < 8; n++ {
		n1, _ := a.Node(n)
		n2, _ := b.Node(n)
		if n1 != n2 {
			t.Fatalf("node %d: core %+v, programs %+v", n, n1, n2)
		}
	}
}

// randomFrame draws a frame of any shape: valid netdir frames, truncated
// ones at every layer, other protocols and ports, IP options, fragments,
// lying length fields, random bytes.
func randomFrame(r *rand.Rand) []byte {
	src := portSource(uint32(r.IntN(6)))
	dst := service
	if r.IntN(4) == 0 {
		dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 2, byte(r.IntN(256))}), uint16(7419+r.IntN(3)))
	}
	f := frame(src, dst, randomPacket(r, 1000))
	switch r.IntN(12) {
	case 0: // truncated anywhere
		f = f[:r.IntN(len(f)+1)]
	case 1: // a random byte in the IP or UDP header
		if len(f) > 42 {
			f[14+r.IntN(28)] = byte(r.Uint32())
		}
	case 2: // lying UDP length
		binary.BigEndian.PutUint16(f[38:], uint16(r.IntN(200)))
	case 3: // not IPv4
		binary.BigEndian.PutUint16(f[12:], []uint16{0x86dd, 0x0806, 0x8100, uint16(r.Uint32())}[r.IntN(4)])
	case 4: // not UDP
		f[23] = []byte{6, 1, 17, byte(r.Uint32())}[r.IntN(4)]
	case 5: // a fragment
		binary.BigEndian.PutUint16(f[20:], uint16(r.IntN(1<<16)))
	case 6: // IP options: a larger IHL (the payload shifts)
		f[14] = 0x40 | byte(5+r.IntN(11))
	case 7: // random bytes
		f = make([]byte, r.IntN(120))
		for i := range f {
			f[i] = byte(r.Uint32())
		}
	case 8: // no UDP checksum
		binary.BigEndian.PutUint16(f[40:], 0)
	}
	if len(f) < 14 {
		f = append(f, make([]byte, 14-len(f))...) // test runs need an Ethernet header
	}
	return f
}

// TestRandomFrames runs random frames through both programs in both shapes
// and every mode: no abort, only the hook's verdicts, at most one counter
// per packet, and a frame changes only when it is routed (then with valid
// checksums, to a node's address).
func TestRandomFrames(t *testing.T) {
	d := loadTest(t)
	const frames = 4000
	for _, cfg := range []directory.Config{{PartitionBits: 1}, {PartitionBits: 1, Mode: directory.ModeHost, Policy: directory.PolicyPegasus}} {
		for _, router := range []bool{false, true} {
			p := &bpfPlane{t: t, d: d, router: router}
			if err := p.Reset(cfg); err != nil {
				t.Fatal(err)
			}
			for part := uint32(0); part < 2; part++ {
				if err := d.SetPartition(part, []wire.NodeID{1, 2, 3}, nil); err != nil {
					t.Fatal(err)
				}
			}
			for i, k := range fuzzKeys[:2] {
				if err := d.Insert(wire.HashKey([]byte(k)), []wire.NodeID{1, 2, 3, 4}, 3, uint64(i), nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.SetPort(3, directory.PortStorage); err != nil {
				t.Fatal(err)
			}
			if err := d.SetClock(5000); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(cfg.Mode), map[bool]uint64{false: 7, true: 8}[router]))
			for i := range frames {
				f := randomFrame(r)
				for _, hook := range []string{"xdp", "tc"} {
					prog := d.XDP()
					allowed := map[uint32]bool{xdpDrop: true, xdpPass: true, xdpTx: true}
					if hook == "tc" {
						prog, allowed = d.TC(), map[uint32]bool{tcOK: true, tcShot: true}
					}
					before, _ := d.Stats()
					ret, out, err := run(prog, f)
					if hook == "tc" && errors.Is(err, unix.EINVAL) && len(f) < 14+20 && binary.BigEndian.Uint16(f[12:]) == 0x0800 {
						continue // the kernel refuses to build an skb with a truncated IPv4 header
					}
					if err != nil {
						t.Fatalf("%s frame %d %x: %v", hook, i, f, err)
					}
					after, _ := d.Stats()
					if !allowed[ret] {
						t.Fatalf("%s frame %d %x: return code %d", hook, i, f, ret)
					}
					moved := after.Hits + after.Misses + after.Replies + after.VSBs + after.Passed + after.DropTotal -
						(before.Hits + before.Misses + before.Replies + before.VSBs + before.Passed + before.DropTotal)
					if moved > 1 {
						t.Fatalf("%s frame %d %x: %d counters moved", hook, i, f, moved)
					}
					routed := after.TCFwd+after.XDPTx > before.TCFwd+before.XDPTx
					if !routed {
						if !bytes.Equal(out, f) && ret != xdpDrop && !(hook == "tc" && ret == tcShot) {
							t.Fatalf("%s frame %d: changed but not routed (return %d)\nin  %x\nout %x", hook, i, ret, f, out)
						}
						continue
					}
					if (hook == "xdp" && ret != xdpTx) || (hook == "tc" && ret != tcOK) {
						t.Fatalf("%s frame %d: routed with return code %d", hook, i, ret)
					}
					// Checksums valid before stay valid; a frame that lies
					// about its lengths is rewritten consistently but cannot
					// be checked (its receiver drops it).
					pf, err := parseFrameCsum(out, checksums(f[14:]) == nil)
					if err != nil {
						t.Fatalf("%s frame %d: routed frame: %v\nin  %x\nout %x", hook, i, err, f, out)
					}
					var h wire.Header
					if err := h.DecodeHeader(pf.payload); err != nil {
						t.Fatalf("%s frame %d: routed header: %v", hook, i, err)
					}
					if want := testNodeAddr(h.Node); pf.ip.DstIP.String() != want.Addr.Addr().String() || uint16(pf.udp.DstPort) != want.Addr.Port() {
						t.Fatalf("%s frame %d: node %d's request went to %s:%d", hook, i, h.Node, pf.ip.DstIP, pf.udp.DstPort)
					}
				}
			}
		}
	}
}

// FuzzPrograms feeds arbitrary frames to both programs (go test -fuzz, as
// root): no abort, only each hook's verdicts.
func FuzzPrograms(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 32 {
		f.Add(randomFrame(r))
	}
	d := loadTest(f)
	p := &bpfPlane{d: d}
	if err := p.Reset(directory.Config{PartitionBits: 1}); err != nil {
		f.Fatal(err)
	}
	if err := d.SetPartition(1, []wire.NodeID{1, 2, 3}, nil); err != nil {
		f.Fatal(err)
	}
	if err := d.Insert(wire.HashKey([]byte("apple")), []wire.NodeID{1, 2, 3, 4}, 3, 1, nil); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 {
			return
		}
		if ret, _, err := run(d.XDP(), frame); err != nil || ret == xdpAborted || ret > xdpTx {
			t.Fatalf("XDP: return %d, %v", ret, err)
		}
		if len(frame) < 14+20 && binary.BigEndian.Uint16(frame[12:]) == 0x0800 {
			return // no skb is built with a truncated IPv4 header
		}
		if ret, _, err := run(d.TC(), frame); err != nil || (ret != tcOK && ret != tcShot) {
			t.Fatalf("TC: return %d, %v", ret, err)
		}
	})
}
