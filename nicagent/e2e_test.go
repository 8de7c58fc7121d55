package nicagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/storagenode/layout"
	"github.com/netdir/netdir/wire"
)

// waitFor polls cond every 10 ms for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// e2e is the netns testbed with a cluster behind it: a client host running
// the agent on its veth, three storage node hosts, one bridge; the
// controller's API on loopback.
type e2e struct {
	tb     *testbed
	lay    *layout.Map
	ctl    *controller.Controller
	agent  *Agent
	client *client.Client
	nodes  []*storagenode.Node
}

const (
	clientAddr = "10.77.0.2"
	testRounds = time.Hour // the hot-key loop is not run: the test pins keys
)

// startCluster builds the testbed and starts the storage nodes and the
// controller; the controller's API listens on lis, made by listen.
func startCluster(t *testing.T, listen func(tb *testbed) (net.Listener, error)) (*e2e, net.Listener) {
	needBPF(t)
	tb := newTestbed(t)
	e := &e2e{tb: tb}
	tb.addHost("c", clientAddr+"/24")
	var lnodes []layout.Node
	var cnodes []controller.NodeAddr
	for i := 1; i <= 3; i++ {
		tb.addHost(fmt.Sprintf("n%d", i), fmt.Sprintf("10.77.0.%d/24", 10+i))
		addr := fmt.Sprintf("10.77.0.%d:%d", 10+i, wire.ServicePort)
		lnodes = append(lnodes, layout.Node{ID: wire.NodeID(i), Addr: addr})
		cnodes = append(cnodes, controller.NodeAddr{ID: wire.NodeID(i), Addr: addr})
		// The bridge completes offloaded checksums on the way to each
		// node, so the node verifies what the TC program rewrote.
		if err := setTxChecksum(tb.bridge, fmt.Sprintf("vn%d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	e.lay, err = layout.New(layout.Config{Epoch: 1, PartitionBits: 10, Replicas: 3,
		DataPlane: clientAddr + ":7420", Nodes: lnodes})
	if err != nil {
		t.Fatal(err)
	}
	quiet := quietLog()
	for i := 1; i <= 3; i++ {
		var n *storagenode.Node
		dir := t.TempDir()
		if err := inNS(tb.hosts[fmt.Sprintf("n%d", i)], func() (err error) {
			n, err = storagenode.Start(storagenode.Options{ID: wire.NodeID(i), Dir: dir, Layout: e.lay, Workers: 2, Logger: quiet})
			return err
		}); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		e.nodes = append(e.nodes, n)
		t.Cleanup(func() { n.Close() })
	}
	for _, n := range e.nodes {
		if !n.WaitReady(10 * time.Second) {
			t.Fatalf("node %d not ready", n.ID())
		}
	}

	// The controller, with no switch and no storage reach: the test pins
	// keys, and the chains hold every node, so no extras are copied.
	e.ctl, err = controller.New(controller.Config{PartitionBits: 10, Replicas: 3, Nodes: cnodes, Round: testRounds, Log: quiet}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pm := e.ctl.PartitionMap()
	for p := range pm.Chains {
		if got, want := pm.Chains[p], e.lay.Chain(uint32(p)); !equalIDs(got, want) {
			t.Fatalf("partition %d: the controller's chain %v, the nodes' %v", p, got, want)
		}
	}
	lis, err := listen(tb)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	api.RegisterControllerServer(gs, controller.NewAPI(e.ctl))
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return e, lis
}

// newClient opens a netdir client in the client host's namespace.
func (e *e2e) newClient(t *testing.T) {
	if err := inNS(e.tb.hosts["c"], func() (err error) {
		e.client, err = client.New(client.Options{Service: DefaultService.String(), Layout: e.lay})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.client.Close() })
}

// startE2E starts the cluster and the agent in this process, on the client
// host's eth0.
func startE2E(t *testing.T, policy directory.Policy) *e2e {
	e, lis := startCluster(t, func(*testbed) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") })
	var err error
	e.agent, err = New(Config{Iface: "eth0", Controller: lis.Addr().String(), Netns: nsPath(e.tb.hosts["c"]), Policy: policy, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.agent.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		e.agent.Close()
	})
	waitFor(t, 10*time.Second, "the agent to sync and resolve the nodes", e.agent.Ready)
	e.newClient(t)
	return e
}

func equalIDs(a, b []wire.NodeID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (e *e2e) stats(t *testing.T) Stats {
	t.Helper()
	s, err := e.agent.Dataplane().Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNetnsEndToEnd runs the agent on a client host's veth in front of three
// real storage nodes: GET/PUT/DEL correctness on the miss path and for a hot
// key, fragmented values, the split of a hot key's reads over its replicas
// and its weights, learning, and checksums verified by the nodes.
func TestNetnsEndToEnd(t *testing.T) {
	e := startE2E(t, directory.PolicyNetdir)
	if m := e.agent.XDPMode(); m != "native" {
		t.Errorf("XDP attached in %s mode on a veth; want native", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Miss path: every key routed by the partition table.
	for i := range 20 {
		k, v := fmt.Appendf(nil, "key-%d", i), fmt.Appendf(nil, "value-%d", i)
		octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
		ver, err := e.client.Put(octx, k, v)
		ocancel()
		if err != nil || ver == 0 {
			t.Fatalf("put %s: version %d, %v (%s)", k, ver, err, e.diag())
		}
		got, gver, err := e.client.Get(ctx, k)
		if err != nil || !bytes.Equal(got, v) || gver != ver {
			t.Fatalf("get %s = %q@%d, %v; want %q@%d", k, got, gver, err, v, ver)
		}
	}
	if _, err := e.client.Delete(ctx, []byte("key-3")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.client.Get(ctx, []byte("key-3")); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of a deleted key: %v, want not found", err)
	}
	// A value larger than the MTU leaves in IP fragments: every fragment
	// must follow the first to the node.
	big := bytes.Repeat([]byte("0123456789abcdef"), 400) // 6400 bytes
	if _, err := e.client.Put(ctx, []byte("big"), big); err != nil {
		t.Fatalf("put of a fragmented value: %v", err)
	}
	if got, _, err := e.client.Get(ctx, []byte("big")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("get of a fragmented value: %d bytes, %v", len(got), err)
	}
	s := e.stats(t)
	if s.Misses == 0 || s.Hits != 0 || s.TCFwd == 0 || s.Replies == 0 || s.FragFwd == 0 {
		t.Fatalf("after the miss path: %+v", s)
	}

	// A hot key: pinned at the controller, synced to the agent, its reads
	// split over its three replicas.
	hot := []byte("hot-key")
	h := wire.HashKey(hot)
	if _, err := e.client.Put(ctx, hot, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ctl.Pin(ctx, hot); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the pinned key in the agent's directory", func() bool {
		_, ok, _ := e.agent.Dataplane().Lookup(h)
		return ok
	})
	chain := e.lay.ChainOf(h)
	const reads = 600
	count := func() map[wire.NodeID]int {
		by := map[wire.NodeID]int{}
		for range reads {
			r, err := e.client.GetResult(ctx, hot)
			if err != nil {
				t.Fatal(err)
			}
			by[r.Node]++
		}
		return by
	}
	s0 := e.stats(t)
	by := count()
	t.Logf("reads of the hot key by node (even weights): %v", by)
	for _, n := range chain {
		// The fine score leans toward the faster replicas, but a replica
		// is taken at least whenever both candidates are it: 1/9 of the
		// reads, 67 ± 8 of 600, so 30 is 4.8 standard deviations below
		// even the slowest replica's share.
		if by[n] < reads/20 {
			t.Errorf("replica %d served %d of %d reads of the hot key: %v", n, by[n], reads, by)
		}
	}
	s1 := e.stats(t)
	if got := s1.Hits - s0.Hits; got < reads || s1.Misses != s0.Misses {
		t.Errorf("the hot key's reads: %d hits, %d misses; want %d hits and no misses", got, s1.Misses-s0.Misses, reads)
	}
	slot, _, _ := e.agent.Dataplane().Lookup(h)
	if slot.Hits < reads {
		t.Errorf("the slot counted %d hits, want at least %d", slot.Hits, reads)
	}

	// Weights: all of the split on the second replica (a delta).
	if err := e.ctl.SetKeyWeights(ctx, hot, []uint32{0, 1, 0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the new weights in the agent", func() bool {
		s, _, _ := e.agent.Dataplane().Lookup(h)
		return s.Buckets[0] == 1 && s.Buckets[31] == 1
	})
	by = count()
	if by[chain[1]] != reads {
		t.Errorf("with weights (0,1,0) the reads went to %v, want all %d to node %d", by, reads, chain[1])
	}

	// Writes to the hot key go to the head, unstamped; reads see them.
	for i := range 5 {
		v := fmt.Appendf(nil, "v%d", i+2)
		if _, err := e.client.Put(ctx, hot, v); err != nil {
			t.Fatalf("put of the hot key: %v", err)
		}
		if got, _, err := e.client.Get(ctx, hot); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get of the hot key = %q, %v; want %q", got, err, v)
		}
	}

	// Learning: every node's latency was learnt from echoed timestamps.
	for _, n := range chain {
		st, err := e.agent.Dataplane().Node(n)
		if err != nil {
			t.Fatal(err)
		}
		if st.Latency == 0 {
			t.Errorf("node %d: no latency learnt", n)
		}
	}

	// Eviction (a delete delta): the key's reads fall back to the chain.
	if err := e.ctl.Unpin(ctx, hot); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the unpinned key to leave the agent's directory", func() bool {
		_, ok, _ := e.agent.Dataplane().Lookup(h)
		return !ok
	})
	if got, _, err := e.client.Get(ctx, hot); err != nil || !bytes.Equal(got, []byte("v6")) {
		t.Fatalf("get after eviction = %q, %v", got, err)
	}

	s = e.stats(t)
	if s.DropTotal != 0 || s.NoAddr != 0 || s.FragMiss != 0 {
		t.Errorf("drops: %+v", s)
	}
	for name, ns := range e.tb.hosts {
		n, err := udpCsumErrors(ns)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s: %d UDP checksum errors", name, n)
		}
	}
	ss := e.agent.SyncStats()
	if ss.Snapshots != 1 || ss.Deltas < 3 || ss.Errors != 0 {
		t.Errorf("sync: %+v", ss)
	}
	t.Logf("agent counters: %+v", s)
	t.Logf("sync: %+v", ss)
}

// diag describes the testbed's state for a failure message: the agent's
// counters and the nodes' UDP checksum errors.
func (e *e2e) diag() string {
	s, _ := e.agent.Dataplane().Stats()
	out := fmt.Sprintf("agent: %+v; checksum errors:", s)
	for name, ns := range e.tb.hosts {
		n, _ := udpCsumErrors(ns)
		out += fmt.Sprintf(" %s=%d", name, n)
	}
	return out
}
