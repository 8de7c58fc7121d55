package client

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/netdir/netdir/wire"
)

// ErrTimeout is Conn.Call's error when no reply came in any try.
var ErrTimeout = errors.New("timeout")

// Retry says how Conn.Call resends a request whose reply does not come.
type Retry struct {
	// Timeout is the first try's; each later try doubles it, up to
	// MaxTimeout (0: Timeout, every try the same).
	Timeout    time.Duration
	MaxTimeout time.Duration
	// Tries bounds the tries (0: until the context ends).
	Tries int
}

// Conn is a UDP socket for netdir requests: it sends a request, matches the
// reply by request id, and resends on timeout. A read loop delivers replies
// to the calls waiting for them, so calls may run concurrently. The client,
// the controller's node calls and the benchmarks' direct reads share it.
type Conn struct {
	conn *net.UDPConn

	mu    sync.Mutex
	waits map[uint64]chan []byte

	closed chan struct{}
	wg     sync.WaitGroup
}

// Listen opens a Conn on an ephemeral port of every address.
func Listen() (*Conn, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{})
	if err != nil {
		return nil, err
	}
	_ = conn.SetReadBuffer(4 << 20)
	c := &Conn{conn: conn, waits: make(map[uint64]chan []byte), closed: make(chan struct{})}
	c.wg.Add(1)
	go c.readLoop()
	return c, nil
}

// Close closes the socket; calls under way return net.ErrClosed.
func (c *Conn) Close() error {
	select {
	case <-c.closed:
		return nil
	default:
	}
	close(c.closed)
	err := c.conn.Close()
	c.wg.Wait()
	return err
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, _, err := c.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			select {
			case <-c.closed:
				return
			default:
				continue
			}
		}
		f := wire.Frame(buf[:n])
		if f.Check() != nil {
			continue
		}
		c.mu.Lock()
		ch := c.waits[f.ReqID()]
		c.mu.Unlock()
		if ch == nil {
			continue
		}
		select {
		case ch <- append([]byte(nil), f...):
		default:
		}
	}
}

// Call sends req to addr and waits for its reply: the reply op of req's op
// (wire.Op.Reply) or an ERR, with req's request id. It resends req, with the
// same id, each time a try's timeout passes, as r says, and then returns
// ErrTimeout. A reply's Key and Value are its own.
func (c *Conn) Call(ctx context.Context, addr netip.AddrPort, req *wire.Packet, r Retry) (*wire.Packet, error) {
	pkt, err := req.AppendEncode(nil)
	if err != nil {
		return nil, err
	}
	want := req.Op.Reply()
	ch := make(chan []byte, 4)
	c.mu.Lock()
	c.waits[req.ReqID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.waits[req.ReqID] == ch {
			delete(c.waits, req.ReqID)
		}
		c.mu.Unlock()
	}()
	timeout := r.Timeout
	for try := 0; r.Tries == 0 || try < r.Tries; try++ {
		if try > 0 {
			timeout = min(2*timeout, max(r.MaxTimeout, r.Timeout))
		}
		if _, err := c.conn.WriteToUDPAddrPort(pkt, addr); err != nil {
			return nil, err
		}
		p, err := c.await(ctx, ch, want, timeout)
		if err != ErrTimeout {
			return p, err
		}
	}
	return nil, ErrTimeout
}

// await waits up to timeout for a reply of op want (or an ERR) on ch.
func (c *Conn) await(ctx context.Context, ch chan []byte, want wire.Op, timeout time.Duration) (*wire.Packet, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case b := <-ch:
			var p wire.Packet
			// A node's JSON stats may exceed MaxValue.
			if err := p.Decode(b); err != nil && !(want == wire.OpStats && errors.Is(err, wire.ErrValLarge)) {
				continue
			}
			if p.Op != want && p.Op != wire.OpErr {
				continue
			}
			return &p, nil
		case <-t.C:
			return nil, ErrTimeout
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closed:
			return nil, net.ErrClosed
		}
	}
}
