package model

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

func get(key string, reqid uint64) wire.Packet {
	return wire.Packet{Header: wire.Header{Op: wire.OpGet, ReqID: reqid, KeyHash: wire.HashKey([]byte(key))}, Key: []byte(key)}
}

// TestRelayToTheRightClient: two clients' requests go to nodes, and each
// node's reply, sent back to the switch, reaches the client that asked.
func TestRelayToTheRightClient(t *testing.T) {
	c := newCluster(t, 3, Config{})
	a, b := udp(t), udp(t)
	send(t, a, c.s.Addr(), encode(t, get("apple", 0x101)))
	waitReceived(t, c.s, 1)
	na, reqA := c.which(t)
	send(t, b, c.s.Addr(), encode(t, get("pear", 0x202)))
	waitReceived(t, c.s, 2)
	nb, reqB := c.which(t)
	for _, x := range []struct {
		id  wire.NodeID
		req []byte
		rid uint64
	}{{na, reqA, 0x101}, {nb, reqB, 0x202}} {
		h := header(t, x.req)
		if h.Node != x.id || h.ReqID != x.rid || h.Timestamp == 0 {
			t.Fatalf("node %d got node=%d reqid=%#x ts=%d; want its own id, reqid %#x and a timestamp", x.id, h.Node, h.ReqID, h.Timestamp, x.rid)
		}
	}
	// Reply in the opposite order to the requests.
	repB := reply(t, reqB, wire.CodeOK)
	send(t, c.nodes[nb], c.s.Addr(), repB)
	got, from := recv(t, b)
	if from != c.s.Addr() || !bytes.Equal(got, repB) {
		t.Fatalf("client b got %x from %s, want the node's reply from the switch %s", got, from, c.s.Addr())
	}
	repA := reply(t, reqA, wire.CodeNotFound)
	send(t, c.nodes[na], c.s.Addr(), repA)
	got, _ = recv(t, a)
	if !bytes.Equal(got, repA) {
		t.Fatalf("client a got %x, want %x", got, repA)
	}
	st := waitReceived(t, c.s, 4)
	nothing(t, a)
	nothing(t, b)
	dc, _ := c.s.Counters()
	if st.Forwarded != 2 || st.Relayed != 2 || dc.Replies != 2 || dc.Misses != 2 {
		t.Fatalf("forwarded=%d relayed=%d replies=%d misses=%d, want 2 each", st.Forwarded, st.Relayed, dc.Replies, dc.Misses)
	}
	// The replies taught the switch the nodes' loads.
	if ns := c.s.NodeStats(na); ns.Load != 3 || ns.Latency == 0 {
		t.Fatalf("node %d stats %+v, want load 3 and a latency", na, ns)
	}
	// A second reply for an answered request has nobody to go to.
	send(t, c.nodes[na], c.s.Addr(), repA)
	if st := waitReceived(t, c.s, 5); st.UnknownReply != 1 {
		t.Fatalf("unknown replies = %d, want 1", st.UnknownReply)
	}
	nothing(t, a)
}

// TestMalformedAreCountedDrops sends datagrams that no data plane may
// forward; each is a counted drop, and the switch still forwards afterwards.
func TestMalformedAreCountedDrops(t *testing.T) {
	c := newCluster(t, 3, Config{})
	cl := udp(t)
	good := encode(t, get("apple", 1))
	badMagic := append([]byte(nil), good...)
	wire.Frame(badMagic).SetMagic(wire.Magic &^ 0xff00)
	badVersion := append([]byte(nil), good...)
	wire.Frame(badVersion).SetVersion(9)
	unknownOp := append([]byte(nil), good...)
	wire.Frame(unknownOp).SetOp(0x7e)
	nodeOp := append([]byte(nil), good...)
	wire.Frame(nodeOp).SetOp(wire.OpChainWrite)
	for _, b := range [][]byte{
		{}, {0x4e}, good[:wire.HeaderLen-1], badMagic, badVersion, unknownOp, nodeOp,
		make([]byte, wire.MaxPacket+1), // longer than any netdir packet
	} {
		send(t, cl, c.s.Addr(), b)
	}
	st := waitReceived(t, c.s, 8)
	dc, _ := c.s.Counters()
	want := map[directory.Reason]uint64{
		directory.ReasonShort: 3, directory.ReasonMagic: 1, directory.ReasonVersion: 1, directory.ReasonUnknownOp: 1,
	}
	for r, n := range want {
		if dc.Drops[r] != n {
			t.Errorf("drops[%s] = %d, want %d", r, dc.Drops[r], n)
		}
	}
	if dc.DropTotal != 6 || dc.Passed != 1 || st.NodeOps != 1 || st.Oversize != 1 || st.Forwarded != 0 || st.Sent != 0 {
		t.Fatalf("drops=%d passed=%d nodeops=%d oversize=%d forwarded=%d sent=%d; want 6 1 1 1 0 0",
			dc.DropTotal, dc.Passed, st.NodeOps, st.Oversize, st.Forwarded, st.Sent)
	}
	for _, nc := range c.nodes {
		nothing(t, nc)
	}
	send(t, cl, c.s.Addr(), good)
	waitReceived(t, c.s, 9)
	if _, b := c.which(t); header(t, b).ReqID != 1 {
		t.Fatal("the switch forwarded something other than the good request")
	}
}

