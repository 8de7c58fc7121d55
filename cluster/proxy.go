package cluster

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/wire"
)

// Faults are what a Proxy does to each packet, in both directions.
type Faults struct {
	Loss    float64       // probability a packet is dropped
	Dup     float64       // probability a packet is sent twice
	Reorder float64       // probability a packet is held back by a random delay up to Jitter
	Jitter  time.Duration // bound of the reordering delay (default 2 ms)
	Delay   time.Duration // added to every packet
	// DropOps are ops whose packets are always dropped: a deterministic
	// loss, such as a chain's acks, for replaying a trail step by step.
	DropOps []wire.Op
	// Hold, if set, sees every netdir packet (up: towards the node) and
	// holds those it returns true for until Release: a delay of one
	// packet past chosen others, for replaying a trail step by step.
	Hold func(f wire.Frame, up bool) bool
}

// Proxy is a fault-injecting UDP proxy in front of one node. Packets from
// each source get their own upstream socket (as a NAT would), so the node's
// replies to that socket come back to the source.
type Proxy struct {
	ln       *net.UDPConn
	upstream atomic.Pointer[netip.AddrPort]
	faults   atomic.Pointer[Faults]

	rmu sync.Mutex
	rng *rand.Rand

	mu    sync.Mutex
	conns map[netip.AddrPort]*net.UDPConn

	closed chan struct{}
	wg     sync.WaitGroup

	Dropped, Duplicated, Delayed, Forwarded atomic.Uint64

	hmu  sync.Mutex
	held []heldPacket
}

// heldPacket is a packet Faults.Hold held, and how to send it on.
type heldPacket struct {
	b    []byte
	send func([]byte)
}

// Held is the number of packets held (Faults.Hold).
func (p *Proxy) Held() int {
	p.hmu.Lock()
	defer p.hmu.Unlock()
	return len(p.held)
}

// Release sends on, in the order they came, the held packets that match
// (all if match is nil), and returns how many.
func (p *Proxy) Release(match func(wire.Frame) bool) int {
	p.hmu.Lock()
	var out []heldPacket
	keep := p.held[:0]
	for _, h := range p.held {
		if match == nil || match(wire.Frame(h.b)) {
			out = append(out, h)
		} else {
			keep = append(keep, h)
		}
	}
	p.held = keep
	p.hmu.Unlock()
	for _, h := range out {
		p.Forwarded.Add(1)
		h.send(h.b)
	}
	return len(out)
}

// NewProxy listens on a loopback ephemeral port.
func NewProxy(seed uint64) (*Proxy, error) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	_ = ln.SetReadBuffer(4 << 20)
	p := &Proxy{ln: ln, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), conns: map[netip.AddrPort]*net.UDPConn{}, closed: make(chan struct{})}
	p.faults.Store(&Faults{})
	p.wg.Add(1)
	go p.loop()
	return p, nil
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() netip.AddrPort { return p.ln.LocalAddr().(*net.UDPAddr).AddrPort() }

// SetUpstream points the proxy at a node.
func (p *Proxy) SetUpstream(a netip.AddrPort) { p.upstream.Store(&a) }

// SetFaults changes the faults applied from now on.
func (p *Proxy) SetFaults(f Faults) {
	if f.Jitter <= 0 {
		f.Jitter = 2 * time.Millisecond
	}
	p.faults.Store(&f)
}

// Close stops the proxy.
func (p *Proxy) Close() {
	select {
	case <-p.closed:
		return
	default:
	}
	close(p.closed)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) loop() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, src, err := p.ln.ReadFromUDPAddrPort(buf)
		if err != nil {
			select {
			case <-p.closed:
				return
			default:
				continue
			}
		}
		up := p.upstream.Load()
		if up == nil {
			continue
		}
		c := p.conn(src)
		if c == nil {
			continue
		}
		dst := *up
		p.deliver(buf[:n], true, func(b []byte) { c.WriteToUDPAddrPort(b, dst) })
	}
}

func (p *Proxy) conn(src netip.AddrPort) *net.UDPConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[src]; c != nil {
		return c
	}
	select {
	case <-p.closed:
		return nil
	default:
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil
	}
	_ = c.SetReadBuffer(4 << 20)
	p.conns[src] = c
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, _, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				select {
				case <-p.closed:
					return
				default:
					continue
				}
			}
			p.deliver(buf[:n], false, func(b []byte) { p.ln.WriteToUDPAddrPort(b, src) })
		}
	}()
	return c
}

func (p *Proxy) deliver(b []byte, up bool, send func([]byte)) {
	f := p.faults.Load()
	if len(f.DropOps) > 0 && wire.Frame(b).Check() == nil && slices.Contains(f.DropOps, wire.Frame(b).Op()) {
		p.Dropped.Add(1)
		return
	}
	if f.Hold != nil && wire.Frame(b).Check() == nil && f.Hold(wire.Frame(b), up) {
		p.hmu.Lock()
		p.held = append(p.held, heldPacket{b: slices.Clone(b), send: send})
		p.hmu.Unlock()
		return
	}
	p.rmu.Lock()
	drop := f.Loss > 0 && p.rng.Float64() < f.Loss
	copies := 1
	if f.Dup > 0 && p.rng.Float64() < f.Dup {
		copies = 2
	}
	delays := [2]time.Duration{f.Delay, f.Delay}
	for i := range copies {
		if f.Reorder > 0 && p.rng.Float64() < f.Reorder {
			delays[i] += time.Duration(p.rng.Int64N(int64(f.Jitter)))
		}
	}
	p.rmu.Unlock()
	if drop {
		p.Dropped.Add(1)
		return
	}
	if copies == 2 {
		p.Duplicated.Add(1)
	}
	for i := range copies {
		p.Forwarded.Add(1)
		if delays[i] <= 0 {
			send(b)
			continue
		}
		p.Delayed.Add(1)
		c := append([]byte(nil), b...)
		time.AfterFunc(delays[i], func() {
			select {
			case <-p.closed:
			default:
				send(c)
			}
		})
	}
}
