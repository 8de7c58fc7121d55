// Package model is netdir's software data plane: the pure directory core
// (package directory) behind a UDP socket on the service address, acting as
// the ToR switch of an overlay on UDP.
//
// Clients send requests to the switch's address. The switch runs
// directory.Process on each datagram and
//   - forwards requests (GET, PUT, DEL) to the chosen node's address,
//     remembering which client sent each request id;
//   - relays replies, which nodes send back to the switch (it is the
//     request's source), to that client;
//   - sends accepted VSBs to every member of the VSB multicast group;
//   - drops everything else, counted: the directory's drops by reason, and
//     the model's own (Stats).
//
// Ingress ports: a datagram from a registered node's address enters on port
// PortOf(id), which the directory knows as a storage port, so VSBs are
// accepted only from node addresses; everything else enters on ClientPort.
//
// One goroutine (Run) reads batches with recvmmsg, processes each batch under
// the switch's mutex, and sends with sendmmsg; the control API takes the same
// mutex. Nothing on the packet path allocates in steady state.
package model

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// ClientPort is the ingress port of datagrams from addresses that are not
// registered nodes.
const ClientPort uint32 = 0

// PortOf is the ingress port of datagrams from node id's address.
func PortOf(id wire.NodeID) uint32 { return 1<<16 | uint32(id) }

// Node is a storage node's id and UDP address.
type Node struct {
	ID   wire.NodeID
	Addr netip.AddrPort
}

// NodesOf is a layout's node table, by id.
func NodesOf(m *layout.Map) []Node {
	var out []Node
	for _, id := range m.Nodes() {
		a, _ := m.Addr(id)
		out = append(out, Node{ID: id, Addr: a})
	}
	return out
}

// Config configures a Switch.
type Config struct {
	// Listen is the UDP address to serve on, such as "127.0.0.1:7420". An
	// IPv6 host makes an IPv6-only socket; anything else, IPv4. Node and
	// multicast addresses must be of the same family. Prefer a specific
	// address to a wildcard: datagrams leave from whatever source address
	// the kernel picks, and clients and nodes see that as the switch.
	Listen    string
	Nodes     []Node
	Directory directory.Config
	// Multicast is the VSB group: accepted VSBs are sent to each. May be empty.
	Multicast []netip.AddrPort
	// Pending is how many requests in flight the switch remembers in order to
	// relay their replies (rounded up to a power of two; default 65536). When
	// it is full the oldest is forgotten and counted in Stats.PendingEvicted.
	Pending int
	// Batch is the number of datagrams per recvmmsg and sendmmsg (default 64).
	Batch int
	// Mirror, if valid, gets a copy of every datagram the switch receives,
	// framed by AppendMirror, like a switch's mirror port. Of the same
	// family as Listen.
	Mirror netip.AddrPort
}

// Stats are the model's own counters, beside the directory's.
type Stats struct {
	Received       uint64 // datagrams read and processed
	Batches        uint64 // receive batches
	Forwarded      uint64 // requests sent to a node
	Relayed        uint64 // replies sent to their client
	VSBCopies      uint64 // copies of accepted VSBs sent to the multicast group
	Sent           uint64 // datagrams the kernel accepted
	SendErrors     uint64 // datagrams the kernel refused
	Oversize       uint64 // datagrams longer than wire.MaxPacket, dropped unprocessed
	UnknownReply   uint64 // replies whose request id is not pending, dropped
	NodeOps        uint64 // node-to-node ops sent to the switch (directory: Pass), dropped
	NoNodeAddr     uint64 // forwards to a node id with no registered address, dropped
	PendingEvicted uint64 // requests forgotten before their reply because the table was full
}

// Switch is the software data plane. Its methods are safe for concurrent use.
type Switch struct {
	conn *net.UDPConn
	addr netip.AddrPort
	v4   bool
	rx   *udpbatch.Reader
	tx   *udpbatch.Writer
	now  func() uint64 // the clock; tests replace it before Run

	mu     sync.Mutex // guards everything below
	dir    *directory.Directory
	pend   *pending
	nodes  []*net.UDPAddr                // by node id; nil when unregistered
	byAddr map[udpbatch.Peer]wire.NodeID // registered node addresses
	group  []*net.UDPAddr                // VSB multicast group
	mirror *net.UDPAddr                  // mirror-port collector; nil: none
	stats  Stats

	closeOnce sync.Once
	running   chan struct{} // closed when Run starts
	done      chan struct{} // closed when Run returns
	runOnce   sync.Once
}

