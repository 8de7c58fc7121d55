package storagenode

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// udpEnd is a test's UDP socket on loopback: a client, or a chain member
// played by the test.
type udpEnd struct {
	t    *testing.T
	conn *net.UDPConn
}

func newUDPEnd(t *testing.T) *udpEnd {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &udpEnd{t: t, conn: c}
}

func (u *udpEnd) addr() netip.AddrPort { return u.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (u *udpEnd) send(to netip.AddrPort, h wire.Header, key, val []byte) {
	if _, err := u.conn.WriteToUDPAddrPort(wire.AppendNodeOp(nil, &h, key, val, nil), to); err != nil {
		u.t.Fatal(err)
	}
}

// recv waits (5 s at most) for the next packet that match accepts.
func (u *udpEnd) recv(what string, match func(*wire.NodePacket) bool) wire.NodePacket {
	u.t.Helper()
	buf := make([]byte, 70000)
	u.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		k, _, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			u.t.Fatalf("waiting for %s: %v", what, err)
		}
		var p wire.NodePacket
		if p.Decode(append([]byte(nil), buf[:k]...)) == nil && match(&p) {
			return p
		}
	}
}

// queueFull waits for the reply to request id and fails the test unless
// it is err queue-full.
func (u *udpEnd) queueFull(id uint64) {
	u.t.Helper()
	r := u.recv(fmt.Sprintf("the reply to request %d", id), func(p *wire.NodePacket) bool { return p.ReqID == id })
	if r.Op != wire.OpErr || r.Code != wire.CodeQueueFull {
		u.t.Fatalf("request %d: %s %s, want err queue-full (a full queue)", id, r.Op, r.Code)
	}
}

// startAmong starts node 1, one worker, in a layout of it and the test's
// ends (ids 2, 3, ... in order) in chains of replicas over 16 partitions,
// and returns it, the layout and its address.
func startAmong(t *testing.T, replicas int, ends []*udpEnd, tweak func(*Options)) (*Node, *layout.Map, netip.AddrPort) {
	t.Helper()
	self := newUDPEnd(t)
	addr := self.addr()
	self.conn.Close()
	nodes := []layout.Node{{ID: 1, Addr: addr.String()}}
	for i, e := range ends {
		nodes = append(nodes, layout.Node{ID: wire.NodeID(i + 2), Addr: e.addr().String()})
	}
	m, err := layout.New(layout.Config{PartitionBits: 4, Replicas: replicas, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{ID: 1, Dir: filepath.Join(t.TempDir(), "n"), Layout: m, Workers: 1, Current: true}
	if tweak != nil {
		tweak(&o)
	}
	return startReady(t, o), m, addr
}

// startReady starts a node with o, closed when the test ends, and waits
// until it serves.
func startReady(t *testing.T, o Options) *Node {
	t.Helper()
	n, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if !n.WaitReady(10 * time.Second) {
		t.Fatal("node not ready")
	}
	return n
}

// keyAt is a key whose chain in m has node 1 at position pos.
func keyAt(t *testing.T, m *layout.Map, pos int) []byte {
	t.Helper()
	for i := range 10000 {
		if k := fmt.Appendf(nil, "key-%d", i); m.ChainOf(wire.HashKey(k))[pos] == 1 {
			return k
		}
	}
	t.Fatalf("node 1 is at position %d of no chain", pos)
	return nil
}

// holdShard holds s's worker, once it is free, until release is called (by
// a cleanup at the latest, which runs before the node's Close, registered
// earlier).
func holdShard(t *testing.T, s *shard) (release func()) {
	held, free := make(chan struct{}), make(chan struct{})
	s.ch <- item{fn: func() { close(held); <-free }}
	<-held
	var once sync.Once
	release = func() { once.Do(func() { close(free) }) }
	t.Cleanup(release)
	return release
}

// waitFor polls cond until it holds; a bound of 10 s only keeps a broken
// node from hanging the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not after 10 s", what)
		}
	}
}

