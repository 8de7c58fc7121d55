package client

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/nodeauth"
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

// Batch sizes: datagrams per sendmmsg and per recvmmsg.
const (
	sendBatch = 64
	recvBatch = 16
	// recvSize holds any datagram: a node's JSON stats may exceed
	// wire.MaxPacket.
	recvSize = 64 << 10
)

// Conn is a UDP socket for netdir requests: it sends a request, matches the
// reply by request id, and resends on timeout. Calls may run concurrently:
// requests sent together leave in one sendmmsg, and one read loop receives
// replies in batches (recvmmsg) and hands each to its call. The client, the
// controller's node calls and the benchmarks' direct reads share it.
//
// A call allocates nothing in steady state: it borrows a waiter (a signal
// channel, a timer and a reply buffer, all reused) from the Conn.
type Conn struct {
	conn *net.UDPConn
	v4   bool
	rx   *udpbatch.Reader
	bufs *[][]byte // rx's buffers, back to recvBuffers on Close

	mu    sync.Mutex // guards waits and free
	waits map[uint64]*waiter
	free  []*waiter

	smu      sync.Mutex // guards the send queues
	queued   *sendQueue // where calls add their requests
	spare    *sendQueue // the queue being sent, or idle
	flushing bool       // a call is sending queued requests

	// auth seals the node ops sent (a controller's promote, demote and
	// stats) and opens their replies; nil: neither (SetAuth).
	auth atomic.Pointer[nodeauth.Auth]

	closed chan struct{}
	wg     sync.WaitGroup
}

// SetAuth makes c seal the node ops it sends with the cluster key, and
// accept only node-op replies that a holder of the key sealed.
func (c *Conn) SetAuth(a *nodeauth.Auth) { c.auth.Store(a) }

// sendQueue is one batch of requests: copies of their bytes (so that a call
// may return before its request is sent) and the writer that sends them.
type sendQueue struct {
	w    *udpbatch.Writer
	bufs [][]byte
}

// waiter is a call waiting for its reply. The read loop fills reply and
// signals ready, once, after removing the waiter from Conn.waits; until
// then only the read loop (under Conn.mu) touches reply.
type waiter struct {
	id    uint64
	want  wire.Op
	ready chan struct{} // capacity 1
	timer *time.Timer
	req   []byte // the request datagram
	reply []byte // the reply datagram
}

// Listen opens a Conn on an ephemeral port of every address.
func Listen() (*Conn, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{})
	if err != nil {
		return nil, err
	}
	_ = conn.SetReadBuffer(4 << 20)
	_ = conn.SetWriteBuffer(4 << 20)
	v4 := conn.LocalAddr().(*net.UDPAddr).IP.To4() != nil
	bufs := recvBuffers.Get().(*[][]byte)
	rx, err := udpbatch.NewReader(conn, *bufs)
	if err != nil {
		recvBuffers.Put(bufs)
		conn.Close()
		return nil, err
	}
	c := &Conn{conn: conn, v4: v4, rx: rx, bufs: bufs, waits: make(map[uint64]*waiter), closed: make(chan struct{})}
	c.queued, c.spare = c.newQueue(), c.newQueue()
	c.wg.Add(1)
	go c.readLoop()
	return c, nil
}

func (c *Conn) newQueue() *sendQueue {
	return &sendQueue{w: udpbatch.NewWriter(c.conn, c.v4, sendBatch), bufs: make([][]byte, sendBatch)}
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
	recvBuffers.Put(c.bufs)
	return err
}

// recvBuffers are read loops' receive buffers (1 MiB a Conn), reused by the
// next Listen: some callers open a Conn per call.
var recvBuffers = sync.Pool{New: func() any {
	b := udpbatch.Buffers(recvBatch, recvSize)
	return &b
}}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	for {
		// The calls this batch's replies woke send their next requests
		// first, so more replies arrive per read (as in the node's
		// storagenode.Node.readLoop).
		runtime.Gosched()
		n, err := c.rx.Read()
		if err != nil {
			select {
			case <-c.closed:
				return
			default:
				continue
			}
		}
		c.mu.Lock()
		for i := range n {
			b, from := c.rx.Msg(i)
			c.deliver(b, from.AddrPort(c.v4))
		}
		c.mu.Unlock()
	}
}

// deliver hands datagram b to the call waiting for it, if any, and if it is
// that call's reply op or an ERR; c.mu is held.
func (c *Conn) deliver(b []byte, from netip.AddrPort) {
	f := wire.Frame(b)
	if f.Check() != nil {
		return
	}
	w := c.waits[f.ReqID()]
	if w == nil {
		return
	}
	if a := c.auth.Load(); a != nil && f.Op().IsNodeOp() {
		var v nodeauth.Verdict
		if b, v = a.Open(b, f.Node(), from); v != nodeauth.OK {
			return
		}
	}
	var p wire.Packet
	if !decodeReply(&p, b, w.want) {
		return
	}
	w.reply = append(w.reply[:0], b...)
	delete(c.waits, w.id)
	w.ready <- struct{}{}
}

