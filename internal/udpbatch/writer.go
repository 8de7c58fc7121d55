package udpbatch

import (
	"net"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Writer queues datagrams and sends them with one sendmmsg per batch
// through x/net's WriteBatch. Its messages, buffer slices and peer addresses
// are allocated once; Add, AddPeer and Flush allocate nothing.
type Writer struct {
	w interface {
		WriteBatch([]ipv4.Message, int) (int, error)
	}
	v4    bool
	msgs  []ipv4.Message
	bufs  [][1][]byte
	addrs []net.UDPAddr // for peers: IP points into ips
	ips   [][16]byte
	n     int
	// Totals since creation, read by the owner: datagrams the kernel
	// accepted and refused.
	Sent, Errs uint64
}

// NewWriter is a Writer of up to size datagrams per batch on c, an IPv4
// (v4) or IPv6 socket.
func NewWriter(c *net.UDPConn, v4 bool, size int) *Writer {
	w := &Writer{
		v4:    v4,
		msgs:  make([]ipv4.Message, size),
		bufs:  make([][1][]byte, size),
		addrs: make([]net.UDPAddr, size),
		ips:   make([][16]byte, size),
	}
	if v4 {
		w.w = ipv4.NewPacketConn(c)
	} else {
		w.w = ipv6.NewPacketConn(c)
	}
	for i := range w.msgs {
		w.msgs[i].Buffers = w.bufs[i][:]
	}
	return w
}

// Len is the number of datagrams queued.
func (w *Writer) Len() int { return w.n }

// Full reports whether the next Add flushes first.
func (w *Writer) Full() bool { return w.n == len(w.msgs) }

// Add queues b for to; b and to must stay unchanged until Flush returns.
func (w *Writer) Add(b []byte, to *net.UDPAddr) {
	if w.Full() {
		w.Flush()
	}
	w.bufs[w.n][0] = b
	w.msgs[w.n].Addr = to
	w.n++
}

// AddPeer queues b for p; b must stay unchanged until Flush returns.
func (w *Writer) AddPeer(b []byte, p Peer) {
	if w.Full() {
		w.Flush()
	}
	i := w.n
	w.ips[i] = p.IP
	a := &w.addrs[i]
	if w.v4 {
		a.IP = w.ips[i][:4]
	} else {
		a.IP = w.ips[i][:]
	}
	a.Port = int(p.Port)
	w.bufs[i][0] = b
	w.msgs[i].Addr = a
	w.n++
}

// Flush sends everything queued. A message the kernel refuses is counted and
// skipped; every round either sends or skips at least one message, so the
// loop ends.
func (w *Writer) Flush() {
	for i := 0; i < w.n; {
		k, err := w.w.WriteBatch(w.msgs[i:w.n], 0)
		if k > 0 {
			i += k
			w.Sent += uint64(k)
		}
		if err != nil || k <= 0 {
			w.Errs++
			i++
		}
	}
	for i := 0; i < w.n; i++ {
		w.bufs[i][0] = nil
		w.msgs[i].Addr = nil
	}
	w.n = 0
}

// Buffers are the receive buffers of one batch, n of size bytes each. Make
// them one byte longer than the longest datagram expected, so that a
// datagram that fills one is known to be too long.
func Buffers(n, size int) [][]byte {
	backing := make([]byte, n*size)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = backing[i*size : (i+1)*size : (i+1)*size]
	}
	return bufs
}
