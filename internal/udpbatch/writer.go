package udpbatch

import (
	"net"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Writer queues datagrams and sends them with one sendmmsg per batch
// through x/net's WriteBatch. Where the kernel offers UDP segmentation
// offload (Linux), consecutive datagrams to one address, all of one size but
// the last, leave as one message that the kernel splits (UDP_SEGMENT): one
// pass through the sending stack for up to maxSegments datagrams, and on
// loopback one delivery to a reader that takes them whole (UDP_GRO, see
// Reader). Its messages, buffer slices and addresses are allocated once;
// Add, AddPeer and Flush allocate nothing.
type Writer struct {
	w interface {
		WriteBatch([]ipv4.Message, int) (int, error)
	}
	v4    bool
	gso   bool           // the socket takes UDP_SEGMENT
	msgs  []ipv4.Message // msgs[:n] queued
	segs  []int          // datagrams in each message
	all   [][]byte       // the datagrams queued, in order; a message's are consecutive
	oob   [][]byte       // each message's UDP_SEGMENT control message
	addrs []net.UDPAddr  // for peers: IP points into ips
	ips   [][16]byte
	peer  []Peer         // each message's peer, when it has one
	to    []*net.UDPAddr // each message's address, when given as one
	n     int            // messages
	count int            // datagrams
	bytes int            // bytes of the last message
	// Totals since creation, read by the owner: datagrams the kernel
	// accepted and refused.
	Sent, Errs uint64
}

// maxSegments bounds the datagrams of one segmented message (the kernel's
// UDP_MAX_SEGMENTS), and maxGSOBytes its payload.
const (
	maxSegments = 64
	maxGSOBytes = 65000
)

// NewWriter is a Writer of up to size datagrams per batch on c, an IPv4
// (v4) or IPv6 socket.
func NewWriter(c *net.UDPConn, v4 bool, size int) *Writer {
	w := &Writer{
		v4:    v4,
		gso:   gsoSupported(c),
		msgs:  make([]ipv4.Message, size),
		segs:  make([]int, size),
		all:   make([][]byte, size),
		oob:   make([][]byte, size),
		addrs: make([]net.UDPAddr, size),
		ips:   make([][16]byte, size),
		peer:  make([]Peer, size),
		to:    make([]*net.UDPAddr, size),
	}
	if v4 {
		w.w = ipv4.NewPacketConn(c)
	} else {
		w.w = ipv6.NewPacketConn(c)
	}
	for i := range w.oob {
		w.oob[i] = make([]byte, segmentCmsgLen)
	}
	return w
}

// Len is the number of datagrams queued.
func (w *Writer) Len() int { return w.count }

// Full reports whether the next Add flushes first.
func (w *Writer) Full() bool { return w.count == len(w.all) }

// Add queues b for to; b and to must stay unchanged until Flush returns.
func (w *Writer) Add(b []byte, to *net.UDPAddr) {
	if w.Full() {
		w.Flush()
	}
	if w.joins(b) && w.to[w.n-1] == to {
		w.append(b)
		return
	}
	i := w.open(b)
	w.to[i] = to
	w.msgs[i].Addr = to
}

// AddPeer queues b for p; b must stay unchanged until Flush returns.
func (w *Writer) AddPeer(b []byte, p Peer) {
	if w.Full() {
		w.Flush()
	}
	if w.joins(b) && w.to[w.n-1] == nil && w.peer[w.n-1] == p {
		w.append(b)
		return
	}
	i := w.open(b)
	w.peer[i] = p
	w.ips[i] = p.IP
	a := &w.addrs[i]
	if w.v4 {
		a.IP = w.ips[i][:4]
	} else {
		a.IP = w.ips[i][:]
	}
	a.Port = int(p.Port)
	w.msgs[i].Addr = a
}

// joins reports whether b may join the last message as one more segment:
// the message's segments are all of the first one's size, and b is no
// longer.
func (w *Writer) joins(b []byte) bool {
	if !w.gso || w.n == 0 {
		return false
	}
	i := w.n - 1
	first := w.all[w.count-w.segs[i]]
	last := w.all[w.count-1]
	return w.segs[i] < maxSegments && len(last) == len(first) && len(b) <= len(first) &&
		len(b) > 0 && w.bytes+len(b) <= maxGSOBytes
}

func (w *Writer) append(b []byte) {
	w.all[w.count] = b
	w.count++
	w.segs[w.n-1]++
	w.bytes += len(b)
	w.msgs[w.n-1].Buffers = w.all[w.count-w.segs[w.n-1] : w.count]
}

// open starts message i with b; the caller sets its address.
func (w *Writer) open(b []byte) int {
	i := w.n
	w.n++
	w.all[w.count] = b
	w.count++
	w.segs[i] = 1
	w.bytes = len(b)
	w.to[i] = nil
	w.msgs[i].Buffers = w.all[w.count-1 : w.count]
	w.msgs[i].OOB = nil
	return i
}

// Flush sends everything queued. A message the kernel refuses is counted
// (all its datagrams) and skipped; every round either sends or skips at
// least one message, so the loop ends. A segmented message refused turns
// segmentation off for the writer's later batches.
func (w *Writer) Flush() {
	for i := 0; i < w.n; i++ {
		if w.segs[i] > 1 {
			w.msgs[i].OOB = putSegmentCmsg(w.oob[i], len(w.msgs[i].Buffers[0]))
		}
	}
	for i := 0; i < w.n; {
		k, err := w.w.WriteBatch(w.msgs[i:w.n], 0)
		for _, s := range w.segs[i : i+max(k, 0)] {
			w.Sent += uint64(s)
		}
		if k > 0 {
			i += k
		}
		if err != nil || k <= 0 {
			if w.segs[i] > 1 {
				w.gso = false
			}
			w.Errs += uint64(w.segs[i])
			i++
		}
	}
	clear(w.all[:w.count])
	for i := 0; i < w.n; i++ {
		w.msgs[i].Buffers = nil
		w.msgs[i].Addr = nil
		w.msgs[i].OOB = nil
		w.to[i] = nil
	}
	w.n, w.count, w.bytes = 0, 0, 0
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
