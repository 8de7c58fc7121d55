package directory_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// TestProcessVSBsIsProcessInTurn drives two directories with the same
// random script, one taking each run of VSBs by ProcessVSBs, the other
// by Process for each sender in turn, and wants the same verdicts, header,
// counters and slots after every step. The script mixes writes left
// pending, their replies, evictions and inserts again, runs of
// LocationList members, non-members and repeats, ports that are not
// storage ports, stamps around the completed version, keys never
// inserted, and packets that are not VSBs.
func TestProcessVSBsIsProcessInTurn(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 3))
	keys := []string{"a", "b", "c", "d", "e", "never"}
	seen := map[directory.Verdict]bool{} // the actions and reasons, by node 0
	const nodes, clientPort, farPort = 40, 50, 1 << 20
	for trial := range 50 {
		twin := [2]*directory.Directory{}
		for j := range twin {
			d := newDir(t, directory.Config{PartitionBits: 1, MaxNodes: 64, Slots: 4})
			for p := uint32(0); p < 2; p++ {
				if err := d.SetPartition(p, []wire.NodeID{1, 2, 3}, nil); err != nil {
					t.Fatal(err)
				}
			}
			for n := uint32(1); n <= nodes; n++ {
				if n%9 != 0 { // every ninth node's port is a client's
					d.SetPort(n, directory.PortStorage)
				}
			}
			d.SetPort(farPort, directory.PortStorage)
			twin[j] = d
		}
		// both applies step to each twin; a packet it builds is built anew
		// for each.
		both := func(step func(d *directory.Directory)) {
			for _, d := range twin {
				step(d)
			}
		}
		var batched, inTurn []directory.Verdict
		for step := range 300 {
			k := keys[r.IntN(len(keys))]
			s, cached := twin[0].Lookup(key(k))
			switch x := r.IntN(10); {
			case x == 0 && k != "never":
				locs := randomLocs(r, nodes)
				rr := 1 + r.IntN(min(3, len(locs)))
				ver := uint64(r.IntN(20))
				both(func(d *directory.Directory) { d.Insert(key(k), locs, rr, ver, nil) })
			case x == 1:
				both(func(d *directory.Directory) { d.Evict(key(k)) })
			case x == 2:
				both(func(d *directory.Directory) { d.Process(pkt(t, wire.OpPut, k, 9, 0, 0), clientPort, 5) })
			case x == 3:
				stamp := s.VerNext - uint64(r.IntN(2))
				both(func(d *directory.Directory) { d.Process(pkt(t, wire.OpPutReply, k, 9, stamp, 3), 3, 6) })
			default:
				stamp := s.VerDone + uint64(r.IntN(3)) - 1
				if !cached || r.IntN(8) == 0 {
					stamp = uint64(r.IntN(20))
				}
				from := randomSenders(r, s, cached, nodes, clientPort, farPort)
				p := vsbRunPacket(t, r, k, stamp)
				pa, pb := bytes.Clone(p), bytes.Clone(p)
				batched = twin[0].ProcessVSBs(pa, from, 7, batched[:0])
				inTurn = inTurn[:0]
				for _, x := range from {
					if len(pb) >= wire.HeaderLen {
						wire.Frame(pb).SetNode(x.Node)
					}
					inTurn = append(inTurn, twin[1].Process(pb, x.Port, 7))
				}
				for _, v := range batched {
					seen[directory.Verdict{Action: v.Action, Reason: v.Reason}] = true
				}
				where := fmt.Sprintf("trial %d step %d: key %s stamp %d senders %v", trial, step, k, stamp, from)
				if fmt.Sprint(batched) != fmt.Sprint(inTurn) {
					t.Fatalf("%s: ProcessVSBs %v, Process in turn %v", where, batched, inTurn)
				}
				if !bytes.Equal(pa, pb) {
					t.Fatalf("%s: header after ProcessVSBs %x, after Process in turn %x", where, pa, pb)
				}
			}
			if a, b := twin[0].Counters(), twin[1].Counters(); a != b {
				t.Fatalf("trial %d step %d: counters %+v and %+v", trial, step, a, b)
			}
			for _, k := range keys {
				a, okA := twin[0].Lookup(key(k))
				b, okB := twin[1].Lookup(key(k))
				if okA != okB || a != b {
					t.Fatalf("trial %d step %d: key %s's slot %+v and %+v", trial, step, k, a, b)
				}
			}
		}
	}
	want := []directory.Verdict{{Action: directory.Multicast}, {Action: directory.Forward}}
	for _, r := range []directory.Reason{directory.ReasonShort, directory.ReasonMagic, directory.ReasonVSBPort,
		directory.ReasonVSBNotCached, directory.ReasonVSBNotMember, directory.ReasonVSBPending, directory.ReasonVSBVersion} {
		want = append(want, directory.Verdict{Action: directory.Drop, Reason: r})
	}
	for _, v := range want {
		if !seen[v] {
			t.Errorf("no run had a VSB %s", v)
		}
	}
}

