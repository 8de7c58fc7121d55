package model

import (
	"net"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// batchWriter queues datagrams and sends them with one sendmmsg per batch
// through x/net's WriteBatch. Its messages, buffer slices and relay addresses
// are allocated once; add and flush allocate nothing.
type batchWriter struct {
	w interface {
		WriteBatch([]ipv4.Message, int) (int, error)
	}
	v4    bool
	msgs  []ipv4.Message
	bufs  [][1][]byte
	addrs []net.UDPAddr // for peers (relayed replies): IP points into ips
	ips   [][16]byte
	n     int
	// totals since creation, read by the owner
	sent, errs uint64
}

func newBatchWriter(c *net.UDPConn, v4 bool, size int) *batchWriter {
	w := &batchWriter{
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

func (w *batchWriter) full() bool { return w.n == len(w.msgs) }

// add queues b for to, which must stay unchanged until flush returns.
func (w *batchWriter) add(b []byte, to *net.UDPAddr) {
	if w.full() {
		w.flush()
	}
	w.bufs[w.n][0] = b
	w.msgs[w.n].Addr = to
	w.n++
}

// addPeer queues b for p.
func (w *batchWriter) addPeer(b []byte, p peer) {
	if w.full() {
		w.flush()
	}
	i := w.n
	w.ips[i] = p.ip
	a := &w.addrs[i]
	if w.v4 {
		a.IP = w.ips[i][:4]
	} else {
		a.IP = w.ips[i][:]
	}
	a.Port = int(p.port)
	w.bufs[i][0] = b
	w.msgs[i].Addr = a
	w.n++
}

// flush sends everything queued. A message the kernel refuses is counted and
// skipped; every round either sends or skips at least one message, so the
// loop ends.
func (w *batchWriter) flush() {
	for i := 0; i < w.n; {
		k, err := w.w.WriteBatch(w.msgs[i:w.n], 0)
		if k > 0 {
			i += k
			w.sent += uint64(k)
		}
		if err != nil || k <= 0 {
			w.errs++
			i++
		}
	}
	for i := 0; i < w.n; i++ {
		w.bufs[i][0] = nil
		w.msgs[i].Addr = nil
	}
	w.n = 0
}

// rxBuffers are the receive buffers of one batch, of size bytes each. The
// switch makes them one byte longer than wire.MaxPacket, so that a datagram
// that fills one is known to be too long.
func rxBuffers(n, size int) [][]byte {
	backing := make([]byte, n*size)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = backing[i*size : (i+1)*size : (i+1)*size]
	}
	return bufs
}
