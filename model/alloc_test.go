package model

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/wire"
)

// loadgen drives a switch with the same batched, allocation-free socket code
// the switch uses, so that allocation counts and packet rates measure the
// switch rather than the generator.
type loadgen struct {
	conn *net.UDPConn
	to   *net.UDPAddr
	tx   *udpbatch.Writer
	rx   *udpbatch.Reader
	pkts [][]byte // one batch of GETs with distinct keys
	next uint64   // next request id
}

func newLoadgen(t testing.TB, s *Switch, batch int) *loadgen {
	t.Helper()
	c := udp(t)
	c.SetReadBuffer(4 << 20)
	c.SetWriteBuffer(4 << 20)
	g := &loadgen{conn: c, to: net.UDPAddrFromAddrPort(s.Addr()), tx: udpbatch.NewWriter(c, true, batch)}
	var err error
	if g.rx, err = udpbatch.NewReader(c, udpbatch.Buffers(batch, wire.MaxPacket+1)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < batch; i++ {
		g.pkts = append(g.pkts, encode(t, get(fmt.Sprintf("key-%06d", i), 0)))
	}
	return g
}

// sendBatch sends one batch of GETs with fresh request ids.
func (g *loadgen) sendBatch() { g.send(len(g.pkts)) }

// send sends n <= batch GETs with fresh request ids.
func (g *loadgen) send(n int) {
	for _, p := range g.pkts[:n] {
		g.next++
		wire.Frame(p).SetReqID(g.next)
		g.tx.Add(p, g.to)
	}
	g.tx.Flush()
}

// echo reads n requests on a node socket and answers each as a GET reply.
type echo struct {
	rx *udpbatch.Reader
	tx *udpbatch.Writer
	to *net.UDPAddr
}

func newEcho(t testing.TB, c *net.UDPConn, s *Switch, batch int) *echo {
	t.Helper()
	e := &echo{tx: udpbatch.NewWriter(c, true, batch), to: net.UDPAddrFromAddrPort(s.Addr())}
	var err error
	if e.rx, err = udpbatch.NewReader(c, udpbatch.Buffers(batch, wire.MaxPacket+1)); err != nil {
		t.Fatal(err)
	}
	return e
}

// drain reads until n datagrams have arrived. If e is not nil, it answers
// each request as a GET reply, before the next read reuses the buffers.
func drain(t testing.TB, rx *udpbatch.Reader, n int, e *echo) {
	for got := 0; got < n; {
		k, err := rx.Read()
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", got, n, err)
		}
		if e != nil {
			for i := 0; i < k; i++ {
				b, _ := rx.Msg(i)
				wire.Frame(b).SetOp(wire.OpGetReply)
				e.tx.Add(b, e.to)
			}
			e.tx.Flush()
		}
		got += k
	}
}

// TestNoAllocsPerPacket: forwarding requests, learning from replies and
// relaying them allocates nothing in steady state.
func TestNoAllocsPerPacket(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	const batch = 32
	c := newCluster(t, 1, Config{})
	g := newLoadgen(t, c.s, batch)
	node := c.nodes[1]
	e := newEcho(t, node, c.s, batch)
	deadline := time.Now().Add(30 * time.Second) // bounds every read below
	node.SetReadDeadline(deadline)
	g.conn.SetReadDeadline(deadline)
	round := func() {
		g.sendBatch()
		drain(t, e.rx, batch, e)
		drain(t, g.rx, batch, nil)
	}
	for i := 0; i < 20; i++ {
		round()
	}
	allocs := testing.AllocsPerRun(100, round)
	st := waitReceived(t, c.s, 121*2*batch)
	if st.Forwarded != 121*batch || st.Relayed != 121*batch {
		t.Fatalf("forwarded=%d relayed=%d, want %d each", st.Forwarded, st.Relayed, 121*batch)
	}
	// A run moves 2*batch datagrams through the switch (and through the
	// generator and the echoing node).
	if allocs >= 1 {
		t.Fatalf("%v allocations per %d datagrams, want none", allocs, 2*batch)
	}
}