// randomLocs is a LocationList of 1 to 12 distinct nodes in 1..nodes.
func randomLocs(r *rand.Rand, nodes int) []wire.NodeID {
	perm := r.Perm(nodes)[:1+r.IntN(12)]
	locs := make([]wire.NodeID, len(perm))
	for i, n := range perm {
		locs[i] = wire.NodeID(n + 1)
	}
	return locs
}

// randomSenders is a run of 0 to 12 VSB senders: mostly s's LocationList
// members in order from a random one (as a commit's copies come), else
// any node, repeated or not; mostly on the node's own port, else on a
// client port, a far storage port or another node's.
func randomSenders(r *rand.Rand, s directory.Slot, cached bool, nodes int, clientPort, farPort uint32) []directory.VSBSender {
	from := make([]directory.VSBSender, r.IntN(13))
	start := 0
	if cached {
		start = r.IntN(int(s.N))
	}
	for i := range from {
		n := wire.NodeID(1 + r.IntN(nodes))
		if cached && r.IntN(4) != 0 {
			n = s.Locs[(start+i)%int(s.N)]
		}
		if i > 0 && r.IntN(10) == 0 {
			n = from[i-1].Node
		}
		port := uint32(n)
		switch r.IntN(12) {
		case 0:
			port = clientPort
		case 1:
			port = farPort
		case 2:
			port = uint32(1 + r.IntN(nodes))
		}
		from[i] = directory.VSBSender{Node: n, Port: port}
	}
	return from
}

// vsbRunPacket is a VSB of k at stamp, or now and then a packet that is
// not one: short, of another magic, or a read.
func vsbRunPacket(t *testing.T, r *rand.Rand, k string, stamp uint64) []byte {
	p := pkt(t, wire.OpVSB, k, 0, stamp, 0)
	switch r.IntN(20) {
	case 0:
		return p[:wire.HeaderLen-1]
	case 1:
		p[0] ^= 0xff
	case 2:
		p = pkt(t, wire.OpGet, k, 0, stamp, 0)
	}
	return p
}

// BenchmarkVSBRun: a commit's VSBs in one rack, its tail's and five
// extras', each accepted, over 4096 keys in turn: by ProcessVSBs, and by
// Process for each sender (the time is per VSB).
func BenchmarkVSBRun(b *testing.B) {
	const keys, run = 4096, 6
	d := newDir(b, directory.Config{})
	for n := uint32(0); n < 32; n++ {
		d.SetPort(n, directory.PortStorage)
	}
	ps := make([][]byte, keys)
	froms := make([][]directory.VSBSender, keys)
	for i := range keys {
		k := fmt.Sprintf("hot-%d", i)
		locs := make([]wire.NodeID, 3+run-1)
		for j := range locs {
			locs[j] = wire.NodeID((i + j) % 32)
		}
		if _, err := d.Insert(key(k), locs, 3, 1, nil); err != nil {
			b.Fatal(err)
		}
		ps[i] = pkt(b, wire.OpVSB, k, 0, 1, 0)
		for _, n := range locs[2:] {
			froms[i] = append(froms[i], directory.VSBSender{Node: n, Port: uint32(n)})
		}
	}
	check := func(vs []directory.Verdict) {
		for _, v := range vs {
			if v.Action != directory.Multicast {
				b.Fatal(v)
			}
		}
	}
	b.Run("ProcessVSBs", func(b *testing.B) {
		var out []directory.Verdict
		i := 0
		for b.Loop() {
			out = d.ProcessVSBs(ps[i%keys], froms[i%keys], 0, out[:0])
			check(out)
			i++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*run), "ns/VSB")
	})
	b.Run("Process", func(b *testing.B) {
		var out []directory.Verdict
		i := 0
		for b.Loop() {
			p := ps[i%keys]
			out = out[:0]
			for _, x := range froms[i%keys] {
				wire.Frame(p).SetNode(x.Node)
				out = append(out, d.Process(p, x.Port, 0))
			}
			check(out)
			i++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*run), "ns/VSB")
	})
}
