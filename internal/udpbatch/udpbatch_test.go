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

// TestRoundTrip: datagrams of mixed sizes to two addresses arrive whole, in
// order, from the writer's address, at readers that take segmented
// datagrams whole (buffers of MaxDatagram) and at readers that do not.
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
				to := i / 30 % 2 // runs of 30 to each
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
