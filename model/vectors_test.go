package model

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/directory/vectors"
	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/wire"
)

// TestVectors holds the model to the shared vector suite over real UDP on
// loopback.
func TestVectors(t *testing.T) {
	p := &udpPlane{t: t}
	t.Cleanup(p.close)
	vectors.Run(t, p)
}

// udpPlane runs each vector through a live Switch on 127.0.0.1.
//
// Mapping of the vectors' namespaces onto UDP addresses. In the vectors,
// ingress ports and node ids are distinct namespaces; the model derives the
// port from the source address (a registered node's address is a storage
// port, anything else a client port), so:
//
//   - Node ids named as forward targets (partition chains, LocationLists)
//     are fake node sockets, registered with the switch under that id. A
//     forward is observed as the datagram arriving on that node's socket,
//     and the verdict's node is the socket's id.
//   - Vector port P is a socket of its own. While P is classified storage,
//     its socket is registered with the switch as node id MaxNodes-1-P, an
//     id the vectors never route to (the plane refuses a vector that
//     routes to it), so datagrams from it enter on a storage port; otherwise
//     it is an unregistered, client address. The directory only ever asks
//     whether a port is storage, so this preserves every verdict.
//   - Replies: a reply is relayed to the client whose request id is pending.
//     Vectors send replies without the request having passed this switch, so
//     before a reply the plane records its request id as pending from the
//     plane's client socket, as if that client had sent the request; the
//     relayed datagram is then observed there.
//   - VSBs: the multicast group is one agent socket.
//   - Node ops: the directory passes them (Pass); the model by design drops
//     them (a node op arriving at the switch is unexpected in the overlay)
//     and counts them. The plane observes Pass from the directory's counter
//     and returns the input unchanged as the output, which is what Pass
//     means; it does not observe those bytes on a socket.
//   - Drops are observed by the counters: the plane waits until the switch
//     reports the datagram processed (Stats.Received, published after the
//     batch's sends), then reads the drop reason from the counter that moved.
//
// Clock: the switch reads its clock once per batch; the plane replaces that
// clock (an unexported field, before Run) with one that returns the vector's
// now, so the "clock" feature is supported. With the real clock no vector
// that checks a forwarded header's ts could pass.
type udpPlane struct {
	t     *testing.T
	sw    *Switch
	errc  chan error
	clock atomic.Uint64
	max   int // the directory's MaxNodes

	out    chan arrival
	nodes  map[wire.NodeID]*fake // forward targets
	ports  map[uint32]*fake      // sockets standing for vector ports
	stor   map[uint32]bool       // vector ports classified storage
	client *fake                 // where relayed replies go
	agent  *fake                 // the VSB multicast group
}

type fakeKind uint8

const (
	kindNode fakeKind = iota
	kindPort
	kindClient
	kindAgent
)

type fake struct {
	conn *net.UDPConn
	kind fakeKind
	id   wire.NodeID // kindNode
	port uint32      // kindPort
}

type arrival struct {
	f *fake
	b []byte
}

func (p *udpPlane) fake(kind fakeKind) *fake {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		p.t.Fatal(err)
	}
	f := &fake{conn: c, kind: kind}
	go func() {
		for {
			buf := make([]byte, wire.MaxPacket+1)
			n, _, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // closed
			}
			p.out <- arrival{f, buf[:n]}
		}
	}()
	return f
}

func (f *fake) addr() netip.AddrPort { return addrOf(f.conn) }

func (f *fake) String() string {
	switch f.kind {
	case kindNode:
		return fmt.Sprintf("node %d", f.id)
	case kindPort:
		return fmt.Sprintf("port %d", f.port)
	case kindClient:
		return "the client"
	}
	return "the multicast agent"
}

func (p *udpPlane) Supports(feature string) bool {
	switch feature {
	case "clock", "coarse", "host", "policy", "sketch":
		return true
	}
	return false
}

func (p *udpPlane) close() {
	p.stop()
	for _, f := range p.nodes {
		f.conn.Close()
	}
	for _, f := range p.ports {
		f.conn.Close()
	}
	if p.client != nil {
		p.client.conn.Close()
		p.agent.conn.Close()
	}
}

func (p *udpPlane) stop() {
	if p.sw != nil {
		p.sw.Close()
		if err := <-p.errc; err != nil {
			p.t.Errorf("Run: %v", err)
		}
		p.sw = nil
	}
}