// decodeReply decodes b into p and reports whether it is a reply of op want
// or an ERR.
func decodeReply(p *wire.Packet, b []byte, want wire.Op) bool {
	// A node's JSON stats may exceed MaxValue.
	if err := p.Decode(b); err != nil && !(want == wire.OpStats && errors.Is(err, wire.ErrValLarge)) {
		return false
	}
	return p.Op == want || p.Op == wire.OpErr
}

// Call sends req to addr and waits for its reply: the reply op of req's op
// (wire.Op.Reply) or an ERR, with req's request id. It resends req, with the
// same id, each time a try's timeout passes, as r says, and then returns
// ErrTimeout. A reply's Key and Value are its own.
func (c *Conn) Call(ctx context.Context, addr netip.AddrPort, req *wire.Packet, r Retry) (*wire.Packet, error) {
	var p wire.Packet
	if _, err := c.Exchange(ctx, addr, req, r, &p, nil); err != nil {
		return nil, err
	}
	return &p, nil
}

// Exchange is Call without allocation: the reply datagram is appended to
// buf[:0], and the returned buffer is where reply's Key and Value point.
func (c *Conn) Exchange(ctx context.Context, addr netip.AddrPort, req *wire.Packet, r Retry, reply *wire.Packet, buf []byte) ([]byte, error) {
	w := c.borrow()
	defer c.giveBack(w)
	out, err := req.AppendEncode(w.req[:0])
	w.req = out
	if err != nil {
		return buf, err
	}
	to := udpbatch.PeerOf(addr, c.v4)
	w.id, w.want = req.ReqID, req.Op.Reply()
	c.mu.Lock()
	c.waits[w.id] = w
	c.mu.Unlock()
	timeout := r.Timeout
	for try := 0; r.Tries == 0 || try < r.Tries; try++ {
		if try > 0 {
			timeout = min(2*timeout, max(r.MaxTimeout, r.Timeout))
		}
		if err := c.send(c.seal(out), to); err != nil {
			c.cancel(w)
			return buf, err
		}
		switch err := c.await(ctx, w, timeout); err {
		case nil:
			buf = append(buf[:0], w.reply...)
			decodeReply(reply, buf, w.want)
			return buf, nil
		case ErrTimeout:
		default:
			c.cancel(w)
			return buf, err
		}
	}
	c.cancel(w)
	return buf, ErrTimeout
}

// seal is req with its trailer if it is a node op and c has a key: a
// fresh one for each try, since a receiver accepts each counter once.
func (c *Conn) seal(req []byte) []byte {
	a := c.auth.Load()
	if a == nil || !wire.Frame(req).Op().IsNodeOp() {
		return req
	}
	return a.Seal(slices.Clip(req))
}

// await waits up to timeout for w's reply.
func (c *Conn) await(ctx context.Context, w *waiter, timeout time.Duration) error {
	w.timer.Reset(timeout)
	defer w.timer.Stop()
	select {
	case <-w.ready:
		return nil
	case <-w.timer.C:
		return ErrTimeout
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closed:
		return net.ErrClosed
	}
}

// cancel stops waiting for w's reply: w leaves the waits, and a reply that
// came meanwhile is dropped.
func (c *Conn) cancel(w *waiter) {
	c.mu.Lock()
	if c.waits[w.id] == w {
		delete(c.waits, w.id)
	}
	c.mu.Unlock()
	select {
	case <-w.ready:
	default:
	}
}

func (c *Conn) borrow() *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.free); n > 0 {
		w := c.free[n-1]
		c.free = c.free[:n-1]
		return w
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{ready: make(chan struct{}, 1), timer: t}
}

func (c *Conn) giveBack(w *waiter) {
	c.mu.Lock()
	c.free = append(c.free, w)
	c.mu.Unlock()
}

// send queues a copy of b for to. The first call to find no send under way
// sends the queue, and what other calls queue meanwhile, in batches; the
// others return at once. A datagram the kernel refuses is lost, as on the
// wire, and its call's timeout resends it.
func (c *Conn) send(b []byte, to udpbatch.Peer) error {
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
	}
	c.smu.Lock()
	if c.queued.w.Full() {
		c.queued.w.Flush()
	}
	q := c.queued
	i := q.w.Len()
	q.bufs[i] = append(q.bufs[i][:0], b...)
	q.w.AddPeer(q.bufs[i], to)
	if c.flushing {
		c.smu.Unlock()
		return nil
	}
	c.flushing = true
	c.smu.Unlock()
	// The calls whose replies came in the same batch as this one's are
	// runnable now: let them queue their requests, so that they leave in
	// this call's sendmmsg rather than one each.
	runtime.Gosched()
	c.smu.Lock()
	for c.queued.w.Len() > 0 {
		q := c.queued
		c.queued, c.spare = c.spare, q
		c.smu.Unlock()
		q.w.Flush()
		c.smu.Lock()
	}
	c.flushing = false
	c.smu.Unlock()
	return nil
}
