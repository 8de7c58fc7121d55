package udpbatch

import (
	"net"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Writer queues datagrams and sends them with one sendmmsg per batch
// through x/net's WriteBatch. A flush sends the datagrams grouped by
// destination: each destination's in the order they were queued, the
// destinations in the order of their first datagram. Where the kernel
// offers UDP segmentation offload (Linux), a destination's consecutive
// datagrams, all of one size but the last, leave as one message that the
// kernel splits (UDP_SEGMENT): one pass through the sending stack for up to
// maxSegments datagrams, and on loopback one delivery to a reader that takes
// them whole (UDP_GRO, see Reader). Grouping makes those runs long where a
// batch interleaves destinations (a switch forwarding to several nodes and
// relaying to clients). Its messages, buffer slices and addresses are
// allocated once; Add, AddPeer and Flush allocate nothing.
type Writer struct {
	w interface {
		WriteBatch([]ipv4.Message, int) (int, error)
	}
	v4   bool
	gso  bool     // the socket takes UDP_SEGMENT
	all  [][]byte // the datagrams queued, in order
	dst  []int32  // each queued datagram's index in dests
	cnt  []int32  // datagrams per destination, then their offsets in sorted
	sort [][]byte // all, grouped by destination at Flush
	dsts []dest   // this batch's destinations
	msgs []ipv4.Message
	segs []int    // datagrams in each message
	oob  [][]byte // each message's UDP_SEGMENT control message
	// Totals since creation, read by the owner: datagrams the kernel
	// accepted and refused.
	Sent, Errs uint64
}

// dest is a destination of the batch: an address given as one (to), or a
// peer and the address made from it (addr, whose IP points into ip).
type dest struct {
	to   *net.UDPAddr
	peer Peer
	ip   [16]byte
	addr net.UDPAddr
}

// maxSegments bounds the datagrams of one segmented message (the kernel's
// UDP_MAX_SEGMENTS), and maxGSOBytes its payload. A datagram's destination
// is looked for among the batch's last maxLookback destinations; one further
// back (a batch to many addresses) starts a destination of its own.
const (
	maxSegments = 64
	maxGSOBytes = 65000
	maxLookback = 16
)

// NewWriter is a Writer of up to size datagrams per batch on c, an IPv4
// (v4) or IPv6 socket.
func NewWriter(c *net.UDPConn, v4 bool, size int) *Writer {
	w := &Writer{
		v4:   v4,
		gso:  gsoSupported(c),
		all:  make([][]byte, 0, size),
		dst:  make([]int32, 0, size),
		cnt:  make([]int32, size+1),
		sort: make([][]byte, size),
		dsts: make([]dest, 0, size),
		msgs: make([]ipv4.Message, size),
		segs: make([]int, size),
		oob:  make([][]byte, size),
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
func (w *Writer) Len() int { return len(w.all) }

// Full reports whether the next Add flushes first.
func (w *Writer) Full() bool { return len(w.all) == cap(w.all) }

// Add queues b for to; b and to must stay unchanged until Flush returns.
func (w *Writer) Add(b []byte, to *net.UDPAddr) {
	if w.Full() {
		w.Flush()
	}
	d := len(w.dsts)
	for i := d - 1; i >= max(0, d-maxLookback); i-- {
		if w.dsts[i].to == to {
			w.queue(b, i)
			return
		}
	}
	w.dsts = append(w.dsts, dest{to: to})
	w.queue(b, d)
}

// AddPeer queues b for p; b must stay unchanged until Flush returns.
func (w *Writer) AddPeer(b []byte, p Peer) {
	if w.Full() {
		w.Flush()
	}
	d := len(w.dsts)
	for i := d - 1; i >= max(0, d-maxLookback); i-- {
		if w.dsts[i].to == nil && w.dsts[i].peer == p {
			w.queue(b, i)
			return
		}
	}
	w.dsts = w.dsts[:d+1]
	e := &w.dsts[d]
	e.to, e.peer, e.ip = nil, p, p.IP
	if w.v4 {
		e.addr.IP = e.ip[:4]
	} else {
		e.addr.IP = e.ip[:]
	}
	e.addr.Port = int(p.Port)
	w.queue(b, d)
}

func (w *Writer) queue(b []byte, d int) {
	w.all = append(w.all, b)
	w.dst = append(w.dst, int32(d))
}

// group sorts the queued datagrams by destination into w.sort (stable: a
// destination's keep their order) and builds the messages; it returns how
// many. A batch to one destination (a client's, or a switch forwarding to
// one node) is in order already and is not sorted.
func (w *Writer) group() int {
	nd := len(w.dsts)
	cnt := w.cnt[:nd+1]
	sorted := w.all
	if nd > 1 {
		clear(cnt)
		for _, d := range w.dst {
			cnt[d+1]++
		}
		for d := 1; d <= nd; d++ {
			cnt[d] += cnt[d-1]
		}
		// cnt[d] is now where destination d's datagrams start; it
		// advances as they are placed, ending where d+1's start.
		for i, b := range w.all {
			d := w.dst[i]
			w.sort[cnt[d]] = b
			cnt[d]++
		}
		sorted = w.sort[:len(w.all)]
	} else if nd == 1 {
		cnt[0] = int32(len(w.all))
	}
	n, start := 0, 0
	for d := 0; d < nd; d++ {
		end := int(cnt[d])
		var addr *net.UDPAddr
		if e := &w.dsts[d]; e.to != nil {
			addr = e.to
		} else {
			addr = &e.addr
		}
		for start < end {
			k := w.run(sorted, start, end)
			w.msgs[n].Buffers = sorted[start : start+k]
			w.msgs[n].Addr = addr
			w.msgs[n].OOB = nil
			if k > 1 {
				w.msgs[n].OOB = putSegmentCmsg(w.oob[n], len(sorted[start]))
			}
			w.segs[n] = k
			n++
			start += k
		}
	}
	return n
}

// run is how many of sorted[start:end] (one destination's) leave as one
// message: with segmentation, those of the first one's size and then at most
// one shorter, within maxSegments and maxGSOBytes.
func (w *Writer) run(sorted [][]byte, start, end int) int {
	first := len(sorted[start])
	if !w.gso || first == 0 {
		return 1
	}
	k, bytes := 1, first
	for start+k < end && k < maxSegments {
		l := len(sorted[start+k])
		if l == 0 || l > first || bytes+l > maxGSOBytes {
			break
		}
		k++
		bytes += l
		if l < first {
			break // a shorter one ends the message
		}
	}
	return k
}

// Flush sends everything queued. A message the kernel refuses is counted
// (all its datagrams) and skipped; every round either sends or skips at
// least one message, so the loop ends. A segmented message refused turns
// segmentation off for the writer's later batches.
func (w *Writer) Flush() {
	n := w.group()
	for i := 0; i < n; {
		k, err := w.w.WriteBatch(w.msgs[i:n], 0)
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
	for i := range n {
		w.msgs[i].Buffers = nil
		w.msgs[i].Addr = nil
		w.msgs[i].OOB = nil
	}
	w.Discard()
}

// Discard drops everything queued, unsent.
func (w *Writer) Discard() {
	clear(w.sort[:len(w.all)])
	clear(w.all)
	for i := range w.dsts {
		w.dsts[i].to = nil
	}
	w.all, w.dst, w.dsts = w.all[:0], w.dst[:0], w.dsts[:0]
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