// New binds the socket and builds the switch; Run serves it.
func New(cfg Config) (*Switch, error) {
	dir, err := directory.New(cfg.Directory)
	if err != nil {
		return nil, err
	}
	if cfg.Pending == 0 {
		cfg.Pending = 1 << 16
	}
	if cfg.Batch == 0 {
		cfg.Batch = 64
	}
	if cfg.Pending < 1 || cfg.Pending > 1<<24 {
		return nil, fmt.Errorf("model: pending table of %d: want 1..%d", cfg.Pending, 1<<24)
	}
	if cfg.Batch < 1 || cfg.Batch > 1024 {
		return nil, fmt.Errorf("model: batch of %d: want 1..1024", cfg.Batch)
	}
	ua, err := net.ResolveUDPAddr("udp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("model: listen address: %w", err)
	}
	network, v4 := "udp4", true
	if ua.IP != nil && ua.IP.To4() == nil {
		network, v4 = "udp6", false
	}
	conn, err := net.ListenUDP(network, ua)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	// Best effort: the kernel caps these at net.core.[rw]mem_max.
	_ = conn.SetReadBuffer(4 << 20)
	_ = conn.SetWriteBuffer(4 << 20)
	s := &Switch{
		conn:    conn,
		addr:    conn.LocalAddr().(*net.UDPAddr).AddrPort(),
		v4:      v4,
		now:     func() uint64 { return uint64(time.Now().UnixNano()) },
		dir:     dir,
		pend:    newPending(cfg.Pending),
		nodes:   make([]*net.UDPAddr, dir.Config().MaxNodes),
		byAddr:  make(map[udpbatch.Peer]wire.NodeID),
		running: make(chan struct{}),
		done:    make(chan struct{}),
	}
	if v4 {
		s.addr = netip.AddrPortFrom(s.addr.Addr().Unmap(), s.addr.Port())
	}
	if cfg.Mirror.IsValid() {
		s.mirror = net.UDPAddrFromAddrPort(cfg.Mirror)
	}
	s.rx, err = udpbatch.NewReader(conn, udpbatch.Buffers(cfg.Batch, udpbatch.MaxDatagram))
	if err != nil {
		conn.Close()
		return nil, err
	}
	// Room for a whole batch and one multicast copy each; a larger group
	// flushes mid-batch.
	s.tx = udpbatch.NewWriter(conn, v4, 2*cfg.Batch)
	if err := s.SetNodes(cfg.Nodes); err != nil {
		conn.Close()
		return nil, err
	}
	if err := s.SetMulticast(cfg.Multicast); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

// Addr is the address the switch serves on.
func (s *Switch) Addr() netip.AddrPort { return s.addr }

// Run serves until ctx is done or Close is called, and closes the socket
// when it returns. It returns nil on either kind of shutdown, and the error
// otherwise. Run may be called once.
func (s *Switch) Run(ctx context.Context) error {
	first := false
	s.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("model: Run called twice")
	}
	close(s.running)
	defer close(s.done)
	defer s.closeSocket()
	// Wake the blocked read when ctx ends.
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		n, err := s.rx.Read()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("model: receive: %w", err)
		}
		s.handleBatch(n)
	}
}

// handleBatch processes the n datagrams of the last read and sends what
// they produce. Counters are published after the send, so a caller that
// sees Received move knows that the packet's output has left.
func (s *Switch) handleBatch(n int) {
	now := s.now()
	s.mu.Lock()
	var st Stats
	for i := 0; i < n; i++ {
		b, from := s.rx.Msg(i)
		if s.mirror != nil {
			s.tx.Add(AppendMirror(nil, b, from.AddrPort(s.v4), now), s.mirror)
		}
		s.handle(b, from, now, &st)
	}
	s.mu.Unlock()

	sent0, errs0 := s.tx.Sent, s.tx.Errs
	s.tx.Flush()

	s.mu.Lock()
	s.stats.Received += uint64(n)
	s.stats.Batches++
	s.stats.Forwarded += st.Forwarded
	s.stats.Relayed += st.Relayed
	s.stats.VSBCopies += st.VSBCopies
	s.stats.Oversize += st.Oversize
	s.stats.UnknownReply += st.UnknownReply
	s.stats.NodeOps += st.NodeOps
	s.stats.NoNodeAddr += st.NoNodeAddr
	s.stats.Sent += s.tx.Sent - sent0
	s.stats.SendErrors += s.tx.Errs - errs0
	s.mu.Unlock()
}

// handle processes one datagram; s.mu is held.
func (s *Switch) handle(b []byte, from udpbatch.Peer, now uint64, st *Stats) {
	if len(b) > wire.MaxPacket {
		st.Oversize++
		return
	}
	port := ClientPort
	if id, ok := s.byAddr[from]; ok {
		port = PortOf(id)
	}
	v := s.dir.Process(b, port, now)
	switch v.Action {
	case directory.Forward:
		var to *net.UDPAddr
		if int(v.Node) < len(s.nodes) {
			to = s.nodes[v.Node]
		}
		if to == nil {
			st.NoNodeAddr++
			return
		}
		s.pend.put(wire.Frame(b).ReqID(), from)
		s.tx.Add(b, to)
		st.Forwarded++
	case directory.ToClient:
		to, ok := s.pend.take(wire.Frame(b).ReqID())
		if !ok {
			st.UnknownReply++
			return
		}
		s.tx.AddPeer(b, to)
		st.Relayed++
	case directory.Multicast:
		for _, m := range s.group {
			s.tx.Add(b, m)
		}
		st.VSBCopies += uint64(len(s.group))
	case directory.Pass:
		// Nodes talk to each other directly; a node op here is unexpected.
		st.NodeOps++
	}
}

func (s *Switch) closeSocket() {
	s.closeOnce.Do(func() { s.conn.Close() })
}

// Close stops Run, waits for it to return, and closes the socket. It is
// idempotent.
func (s *Switch) Close() error {
	s.closeSocket()
	select {
	case <-s.running:
		<-s.done
	default:
	}
	return nil
}