// TestVSBMulticast: an accepted VSB from a node reaches every member of the
// group; one from a client address is refused, whatever it claims.
func TestVSBMulticast(t *testing.T) {
	ag1, ag2 := udp(t), udp(t)
	c := newCluster(t, 4, Config{Multicast: []netip.AddrPort{addrOf(ag1), addrOf(ag2)}})
	h := wire.HashKey([]byte("apple"))
	if _, err := c.s.Insert(h, []wire.NodeID{1, 2, 3, 4}, 3, 7, nil); err != nil {
		t.Fatal(err)
	}
	vsb := encode(t, wire.Packet{Header: wire.Header{Op: wire.OpVSB, KeyHash: h, Stamp: 7, Node: 4}, Key: []byte("apple")})
	send(t, c.nodes[4], c.s.Addr(), vsb)
	for _, ag := range []struct {
		name string
		c    *net.UDPConn
	}{{"agent 1", ag1}, {"agent 2", ag2}} {
		got, from := recv(t, ag.c)
		if !bytes.Equal(got, vsb) || from != c.s.Addr() {
			t.Fatalf("%s got %x from %s, want the VSB from the switch", ag.name, got, from)
		}
	}
	if sl, _ := c.s.Lookup(h); sl.Fresh != 0b1111 {
		t.Fatalf("fresh = %04b after node 4's VSB, want 1111", sl.Fresh)
	}
	// From a client address: refused on the port, never multicast.
	cl := udp(t)
	send(t, cl, c.s.Addr(), vsb)
	st := waitReceived(t, c.s, 2)
	dc, _ := c.s.Counters()
	if dc.Drops[directory.ReasonVSBPort] != 1 || dc.VSBs != 1 || st.VSBCopies != 2 {
		t.Fatalf("vsb-port drops=%d vsbs=%d copies=%d, want 1 1 2", dc.Drops[directory.ReasonVSBPort], dc.VSBs, st.VSBCopies)
	}
	nothing(t, ag1)
	nothing(t, ag2)
	// An empty group: accepted, sent nowhere.
	if err := c.s.SetMulticast(nil); err != nil {
		t.Fatal(err)
	}
	send(t, c.nodes[4], c.s.Addr(), vsb)
	st = waitReceived(t, c.s, 3)
	if dc, _ := c.s.Counters(); dc.VSBs != 2 || st.VSBCopies != 2 {
		t.Fatalf("vsbs=%d copies=%d after emptying the group, want 2 2", dc.VSBs, st.VSBCopies)
	}
	nothing(t, ag1)
}

// TestPendingOverflowCounted: with room for 4 requests in flight, 6
// unanswered requests forget the 2 oldest; their replies are counted drops
// and the rest are relayed.
func TestPendingOverflowCounted(t *testing.T) {
	c := newCluster(t, 1, Config{Pending: 4})
	cl := udp(t)
	var reqs [][]byte
	for id := uint64(1); id <= 6; id++ {
		send(t, cl, c.s.Addr(), encode(t, get("apple", id)))
		waitReceived(t, c.s, id)
		_, b := c.which(t)
		reqs = append(reqs, b)
	}
	if snap := c.s.Snapshot(); snap.Stats.PendingEvicted != 2 || snap.Pending != 4 {
		t.Fatalf("evicted=%d pending=%d, want 2 4", snap.Stats.PendingEvicted, snap.Pending)
	}
	for _, req := range reqs {
		send(t, c.nodes[1], c.s.Addr(), reply(t, req, wire.CodeOK))
	}
	st := waitReceived(t, c.s, 12)
	if st.UnknownReply != 2 || st.Relayed != 4 {
		t.Fatalf("unknown=%d relayed=%d, want 2 4", st.UnknownReply, st.Relayed)
	}
	for id := uint64(3); id <= 6; id++ {
		got, _ := recv(t, cl)
		if h := header(t, got); h.ReqID != id {
			t.Fatalf("relayed reqid %d, want %d", h.ReqID, id)
		}
	}
	nothing(t, cl)
}

