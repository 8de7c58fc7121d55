package udpbatch

import (
	"fmt"
	"net"
	"testing"
	"time"
)

func listen(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadBuffer(4 << 20)
	return c
}

// TestRoundTrip: datagrams of mixed sizes to two addresses, queued
// interleaved, arrive whole, each address's in the order queued, from the
// writer's address, at readers that take segmented datagrams whole (buffers
// of MaxDatagram) and at readers that do not; with segmentation, each
// address's run leaves in few messages although the queue alternates.
func TestRoundTrip(t *testing.T) {
	for _, size := range []int{MaxDatagram, 2048} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			src, a, b := listen(t), listen(t), listen(t)
			var readers [2]*Reader
			for k, c := range []*net.UDPConn{a, b} {
				var err error
				if readers[k], err = NewReader(c, Buffers(16, size)); err != nil {
					t.Fatal(err)
				}
			}
			w := NewWriter(src, true, 64)
			var want [2][]string
			for i := range 150 {
				n := 100
				if i%10 == 9 {
					n = 40 + i // a shorter or longer one ends a segmented run
				}
				d := []byte(fmt.Sprintf("%0*d", n, i))
				to := i / 30 % 2 // runs of 30 to each, then alternating
				if i >= 60 {
					to = i % 2
				}
				want[to] = append(want[to], string(d))
				w.AddPeer(d, PeerOf([]*net.UDPConn{a, b}[to].LocalAddr().(*net.UDPAddr).AddrPort(), true))
			}
			w.Flush()
			if w.Sent != 150 || w.Errs != 0 {
				t.Fatalf("sent %d, %d errors", w.Sent, w.Errs)
			}
			from := PeerOf(src.LocalAddr().(*net.UDPAddr).AddrPort(), true)
			for k, c := range []*net.UDPConn{a, b} {
				r := readers[k]
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				var got []string
				msgs := 0
				for len(got) < len(want[k]) {
					n, err := r.Read()
					if err != nil {
						t.Fatalf("after %d: %v", len(got), err)
					}
					msgs += r.n
					for i := range n {
						d, p := r.Msg(i)
						if p != from {
							t.Fatalf("datagram from %v, want %v", p, from)
						}
						got = append(got, string(d))
					}
				}
				for i := range want[k] {
					if got[i] != want[k][i] {
						t.Fatalf("reader %d datagram %d: %q, want %q", k, i, got[i], want[k][i])
					}
				}
				if w.gso && r.gro && msgs >= len(got) {
					t.Errorf("reader %d: %d datagrams in %d messages: none came segmented", k, len(got), msgs)
				}
				t.Logf("reader %d: %d datagrams in %d messages (gso %v, gro %v)", k, len(got), msgs, w.gso, r.gro)
			}
		})
	}
}

// TestGroup: a flush groups a batch by destination, keeping each
// destination's order, and with segmentation makes one message of each
// destination's run of equal sizes (a shorter datagram ends a message, a
// longer one starts the next); given addresses and peers never share a
// message, nor do two peers.
func TestGroup(t *testing.T) {
	c := listen(t)
	w := NewWriter(c, true, 64)
	w.gso = true
	a := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	p := Peer{IP: [16]byte{127, 0, 0, 1}, Port: 2}
	q := Peer{IP: [16]byte{127, 0, 0, 1}, Port: 3}
	d := func(n int, tag byte) []byte { b := make([]byte, n); b[0] = tag; return b }
	// Interleaved: a gets 100,100,100,50,100; p gets 100 x3; q one 80.
	w.Add(d(100, 1), a)
	w.AddPeer(d(100, 10), p)
	w.Add(d(100, 2), a)
	w.AddPeer(d(80, 20), q)
	w.AddPeer(d(100, 11), p)
	w.Add(d(100, 3), a)
	w.Add(d(50, 4), a)
	w.AddPeer(d(100, 12), p)
	w.Add(d(100, 5), a)
	if w.Len() != 9 {
		t.Fatalf("Len %d, want 9", w.Len())
	}
	n := w.group()
	type msg struct {
		port int
		tags []byte
	}
	var got []msg
	for i := range n {
		m := msg{port: w.msgs[i].Addr.(*net.UDPAddr).Port}
		for _, b := range w.msgs[i].Buffers {
			m.tags = append(m.tags, b[0])
		}
		if (len(m.tags) > 1) != (w.msgs[i].OOB != nil) {
			t.Errorf("message %d: %d segments, control %v", i, len(m.tags), w.msgs[i].OOB)
		}
		got = append(got, m)
	}
	want := []msg{{1, []byte{1, 2, 3, 4}}, {1, []byte{5}}, {2, []byte{10, 11, 12}}, {3, []byte{20}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	w.gso = false
	if n := w.group(); n != 9 {
		t.Fatalf("without segmentation: %d messages, want 9", n)
	}
}

// groupBatch queues a batch of 128 datagrams of 60 bytes, interleaved
// over nd of dsts, and groups it, as a flush does before its sendmmsg.
func groupBatch(w *Writer, d []byte, dsts []*net.UDPAddr, nd int) {
	for i := range 128 {
		w.Add(d, dsts[i%nd])
	}
	w.group()
	w.Discard()
}

func groupDests(tb testing.TB) (*net.UDPConn, []*net.UDPAddr) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	dsts := make([]*net.UDPAddr, 5)
	for i := range dsts {
		dsts[i] = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1 + i}
	}
	return c, dsts
}

// TestGroupNoAllocs: queuing and grouping a batch allocates nothing, to one
// destination (no sort) or to several.
func TestGroupNoAllocs(t *testing.T) {
	c, dsts := groupDests(t)
	d := make([]byte, 60)
	for _, nd := range []int{1, 5} {
		w := NewWriter(c, true, 128)
		w.gso = true
		if a := testing.AllocsPerRun(100, func() { groupBatch(w, d, dsts, nd) }); a != 0 {
			t.Errorf("%d destinations: %.1f allocations per batch, want 0", nd, a)
		}
	}
}

// BenchmarkGroup: one op is one batch queued and grouped (groupBatch), to
// one destination and to five.
func BenchmarkGroup(b *testing.B) {
	c, dsts := groupDests(b)
	d := make([]byte, 60)
	for _, nd := range []int{1, 5} {
		b.Run(fmt.Sprint(nd), func(b *testing.B) {
			w := NewWriter(c, true, 128)
			w.gso = true
			b.ReportAllocs()
			for b.Loop() {
				groupBatch(w, d, dsts, nd)
			}
		})
	}
}