// TestChainAckPassesAFullQueue: a tail's chain ack that reaches the head
// while the key's shard queue is full of client requests is not dropped:
// it commits the key's version before the requests queued ahead of it are
// handled (writes of the same key among them), with no retransmission.
// Other node ops are still dropped at the full queue, and acks at a full
// control lane; both are counted. The test plays the tail and the client.
func TestChainAckPassesAFullQueue(t *testing.T) {
	tail, cl := newUDPEnd(t), newUDPEnd(t)
	const queueLen = 4
	n, m, headAddr := startAmong(t, 2, []*udpEnd{tail}, func(o *Options) {
		o.QueueLen, o.RetransmitAfter = queueLen, time.Hour // no retransmission within the test
	})
	key := keyAt(t, m, 0)
	h, part := wire.HashKey(key), m.Partition(wire.HashKey(key))
	s := n.admit.shards[0]
	put := func(id uint64) {
		cl.send(headAddr, wire.Header{Op: wire.OpPut, ReqID: id, KeyHash: h}, key, []byte("v"))
	}
	stats := func(id uint64) Stats {
		t.Helper()
		cl.send(headAddr, wire.Header{Op: wire.OpStats, ReqID: id}, nil, nil)
		r := cl.recv("the stats", func(p *wire.NodePacket) bool { return p.Op == wire.OpStats && p.ReqID == id })
		var st Stats
		if err := json.Unmarshal(r.Value, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}

	// The head takes a version of key and forwards it to the tail.
	put(1)
	w := tail.recv("the chain-write", func(p *wire.NodePacket) bool { return p.Op == wire.OpChainWrite && p.ReqID == 1 })
	v := w.Stamp

	// The worker is held; its queue fills with a probe, that reports
	// whether v is still pending when the worker reaches it, and client
	// writes of key behind it; one more is refused.
	release := holdShard(t, s)
	probed := make(chan string, 1)
	s.ch <- item{fn: func() {
		rec, err := s.getRecord(n.treeOf(part), part, key)
		_, pending := s.pending[pendKey{h, v}]
		probed <- fmt.Sprintf("pending %v, clean version %d (%v)", pending, rec.Clean.Ver, err)
	}}
	for i := range queueLen - 1 {
		put(uint64(10 + i))
	}
	put(20)
	cl.queueFull(20)

	// The tail's ack, and a version query (a node op that is no ack),
	// arrive at the full queue; a client write after them is refused, so
	// the head has dispatched both.
	ack := wire.Header{Op: wire.OpChainAck, KeyHash: h, Stamp: v, Node: 2, Epoch: m.Epoch()}
	tail.send(headAddr, ack, key, nil)
	tail.send(headAddr, wire.Header{Op: wire.OpVerQuery, ReqID: 7, KeyHash: h, Node: 2, Epoch: m.Epoch()}, key, nil)
	put(21)
	cl.queueFull(21)
	if st := stats(30); st.QueueFullNodeOps != 1 || st.QueueFullControl != 0 || st.QueueFull != 3 {
		t.Errorf("queue full: %d (node ops %d, acks %d), want 3 (the version query, no ack)", st.QueueFull, st.QueueFullNodeOps, st.QueueFullControl)
	}

	release()
	if got, want := <-probed, fmt.Sprintf("pending %v, clean version %d (<nil>)", false, v); got != want {
		t.Fatalf("when the worker reached the requests queued before the ack: %s, want %s", got, want)
	}
	// The queued writes of key took the versions after v.
	for range queueLen - 1 {
		tail.recv("a queued write's chain-write", func(p *wire.NodePacket) bool { return p.Op == wire.OpChainWrite && p.ReqID >= 10 })
	}

	// A full control lane drops the ack beyond it, counted.
	release = holdShard(t, s)
	for range queueLen + 1 {
		tail.send(headAddr, ack, key, nil)
	}
	st := stats(31)
	release()
	if st.QueueFullControl != 1 || st.Retransmits != 0 {
		t.Fatalf("%d acks dropped at a full control lane, %d retransmits: want 1, 0", st.QueueFullControl, st.Retransmits)
	}
}

// TestAckBeforeRetransmittedChainWrite: at a middle member an ack may be
// handled before a retransmitted copy of its chain-write queued ahead of
// it (the control lane is drained first). The ack commits the version and
// goes up to the head; the copy, handled after it, finds the version
// clean: the record stays clean and the copy goes on to the tail, which
// acks it again. The test plays the head and the tail.
func TestAckBeforeRetransmittedChainWrite(t *testing.T) {
	ends := []*udpEnd{newUDPEnd(t), newUDPEnd(t)} // nodes 2 and 3
	n, m, midAddr := startAmong(t, 3, ends, nil)
	key := keyAt(t, m, 1)
	h, part, ch := wire.HashKey(key), m.Partition(wire.HashKey(key)), m.ChainOf(wire.HashKey(key))
	head, tail := ends[ch[0]-2], ends[ch[2]-2]
	const v = 1
	write := wire.Header{Op: wire.OpChainWrite, ReqID: 5, KeyHash: h, Stamp: v, Node: ch[0], Epoch: m.Epoch()}
	ext := (&wire.ChainExt{Op: wire.OpPut, Addr: head.addr()}).Append(nil)
	sendWrite := func() {
		if _, err := head.conn.WriteToUDPAddrPort(wire.AppendNodeOp(nil, &write, key, []byte("v"), ext), midAddr); err != nil {
			t.Fatal(err)
		}
	}
	atTail := func(p *wire.NodePacket) bool { return p.Op == wire.OpChainWrite && p.Stamp == v }
	sendWrite()
	tail.recv("the chain-write at the tail", atTail)

	s := n.admit.shards[0]
	release := holdShard(t, s)
	sendWrite() // the head's retransmission, queued
	tail.send(midAddr, wire.Header{Op: wire.OpChainAck, KeyHash: h, Stamp: v, Node: ch[2], Epoch: m.Epoch()}, key, nil)
	waitFor(t, "the ack in the control lane", func() bool { return len(s.ctl) == 1 && len(s.ch) == 1 })
	probed := make(chan string, 1)
	s.ch <- item{fn: func() {
		rec, err := s.getRecord(n.treeOf(part), part, key)
		probed <- fmt.Sprintf("clean %d, dirty %d (%v)", rec.Clean.Ver, len(rec.Dirty), err)
	}}
	release()
	head.recv("the ack at the head", func(p *wire.NodePacket) bool { return p.Op == wire.OpChainAck && p.Stamp == v })
	if got, want := <-probed, fmt.Sprintf("clean %d, dirty 0 (<nil>)", v); got != want {
		t.Fatalf("after the ack and then the retransmitted chain-write: %s, want %s", got, want)
	}
	tail.recv("the retransmitted chain-write at the tail", atTail)
}

// TestPromoteDemotePassAFullQueue: a controller's promote and demote that
// reach a head whose key's shard queue is full of client requests go in
// the control lane: neither is dropped, and both are answered, in their
// order, once the worker runs. The test plays the tail, the client and
// the controller.
func TestPromoteDemotePassAFullQueue(t *testing.T) {
	tail, cl, ctl := newUDPEnd(t), newUDPEnd(t), newUDPEnd(t)
	const queueLen = 4
	n, m, headAddr := startAmong(t, 2, []*udpEnd{tail}, func(o *Options) {
		o.QueueLen, o.RetransmitAfter = queueLen, time.Hour
	})
	key := keyAt(t, m, 0)
	h := wire.HashKey(key)
	put := func(id uint64) {
		cl.send(headAddr, wire.Header{Op: wire.OpPut, ReqID: id, KeyHash: h}, key, []byte("v"))
	}
	release := holdShard(t, n.admit.shards[0])
	for i := range queueLen {
		put(uint64(10 + i))
	}
	put(20)
	cl.queueFull(20)
	promote := wire.NewPromote(key, nil, true)
	promote.ReqID, promote.Epoch = 40, m.Epoch()
	demote := wire.NewDemote(key)
	demote.ReqID, demote.Epoch = 41, m.Epoch()
	for _, p := range []wire.Packet{promote, demote} {
		ctl.send(headAddr, p.Header, p.Key, p.Value)
	}
	put(21)
	cl.queueFull(21)
	if st := n.Stats(); st.QueueFullNodeOps != 0 || st.QueueFullControl != 0 {
		t.Fatalf("dropped at the full queue: %d node ops, %d control ops; want none", st.QueueFullNodeOps, st.QueueFullControl)
	}
	release()
	for _, want := range []wire.Op{wire.OpPromote, wire.OpDemote} {
		r := ctl.recv("the controller's reply", func(p *wire.NodePacket) bool { return p.Node == 1 })
		if r.Op != want || r.Code != wire.CodeOK {
			t.Fatalf("reply %s %s (request %d), want %s ok", r.Op, r.Code, r.ReqID, want)
		}
	}
	if promoted, _ := n.copies.counts(); promoted != 0 {
		t.Fatalf("%d keys promoted after the promote and the demote, want 0", promoted)
	}
}
