package model

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/netdir/netdir/wire"
)

// wait bounds every wait in these tests; a healthy run never gets near it.
const wait = 5 * time.Second

// udp opens a loopback socket.
func udp(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func addrOf(c *net.UDPConn) netip.AddrPort {
	ap := c.LocalAddr().(*net.UDPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// start runs a switch on loopback until the test ends.
func start(t testing.TB, cfg Config) *Switch {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Run(context.Background()) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// waitReceived waits until the switch has processed n datagrams in all.
func waitReceived(t testing.TB, s *Switch, n uint64) Stats {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		_, st := s.Counters()
		if st.Received >= n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("switch processed %d datagrams, want %d", st.Received, n)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func send(t testing.TB, c *net.UDPConn, to netip.AddrPort, b []byte) {
	t.Helper()
	if _, err := c.WriteToUDPAddrPort(b, to); err != nil {
		t.Fatal(err)
	}
}

// recv reads one datagram, failing the test if none comes.
func recv(t testing.TB, c *net.UDPConn) ([]byte, netip.AddrPort) {
	t.Helper()
	buf := make([]byte, wire.MaxPacket+1)
	c.SetReadDeadline(time.Now().Add(wait))
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("read on %s: %v", c.LocalAddr(), err)
	}
	return buf[:n], from
}

// nothing asserts that no datagram is queued on c. Callers first make sure,
// by the switch's counters, that anything sent has been delivered.
func nothing(t testing.TB, c *net.UDPConn) {
	t.Helper()
	buf := make([]byte, wire.MaxPacket+1)
	c.SetReadDeadline(time.Now().Add(time.Millisecond))
	n, _, err := c.ReadFromUDPAddrPort(buf)
	if err == nil {
		var h wire.Header
		h.DecodeHeader(buf[:n])
		t.Fatalf("unexpected datagram on %s: %d bytes, op %s", c.LocalAddr(), n, h.Op)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatal(err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func encode(t testing.TB, p wire.Packet) []byte {
	t.Helper()
	b, err := p.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func header(t testing.TB, b []byte) wire.Header {
	t.Helper()
	var h wire.Header
	if err := h.DecodeHeader(b); err != nil {
		t.Fatal(err)
	}
	return h
}

// cluster is a switch with fake nodes 1..n, every partition on the chain
// (1..min(3,n)).
type cluster struct {
	s     *Switch
	nodes map[wire.NodeID]*net.UDPConn
}

func newCluster(t testing.TB, n int, cfg Config) *cluster {
	t.Helper()
	c := &cluster{nodes: map[wire.NodeID]*net.UDPConn{}}
	var chain []wire.NodeID
	for id := wire.NodeID(1); int(id) <= n; id++ {
		nc := udp(t)
		c.nodes[id] = nc
		cfg.Nodes = append(cfg.Nodes, Node{ID: id, Addr: addrOf(nc)})
		if len(chain) < 3 {
			chain = append(chain, id)
		}
	}
	if cfg.Directory.PartitionBits == 0 {
		cfg.Directory.PartitionBits = 1
	}
	c.s = start(t, cfg)
	for p := 0; p < 1<<cfg.Directory.PartitionBits; p++ {
		if err := c.s.SetPartition(uint32(p), chain, nil); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// which returns the node that holds a datagram, reading it.
func (c *cluster) which(t testing.TB) (wire.NodeID, []byte) {
	t.Helper()
	buf := make([]byte, wire.MaxPacket+1)
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		for id, nc := range c.nodes {
			nc.SetReadDeadline(time.Now().Add(time.Millisecond))
			if n, _, err := nc.ReadFromUDPAddrPort(buf); err == nil {
				return id, buf[:n]
			}
		}
	}
	t.Fatal("no node received the datagram")
	return 0, nil
}

// reply turns a request as a node received it into that node's reply.
func reply(t testing.TB, req []byte, code wire.Code) []byte {
	t.Helper()
	var p wire.Packet
	if err := p.Decode(req); err != nil {
		t.Fatal(err)
	}
	p.Op = p.Op.Reply()
	p.Code = code
	p.Load = 3
	return encode(t, p)
}
