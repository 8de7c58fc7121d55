package storagenode

import (
	"encoding/json"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/wire"
)

const (
	readBatch  = 32
	writeBatch = 32
	rxBufLen   = 64 << 10
	smallBuf   = 2048
)

var smallPool = sync.Pool{New: func() any { b := make([]byte, smallBuf); return &b }}

// item is one unit of a shard's queue: a packet, or a task to run on the
// shard (recovery merges), so that everything touching a key is serial.
type item struct {
	b    []byte
	pool *[]byte
	from netip.AddrPort
	fn   func()
	qos  bool      // admitted by QoS: tell it when handled
	at   time.Time // a client request's arrival, on a node with a processor (device.CPU)
	// counted: submitted through admission, and so in the node's load
	// until handled.
	counted bool
	// group holds the writes of the item's key that joined it at
	// admission (admitWrite), in arrival order: applied as one version.
	group []item
}

// shard is one worker and its queues; every packet about a key is handled
// by the key's shard.
type shard struct {
	n   *Node
	idx int
	ch  chan item
	// ctl is the control lane (controlOp: chain acks, a controller's
	// promotes and demotes), which the worker drains before ch and which
	// client requests never fill: an ack refused by a full ch left its
	// version dirty at the head until a retransmission, and a hot key's
	// versions piled up to the dirty cap.
	ctl     chan item
	tx      *udpbatch.Writer // the packets to send, after commit
	bufs    [][]byte         // tx's packets, one buffer each, reused
	scratch []byte           // see pkt
	sealer  *nodeauth.Sealer // seals the node ops sent (nil: no cluster key)
	kb      []byte           // a record's Pebble key, for reads
	commit  groupCommit      // the synced writes that tx waits for
	held    heldRecords
	chainShard
}

func newShard(n *Node, i int) *shard {
	s := &shard{n: n, idx: i, ch: make(chan item, n.opts.QueueLen), ctl: make(chan item, n.opts.QueueLen), chainShard: newChainShard(),
		tx: udpbatch.NewWriter(n.conn, n.v4, writeBatch), bufs: make([][]byte, writeBatch), scratch: make([]byte, 0, smallBuf),
		kb: make([]byte, 0, 5+wire.MaxKey), held: newHeldRecords(max(1, n.opts.MaxPending/max(1, n.opts.Workers)))}
	if n.auth != nil {
		s.sealer = n.auth.NewSealer()
	}
	return s
}

func (s *shard) run() {
	defer s.n.wg.Done()
	tick := time.NewTicker(s.n.opts.RetransmitAfter / 2)
	defer tick.Stop()
	for {
		select {
		case it := <-s.ctl:
			s.batch(it)
		case it := <-s.ch:
			s.batch(it)
		case <-tick.C:
			s.housekeep()
			s.flush()
			s.npend.Store(int64(len(s.pending)))
		case <-s.n.stop:
			s.commit.wait()
			return
		}
	}
}

// batch handles it and up to 64 more queued items, then sends what they
// made.
func (s *shard) batch(it item) {
	s.do(it)
	for range 64 {
		next, ok := s.next()
		if !ok {
			break
		}
		s.do(next)
	}
	s.flush()
	s.npend.Store(int64(len(s.pending)))
}

// next is the next queued item, if any: the control lane's first.
func (s *shard) next() (item, bool) {
	select {
	case it := <-s.ctl:
		return it, true
	default:
	}
	select {
	case it := <-s.ch:
		return it, true
	default:
		return item{}, false
	}
}

func (s *shard) do(it item) {
	if it.fn != nil {
		it.fn()
		return
	}
	if len(it.group) > 0 {
		s.handleGroup(it)
	} else {
		s.handle(it.b, it.from)
	}
	s.n.admit.handled(it)
}

// send queues a copy of b for the shard's next batched write (b may be
// reused at once: built in s.pkt(), say).
func (s *shard) send(to netip.AddrPort, b []byte) {
	if !to.IsValid() {
		return
	}
	if s.tx.Full() {
		s.flush()
	}
	i := s.tx.Len()
	s.bufs[i] = append(s.bufs[i][:0], b...)
	if s.sealer != nil && isNodeOp(b) {
		s.bufs[i] = s.sealer.Seal(s.bufs[i])
	}
	s.tx.AddPeer(s.bufs[i], udpbatch.PeerOf(to, s.n.v4))
}

// pkt is a buffer to build the next packet to send in; send copies it.
func (s *shard) pkt() []byte { return s.scratch[:0] }

// flush writes the shard's queued packets, with few sendmmsg calls
// (segmented where runs go to one address), once the writes they follow are
// synced. If a sync failed nothing leaves: no write is acknowledged or
// forwarded, and its senders retransmit.
func (s *shard) flush() {
	if err := s.commit.wait(); err != nil {
		s.n.log.Error("WAL sync", "err", err)
		s.tx.Discard()
		return
	}
	if s.tx.Len() == 0 {
		return
	}
	sent := s.tx.Sent
	s.tx.Flush()
	s.n.ctr.txPackets.Add(s.tx.Sent - sent)
}

// sendNow writes one packet immediately (reader and background goroutines).
func (n *Node) sendNow(to netip.AddrPort, b []byte) {
	if !to.IsValid() {
		return
	}
	n.conn.WriteToUDPAddrPort(n.sealNodeOp(b), to)
	n.ctr.txPackets.Add(1)
}