// Reset starts a fresh switch. Sockets persist across resets; the fake nodes
// are registered again, and every port is a client port again.
func (p *udpPlane) Reset(cfg directory.Config) error {
	if p.out == nil {
		p.out = make(chan arrival, 64)
		p.nodes = map[wire.NodeID]*fake{}
		p.ports = map[uint32]*fake{}
		p.client = p.fake(kindClient)
		p.agent = p.fake(kindAgent)
	}
	p.stop()
	if err := p.drain(); err != nil {
		return err
	}
	p.stor = map[uint32]bool{}
	sw, err := New(Config{Listen: "127.0.0.1:0", Directory: cfg, Multicast: []netip.AddrPort{p.agent.addr()}})
	if err != nil {
		return err
	}
	sw.now = p.clock.Load
	p.max = sw.DirectoryConfig().MaxNodes
	p.sw, p.errc = sw, make(chan error, 1)
	go func() { p.errc <- sw.Run(context.Background()) }()
	return p.register()
}

// register installs the node table: the fake nodes, and the sockets of
// storage ports.
func (p *udpPlane) register() error {
	var nodes []Node
	for id, f := range p.nodes {
		nodes = append(nodes, Node{ID: id, Addr: f.addr()})
	}
	for port := range p.stor {
		id, err := p.portNode(port)
		if err != nil {
			return err
		}
		if _, ok := p.nodes[id]; ok {
			return fmt.Errorf("plane: port %d's node id %d is also a vector node id", port, id)
		}
		nodes = append(nodes, Node{ID: id, Addr: p.port(port).addr()})
	}
	return p.sw.SetNodes(nodes)
}

// portNode is the node id that stands for storage port P.
func (p *udpPlane) portNode(port uint32) (wire.NodeID, error) {
	if int(port) >= p.max/2 {
		return 0, fmt.Errorf("plane: port %d: this plane maps ports below %d", port, p.max/2)
	}
	return wire.NodeID(p.max - 1 - int(port)), nil
}

func (p *udpPlane) port(port uint32) *fake {
	f, ok := p.ports[port]
	if !ok {
		f = p.fake(kindPort)
		f.port = port
		p.ports[port] = f
	}
	return f
}

// ensureNodes makes sockets for node ids a vector may route to.
func (p *udpPlane) ensureNodes(ids []wire.NodeID) error {
	added := false
	for _, id := range ids {
		if _, ok := p.nodes[id]; ok || int(id) >= p.max {
			continue // an id past MaxNodes: the directory refuses it
		}
		for port := range p.stor {
			if pid, _ := p.portNode(port); pid == id {
				return fmt.Errorf("plane: vector node id %d is the id this plane gives storage port %d", id, port)
			}
		}
		f := p.fake(kindNode)
		f.id = id
		p.nodes[id] = f
		added = true
	}
	if added {
		return p.register()
	}
	return nil
}

func (p *udpPlane) SetPartition(part uint32, chain []wire.NodeID, b []uint8) error {
	if err := p.ensureNodes(chain); err != nil {
		return err
	}
	return p.sw.SetPartition(part, chain, b)
}

func (p *udpPlane) SetPort(port uint32, kind directory.PortKind) error {
	if _, err := p.portNode(port); err != nil {
		return err
	}
	if kind == directory.PortStorage {
		p.stor[port] = true
	} else {
		delete(p.stor, port)
	}
	return p.register()
}

func (p *udpPlane) Insert(h wire.KeyHash, locs []wire.NodeID, r int, ver uint64, b []uint8) error {
	if err := p.ensureNodes(locs); err != nil {
		return err
	}
	_, err := p.sw.Insert(h, locs, r, ver, b)
	return err
}

func (p *udpPlane) Evict(h wire.KeyHash) error { return p.sw.Evict(h) }
func (p *udpPlane) SetSlotBuckets(h wire.KeyHash, b []uint8) error {
	return p.sw.SetSlotBuckets(h, b)
}
func (p *udpPlane) SetNodeStats(n wire.NodeID, s directory.NodeStats) error {
	return p.sw.SetNodeStats(n, s)
}
func (p *udpPlane) Lookup(h wire.KeyHash) (directory.Slot, bool, error) {
	s, ok := p.sw.Lookup(h)
	return s, ok, nil
}
func (p *udpPlane) Node(n wire.NodeID) (directory.NodeStats, error) { return p.sw.NodeStats(n), nil }
func (p *udpPlane) Counters() (directory.Counters, error) {
	c, _ := p.sw.Counters()
	return c, nil
}
func (p *udpPlane) SketchEstimate(h wire.KeyHash) (uint32, error) {
	return p.sw.SketchEstimate(h), nil
}
func (p *udpPlane) ResetSketch() error { p.sw.ResetSketch(); return nil }

