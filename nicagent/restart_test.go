package nicagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// testAgent is an agent on the test's Dataplane, with no interface: node
// addresses are installed by the test.
func testAgent(d *Dataplane, router bool, name string) *Agent {
	return &Agent{dp: d, nodes: map[wire.NodeID]netip.AddrPort{}, resolved: map[wire.NodeID]NodeAddr{},
		resolveKick: make(chan struct{}, 1), ifmac: agentMAC, cfg: Config{Service: service, Router: router},
		log: quietLog(), reporter: newReporter(name)}
}

// subscribeTest keeps a's directory subscription at cs until the returned
// stop is called, and waits for its first snapshot.
func subscribeTest(t testing.TB, ctx context.Context, a *Agent, cs *controller.Controllers) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() {
		sub, _, err := cs.Client()
		if err == nil {
			err = a.watch(ctx, sub)
		}
		watched <- err
	}()
	stop = sync.OnceFunc(func() {
		cancel()
		<-watched
	})
	t.Cleanup(stop)
	for deadline := time.Now().Add(5 * time.Second); !a.SyncStats().Synced; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-watched:
			t.Fatalf("the subscription ended before its first snapshot: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshot in 5s")
		}
	}
	return stop
}

// loopbackNodes starts n storage nodes on loopback, chains of 3, with
// VSBs to a socket of the test's that nobody reads.
func loopbackNodes(t testing.TB, n int) (*layout.Map, []*storagenode.Node) {
	t.Helper()
	vsbs, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vsbs.Close() })
	var lnodes []layout.Node
	for id := wire.NodeID(1); int(id) <= n; id++ {
		addr, err := cluster.ReserveAddr()
		if err != nil {
			t.Fatal(err)
		}
		lnodes = append(lnodes, layout.Node{ID: id, Addr: addr})
	}
	lay, err := layout.New(layout.Config{Epoch: 1, PartitionBits: 10, Replicas: 3, DataPlane: vsbs.LocalAddr().String(), Nodes: lnodes})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*storagenode.Node
	for _, ln := range lnodes {
		sn, err := storagenode.Start(storagenode.Options{ID: ln.ID, Dir: t.TempDir(), Layout: lay, Workers: 2, Logger: quietLog()})
		if err != nil {
			t.Fatalf("node %d: %v", ln.ID, err)
		}
		t.Cleanup(func() { sn.Close() })
		nodes = append(nodes, sn)
	}
	for _, sn := range nodes {
		if !sn.WaitReady(10 * time.Second) {
			t.Fatalf("node %d not ready", sn.ID())
		}
	}
	return lay, nodes
}

// routeStampedPut runs a PUT of key from a client through the router's XDP
// and returns the netdir packet it sent to the chain head, stamped.
func routeStampedPut(t *testing.T, d *Dataplane, key, val string, reqid uint64) []byte {
	t.Helper()
	p := wire.Packet{Header: wire.Header{Op: wire.OpPut, ReqID: reqid, KeyHash: wire.HashKey([]byte(key)), Timestamp: 1},
		Key: []byte(key), Value: []byte(val)}
	b, err := p.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := netip.MustParseAddrPort("10.88.0.2:40000")
	ret, out, err := run(d.XDP(), frame(client, service, b))
	if err != nil || ret != xdpTx {
		t.Fatalf("PUT through the router's XDP: %d, %v; want XDP_TX", ret, err)
	}
	f, err := parseFrame(out)
	if err != nil {
		t.Fatalf("the routed PUT: %v", err)
	}
	return f.payload
}

// exchange sends a netdir packet to addr from a loopback socket and returns
// the answer (a chain's tail answers a PUT), resending on silence.
func exchange(t *testing.T, addr string, pkt []byte) wire.Packet {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	to, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for range 5 {
		if _, err := conn.WriteToUDP(pkt, to); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		n, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			continue
		}
		var p wire.Packet
		if err := p.Decode(buf[:n]); err != nil {
			t.Fatalf("the answer from %s: %v", addr, err)
		}
		return p
	}
	t.Fatalf("no answer from %s in 5 tries", addr)
	return wire.Packet{}
}