// readLoop receives datagrams in batches (recvmmsg). It serves the common
// read itself, where it arrives (fastGet), unless client requests wait in
// admission, and dispatches everything else to its key's shard or to
// admission; the replies it makes leave in one sendmmsg per batch.
func (n *Node) readLoop() {
	defer n.wg.Done()
	rx, err := udpbatch.NewReader(n.conn, udpbatch.Buffers(readBatch, rxBufLen))
	if err != nil {
		n.log.Error("receive", "err", err)
		return
	}
	g := newFastGet(n, readBatch)
	for {
		// Let the goroutines that the last replies made runnable (the
		// client's calls, the switch) run first: what they send
		// meanwhile joins this read rather than a read of its own, and
		// fewer reads find nothing and park.
		runtime.Gosched()
		k, err := rx.Read()
		if err != nil {
			if n.closing.Load() {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		n.ctr.rxPackets.Add(uint64(k))
		for i := range k {
			b, from := rx.Msg(i)
			clearClientReservation(b)
			if !n.admit.inline() || !g.serve(b, from) {
				n.dispatch(b, from.AddrPort(n.v4))
			}
		}
		g.flush()
	}
}

// dispatch routes one received packet: to its key's shard, or, for
// recovery and stats traffic, to the goroutines that serve those.
func (n *Node) dispatch(b []byte, from netip.AddrPort) {
	if wire.Frame(b).Check() != nil {
		return // not netdir traffic: nothing to answer
	}
	op := wire.Frame(b).Op()
	if op.IsNodeOp() {
		var ok bool
		if b, ok = n.openNodeOp(b, from); !ok {
			return
		}
	}
	switch op {
	case wire.OpGet, wire.OpPut, wire.OpDel,
		wire.OpChainWrite, wire.OpChainAck, wire.OpVerQuery, wire.OpVerAnswer,
		wire.OpCopy, wire.OpCopyAck, wire.OpPromote, wire.OpDemote:
	case wire.OpSync:
		n.recov.serve(b, from)
		return
	case wire.OpSyncData:
		n.recov.deliver(b)
		return
	case wire.OpStats:
		n.serveStats(b, from)
		return
	case wire.OpVSB, wire.OpGetReply, wire.OpPutReply, wire.OpDelReply, wire.OpErr:
		return // never answer replies
	default:
		n.ctr.errs.Add(1)
		n.sendNow(from, n.errPacket(b, wire.CodeUnknownOp, 0))
		return
	}
	h := wire.Frame(b).KeyHash()
	it := item{from: from}
	if len(b) <= smallBuf {
		p := smallPool.Get().(*[]byte)
		it.pool = p
		it.b = (*p)[:len(b)]
	} else {
		it.b = make([]byte, len(b))
	}
	copy(it.b, b)
	client := op == wire.OpGet || op == wire.OpPut || op == wire.OpDel
	if n.admit.submit(h, client, op, it) {
		return
	}
	if it.pool != nil {
		smallPool.Put(it.pool)
	}
	switch {
	case client:
		n.ctr.clientsFull.Add(1)
		n.sendNow(from, n.errPacket(b, wire.CodeQueueFull, 0))
	case controlOp(wire.Frame(b)):
		n.ctr.controlDrops.Add(1) // its lane is full too
	default:
		n.ctr.nodeOpDrops.Add(1) // its sender retransmits
	}
}

// errPacket builds an ERR reply to the request in b (at least a header).
func (n *Node) errPacket(b []byte, code wire.Code, stamp uint64) []byte {
	var h wire.Header
	if h.DecodeHeader(b) != nil {
		return nil
	}
	return n.replyPacket(&h, wire.OpErr, code, stamp, nil)
}

// replyPacket builds a reply to request header h: the request id, KeyHash,
// tenant and timestamp echoed; this node's id and load.
func (n *Node) replyPacket(h *wire.Header, op wire.Op, code wire.Code, stamp uint64, val []byte) []byte {
	return n.appendReply(make([]byte, 0, wire.PrefixLen+len(val)), h, op, code, stamp, val)
}

// appendReply appends replyPacket's reply to dst.
func (n *Node) appendReply(dst []byte, h *wire.Header, op wire.Op, code wire.Code, stamp uint64, val []byte) []byte {
	r := wire.Header{
		Op: op, Flags: h.Flags &^ wire.FlagStamped, Code: code, Tenant: h.Tenant, ReqID: h.ReqID,
		KeyHash: h.KeyHash, Stamp: stamp, Node: n.id, Load: n.load(), Epoch: n.layout().Epoch(),
		Timestamp: h.Timestamp,
	}
	return wire.AppendNodeOp(dst, &r, nil, val, nil)
}

func (n *Node) serveStats(b []byte, from netip.AddrPort) {
	var h wire.Header
	if h.DecodeHeader(b) != nil || h.Node != 0 {
		return // node != 0: a reply, never answered
	}
	js, _ := json.Marshal(n.Stats())
	if len(js) > wire.MaxValue {
		js = js[:0]
	}
	n.sendNow(from, n.replyPacket(&h, wire.OpStats, wire.CodeOK, 0, js))
}