// drain fails if a datagram came out that no verdict accounted for.
func (p *udpPlane) drain() error {
	select {
	case a := <-p.out:
		return fmt.Errorf("plane: unexpected %d-byte datagram on %s", len(a.b), a.f)
	default:
		return nil
	}
}

func isReply(pkt []byte) bool {
	if len(pkt) < wire.HeaderLen {
		return false
	}
	switch wire.Frame(pkt).Op() {
	case wire.OpGetReply, wire.OpPutReply, wire.OpDelReply, wire.OpErr:
		return true
	}
	return false
}

// Process sends pkt from port's socket at time now, waits until the switch
// has processed it, and reports where it came out.
func (p *udpPlane) Process(pkt []byte, port uint32, now uint64) (directory.Verdict, []byte, error) {
	if err := p.drain(); err != nil {
		return directory.Verdict{}, nil, err
	}
	p.clock.Store(now)
	dc0, st0 := p.sw.Counters()
	if isReply(pkt) {
		// As if the plane's client had sent the request.
		p.sw.mu.Lock()
		p.sw.pend.put(wire.Frame(pkt).ReqID(), udpbatch.PeerOf(p.client.addr(), true))
		p.sw.mu.Unlock()
	}
	in := append([]byte(nil), pkt...)
	if _, err := p.port(port).conn.WriteToUDPAddrPort(pkt, p.sw.Addr()); err != nil {
		return directory.Verdict{}, nil, err
	}
	var dc directory.Counters
	var st Stats
	for deadline := time.Now().Add(wait); ; {
		dc, st = p.sw.Counters()
		if st.Received > st0.Received {
			break
		}
		if time.Now().After(deadline) {
			return directory.Verdict{}, nil, fmt.Errorf("plane: the switch did not process the datagram in %v", wait)
		}
		time.Sleep(50 * time.Microsecond)
	}
	if dc.DropTotal > dc0.DropTotal {
		for _, r := range directory.Reasons() {
			if dc.Drops[r] > dc0.Drops[r] {
				return directory.Verdict{Action: directory.Drop, Reason: r}, nil, nil
			}
		}
	}
	switch {
	case dc.Passed > dc0.Passed && st.NodeOps > st0.NodeOps:
		return directory.Verdict{Action: directory.Pass}, in, nil
	case st.UnknownReply > st0.UnknownReply:
		return directory.Verdict{}, nil, fmt.Errorf("plane: the model dropped the reply: request id not pending")
	case st.NoNodeAddr > st0.NoNodeAddr:
		return directory.Verdict{}, nil, fmt.Errorf("plane: the model dropped the request: no address for its node")
	case st.Oversize > st0.Oversize:
		return directory.Verdict{}, nil, fmt.Errorf("plane: the model dropped an oversize datagram")
	case st.SendErrors > st0.SendErrors:
		return directory.Verdict{}, nil, fmt.Errorf("plane: the switch failed to send")
	}
	var a arrival
	select {
	case a = <-p.out:
	case <-time.After(wait):
		return directory.Verdict{}, nil, fmt.Errorf("plane: the switch processed the datagram without a drop, but nothing came out in %v", wait)
	}
	var v directory.Verdict
	var moved bool
	switch a.f.kind {
	case kindNode:
		v = directory.Verdict{Action: directory.Forward, Node: a.f.id}
		moved = st.Forwarded == st0.Forwarded+1
	case kindClient:
		v = directory.Verdict{Action: directory.ToClient}
		moved = st.Relayed == st0.Relayed+1
	case kindAgent:
		v = directory.Verdict{Action: directory.Multicast}
		moved = st.VSBCopies == st0.VSBCopies+1
	default:
		return v, nil, fmt.Errorf("plane: the datagram came out on %s", a.f)
	}
	if !moved {
		return v, nil, fmt.Errorf("plane: the datagram came out on %s, but the switch's counters disagree: %+v", a.f, st)
	}
	return v, a.b, nil
}