// TestRouterRestartIncarnation restarts a router-mode agent (ToR mode:
// it stamps writes) while a write it stamped is still on its way to the
// chain head: the agent's maps come back empty, as the switch's registers
// do (spec/README.md, flaw G). Real storage nodes and the controller's API
// on loopback, the programs run by BPF_PROG_TEST_RUN. The restarted
// agent's first subscription asks for a new incarnation: the controller
// takes it through its replicated state, re-promotes the key at its head
// in it and seeds the snapshot's slot with the head's latest version. So
// the old write, arriving after the restart, is refused as of an older
// incarnation (it would otherwise commit above the new slot's seed, which
// knows nothing of it), and the restarted agent's stamps never repeat a
// stamp from before the restart.
func TestRouterRestartIncarnation(t *testing.T) {
	d := loadTest(t)
	lay, nodes := loopbackNodes(t, 3)
	ctl, err := controller.New(controller.Config{Layout: lay, Round: time.Hour, Log: quietLog()}, nil, &controller.UDPStorage{})
	if err != nil {
		t.Fatal(err)
	}
	cs := serveController(t, ctl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const key = "hot-key"
	h := wire.HashKey([]byte(key))
	e, err := ctl.Pin(ctx, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	head, _ := lay.Node(e.Locs[0])
	addrs := func() {
		t.Helper()
		for _, id := range lay.Nodes() {
			n, _ := lay.Node(id)
			if err := d.SetNodeAddr(id, NodeAddr{MAC: testNodeAddr(id).MAC, Addr: netip.MustParseAddrPort(n.Addr)}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The agent stamps a write; the write is still in flight when the
	// agent dies.
	first := testAgent(d, true, "test/router")
	stop := subscribeTest(t, ctx, first, cs)
	addrs()
	if _, ok, _ := d.Lookup(h); !ok {
		t.Fatal("the pinned key is not in the router's maps")
	}
	inFlight := routeStampedPut(t, d, key, "before", 1)
	var old wire.Header
	if err := old.DecodeHeader(inFlight); err != nil || old.Stamp == 0 {
		t.Fatalf("the router did not stamp the write: %+v, %v", old, err)
	}
	stop()

	// The agent starts again, on new maps.
	second := testAgent(d, true, "test/router")
	subscribeTest(t, ctx, second, cs)
	addrs()
	sl, ok, err := d.Lookup(h)
	if err != nil || !ok {
		t.Fatalf("the pinned key is not in the restarted router's maps: %v", err)
	}
	if inc := wire.StampIncarnation(old.Stamp); !wire.IncarnationBefore(inc, sl.Inc) {
		t.Errorf("the restarted router's slot stamps incarnation %d, the lost maps stamped %d: want a newer one", sl.Inc, inc)
	}

	// The write stamped before the restart reaches the head now: refused.
	ans := exchange(t, head.Addr, inFlight)
	if ans.Op != wire.OpErr || ans.Code != wire.CodeStaleVersion {
		t.Errorf("the head answered the write stamped %#x before the router restarted with %s %s version %d; want ERR stale-version",
			old.Stamp, ans.Op, ans.Code, ans.Stamp)
	}
	var stale uint64
	for _, n := range nodes {
		stale += n.Stats().StaleIncarnation
	}
	if stale != 1 {
		t.Errorf("the nodes refused %d writes as of an older incarnation; want 1", stale)
	}

	// A new write through the restarted router: a stamp it never issued
	// before, committed at that version.
	fresh := routeStampedPut(t, d, key, "after", 2)
	var nw wire.Header
	if err := nw.DecodeHeader(fresh); err != nil {
		t.Fatal(err)
	}
	if nw.Stamp == old.Stamp {
		t.Errorf("the restarted router stamped a new write %#x, as it stamped another before the restart", nw.Stamp)
	}
	ans = exchange(t, head.Addr, fresh)
	if ans.Op != wire.OpPutReply || ans.Stamp != wire.StampVersion(nw.Stamp) {
		t.Errorf("the head answered the restarted router's write stamped %#x with %s %s version %d; want PUT-REPLY at its version",
			nw.Stamp, ans.Op, ans.Code, ans.Stamp)
	}
}

// TestApplyNewIncarnation: a router that kept its maps while another
// plane lost its state gets the directory's entries again in the new
// incarnation (the controller re-promoted them at their heads in it, and
// the heads now refuse the last one's stamps). An entry of the same
// incarnation keeps its slot's coherence state; one of a new incarnation
// is installed again, seeded as a promotion is, and its writes are stamped
// in it.
func TestApplyNewIncarnation(t *testing.T) {
	d := loadTest(t)
	a := testAgent(d, true, "test/router")
	const key = "k"
	h := wire.HashKey([]byte(key))
	entry := func(ver uint64) *api.DirectoryEntry {
		e := syncEntry(key, 1, 2, 3, 4)
		e.Version = ver
		return e
	}
	if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_SNAPSHOT, Sequence: 1, PartitionBits: 10,
		Entries: []*api.DirectoryEntry{entry(wire.MakeStamp(0, 3))}}); err != nil {
		t.Fatal(err)
	}
	for n := wire.NodeID(1); n <= 4; n++ {
		if err := d.SetNodeAddr(n, testNodeAddr(n)); err != nil {
			t.Fatal(err)
		}
	}
	stamp := func(reqid uint64) uint64 {
		t.Helper()
		var hd wire.Header
		if err := hd.DecodeHeader(routeStampedPut(t, d, key, "v", reqid)); err != nil {
			t.Fatal(err)
		}
		return hd.Stamp
	}
	if s := stamp(1); s != wire.MakeStamp(0, 4) {
		t.Fatalf("the first write stamped %#x, want %#x", s, wire.MakeStamp(0, 4))
	}

	// The same incarnation again (new buckets, say): the pending write stays.
	if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_UPSERT, Sequence: 2,
		Entries: []*api.DirectoryEntry{entry(wire.MakeStamp(0, 3))}}); err != nil {
		t.Fatal(err)
	}
	if sl, _, _ := d.Lookup(h); sl.Inc != 0 || sl.VerNext != 4 || sl.VerDone != 3 {
		t.Fatalf("an upsert of the same incarnation: slot %+v, want it kept (incarnation 0, ver_next 4, ver_done 3)", sl)
	}

	// A new incarnation, seeded with the head's latest version 7.
	if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_UPSERT, Sequence: 3,
		Entries: []*api.DirectoryEntry{entry(wire.MakeStamp(1, 7))}}); err != nil {
		t.Fatal(err)
	}
	if sl, _, _ := d.Lookup(h); sl.Inc != 1 || sl.VerNext != 7 || sl.VerDone != 7 || sl.Fresh != 0b111 {
		t.Fatalf("an upsert of a new incarnation: slot %+v, want incarnation 1 seeded at 7, the chain fresh", sl)
	}
	if s := stamp(2); s != wire.MakeStamp(1, 8) {
		t.Errorf("the next write stamped %#x, want %#x", s, wire.MakeStamp(1, 8))
	}
}

// BenchmarkRouterRestart times a router agent's restart with a full
// directory (4096 pinned keys, three storage nodes on loopback): from its
// subscription, asking for a new incarnation, to its snapshot applied. The
// controller promotes every key again at its head first.
func BenchmarkRouterRestart(b *testing.B) {
	d := loadTest(b)
	lay, _ := loopbackNodes(b, 3)
	ctl, err := controller.New(controller.Config{Layout: lay, Capacity: 4096, Round: time.Hour, Log: quietLog()}, nil, &controller.UDPStorage{})
	if err != nil {
		b.Fatal(err)
	}
	cs := serveController(b, ctl)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range 4096 {
		if _, err := ctl.Pin(ctx, fmt.Appendf(nil, "key-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		a := testAgent(d, true, "bench/router")
		subscribeTest(b, ctx, a, cs)()
		if n := d.Len(); n != 4096 {
			b.Fatalf("the restarted router holds %d keys, want 4096", n)
		}
	}
}