func TestNodeTableErrors(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := netip.MustParseAddrPort("127.0.0.1:7501")
	b := netip.MustParseAddrPort("127.0.0.1:7502")
	for _, tc := range []struct {
		name  string
		nodes []Node
	}{
		{"duplicate id", []Node{{1, a}, {1, b}}},
		{"shared address", []Node{{1, a}, {2, a}}},
		{"id too large", []Node{{5000, a}}},
		{"no port", []Node{{1, netip.MustParseAddrPort("127.0.0.1:0")}}},
		{"wrong family", []Node{{1, netip.MustParseAddrPort("[::1]:7501")}}},
	} {
		if err := s.SetNodes(tc.nodes); err == nil {
			t.Errorf("%s: SetNodes accepted %v", tc.name, tc.nodes)
		}
	}
	if err := s.SetNodes([]Node{{1, a}, {2, b}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNode(Node{3, a}); err == nil {
		t.Error("AddNode accepted node 1's address for node 3")
	}
	if err := s.AddNode(Node{1, netip.MustParseAddrPort("127.0.0.1:7503")}); err != nil {
		t.Fatal(err)
	}
	// Node 1 moved: its old address is free, and ports follow the table.
	if err := s.AddNode(Node{3, a}); err != nil {
		t.Fatalf("node 1's old address is still taken: %v", err)
	}
	if got := s.Nodes(); len(got) != 3 || got[0].Addr.Port() != 7503 || got[2].Addr != a {
		t.Fatalf("Nodes() = %v", got)
	}
	if err := s.SetMulticast([]netip.AddrPort{netip.MustParseAddrPort("[::1]:1")}); err == nil {
		t.Error("SetMulticast accepted an IPv6 member on an IPv4 switch")
	}
}

// TestRunStops: Run returns nil when its context ends, and Close after
// that is harmless.
func TestRunStops(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after its context ended")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("a second Run succeeded")
	}
}

// TestIPv6 runs a request and its reply through a switch on [::1].
func TestIPv6(t *testing.T) {
	node, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer node.Close()
	cl, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s := start(t, Config{Listen: "[::1]:0", Directory: directory.Config{PartitionBits: 1},
		Nodes: []Node{{ID: 1, Addr: node.LocalAddr().(*net.UDPAddr).AddrPort()}}})
	for p := uint32(0); p < 2; p++ {
		if err := s.SetPartition(p, []wire.NodeID{1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddNode(Node{ID: 2, Addr: netip.MustParseAddrPort("127.0.0.1:7501")}); err == nil {
		t.Error("an IPv6 switch accepted an IPv4 node")
	}
	send(t, cl, s.Addr(), encode(t, get("apple", 9)))
	req, from := recv(t, node)
	if from != s.Addr() || header(t, req).Node != 1 {
		t.Fatalf("node got %x from %s", req, from)
	}
	rep := reply(t, req, wire.CodeOK)
	send(t, node, s.Addr(), rep)
	if got, _ := recv(t, cl); !bytes.Equal(got, rep) {
		t.Fatalf("client got %x, want %x", got, rep)
	}
	// The node's address is a storage port on IPv6 too.
	vsb := encode(t, wire.Packet{Header: wire.Header{Op: wire.OpVSB, KeyHash: wire.HashKey([]byte("apple"))}, Key: []byte("apple")})
	send(t, node, s.Addr(), vsb)
	waitReceived(t, s, 3)
	if dc, _ := s.Counters(); dc.Drops[directory.ReasonVSBNotCached] != 1 {
		t.Fatalf("drops %v: want the node's VSB refused as not cached, not on its port", dc.Drops)
	}
}
