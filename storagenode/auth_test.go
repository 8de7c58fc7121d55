package storagenode_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// newPeerAt is newPeer bound to ip (another loopback address).
func newPeerAt(t *testing.T, ip string) *peer {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &peer{t: t, conn: c}
}

// waitDrops waits until node's refused node ops reach want.
func waitDrops(t *testing.T, n *storagenode.Node, want nodeauth.Drops) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n.NodeOpDrops() != want {
		if time.Now().After(deadline) {
			t.Fatalf("node %d refused %+v, want %+v", n.ID(), n.NodeOpDrops(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startWritten starts a cluster and writes v1 to key with a client of
// it, which it returns, with a context bounding the test.
func startWritten(t *testing.T, o cluster.Options, key string) (*cluster.Cluster, *client.Client, context.Context) {
	c := startCluster(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	cl, err := c.Client(client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if _, err := cl.Put(ctx, []byte(key), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	return c, cl, ctx
}

func otherClusterKey(t *testing.T) *nodeauth.Auth {
	k, err := nodeauth.NewKey(nodeauth.GenerateSecret())
	if err != nil {
		t.Fatal(err)
	}
	return nodeauth.New(nodeauth.Keys{Seal: k}, nil)
}

// TestNodeOpsAuthenticated: node ops that are unsealed, sealed with
// another key, replayed, from a sender not in the layout at that address,
// or sealed with a key that a rotation retired, are dropped and counted,
// and change nothing; sealed ones from key holders are served.
func TestNodeOpsAuthenticated(t *testing.T) {
	c, _, _ := startWritten(t, cluster.Options{N: 3, R: 3}, "guarded")
	key := []byte("guarded")
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	headNode := c.Node(int(ch[0]) - 1)
	head := addrOf(c, ch[0])
	retiredKeys := c.NewAuth() // holds the keys before the rotation below
	forger := newPeer(t)       // holds no key: sends bytes as given
	unanswered := func(reqid uint64) {
		t.Helper()
		if r, ok := forger.recvWithin(reqid, 200*time.Millisecond); ok {
			t.Fatalf("a refused op was answered: %s %s", r.Op, r.Code)
		}
	}

	// Unsealed, and sealed with another cluster's key: bad MAC.
	forger.send(head, raw(wire.Header{Op: wire.OpStats, ReqID: 1}, nil, nil))
	unanswered(1)
	forger.send(head, raw(wire.Header{Op: wire.OpDemote, ReqID: 2, KeyHash: h}, key, nil))
	unanswered(2)
	forger.send(head, raw(wire.Header{Op: wire.OpCopyAck, KeyHash: h, Node: ch[1], Stamp: 99}, key, nil))
	forger.send(head, otherClusterKey(t).Seal(raw(wire.Header{Op: wire.OpStats, ReqID: 3}, nil, nil)))
	unanswered(3)
	waitDrops(t, headNode, nodeauth.Drops{BadMAC: 4})

	// A key holder's op is served once; the same bytes again are a replay.
	sealed := retiredKeys.Seal(raw(wire.Header{Op: wire.OpStats, ReqID: 10}, nil, nil))
	forger.send(head, sealed)
	if _, ok := forger.recv(10); !ok {
		t.Fatal("a sealed stats request was not answered")
	}
	forger.send(head, sealed)
	unanswered(10)
	waitDrops(t, headNode, nodeauth.Drops{BadMAC: 4, Replay: 1})

	// Sealed, but from a sender not in the layout at the packet's source:
	// node ch[1] from another address, an id not in the layout, and a
	// controller (node 0) sending what only nodes send.
	elsewhere := newPeerAt(t, "127.0.0.2")
	elsewhere.send(head, retiredKeys.Seal(raw(wire.Header{Op: wire.OpCopyAck, KeyHash: h, Node: ch[1], Stamp: 1}, key, nil)))
	forger.send(head, retiredKeys.Seal(raw(wire.Header{Op: wire.OpCopyAck, KeyHash: h, Node: 77, Stamp: 1}, key, nil)))
	forger.send(head, retiredKeys.Seal(raw(wire.Header{Op: wire.OpChainAck, KeyHash: h, Stamp: 1}, key, nil)))
	waitDrops(t, headNode, nodeauth.Drops{BadMAC: 4, Replay: 1, UnknownSender: 3})

	// Rotate: accept a next key, seal with it, drop the old one. The old
	// key's ops are then refused as old-key; the new key's are served.
	old := c.Keys()
	next, err := nodeauth.NewKey(nodeauth.GenerateSecret())
	if err != nil {
		t.Fatal(err)
	}
	c.SetKeys(nodeauth.Keys{Seal: old.Seal, Next: &next})
	c.SetKeys(nodeauth.Keys{Seal: next, Next: &old.Seal})
	c.SetKeys(nodeauth.Keys{Seal: next})
	forger.send(head, retiredKeys.Seal(raw(wire.Header{Op: wire.OpStats, ReqID: 20}, nil, nil)))
	unanswered(20)
	waitDrops(t, headNode, nodeauth.Drops{BadMAC: 4, Replay: 1, UnknownSender: 3, OldKey: 1})
	if r := newPeer(t).sealing(c).call(head, raw(wire.Header{Op: wire.OpStats, ReqID: 21}, nil, nil)); r.Op != wire.OpStats {
		t.Fatalf("stats with the new key: %s %s", r.Op, r.Code)
	}

	// Nothing refused took effect: the head did not demote or lose v1,
	// and every node still serves.
	for id := range wire.NodeID(3) {
		if r := forger.call(addrOf(c, id+1), raw(wire.Header{Op: wire.OpGet, ReqID: uint64(100 + id), KeyHash: h}, key, nil)); r.Op != wire.OpGetReply || string(r.Value) != "v1" {
			t.Fatalf("node %d: get %s %s %q, want v1", id+1, r.Op, r.Code, r.Value)
		}
	}
	if d := c.Node(int(ch[1]) - 1).NodeOpDrops(); d != (nodeauth.Drops{}) {
		t.Fatalf("node %d refused %+v of its chain's own traffic", ch[1], d)
	}
}

// TestForgedEpochDoesNotStopServing: a node takes a newer epoch from a chain
// neighbour as a sign that its layout is stale, and stops serving until it
// has the new one. A forged node op carrying a huge epoch once did that
// from any socket; now only authenticated node ops are heard.
func TestForgedEpochDoesNotStopServing(t *testing.T) {
	c, cl, ctx := startWritten(t, cluster.Options{N: 3, R: 3, Epoch: 1}, "epoch")
	key := []byte("epoch")
	h := wire.HashKey(key)
	forger := newPeer(t)
	stranger := otherClusterKey(t)
	const huge = 1 << 31
	for id := wire.NodeID(1); id <= 3; id++ {
		sender := id%3 + 1 // a neighbour in the layout, at its address (loopback)
		for _, op := range []wire.Op{wire.OpChainAck, wire.OpCopy, wire.OpVerAnswer, wire.OpSyncData} {
			pkt := raw(wire.Header{Op: op, KeyHash: h, Node: sender, Epoch: huge, Stamp: 1}, key, nil)
			forger.send(addrOf(c, id), pkt)
			forger.send(addrOf(c, id), stranger.Seal(pkt))
		}
	}
	for id := wire.NodeID(1); id <= 3; id++ {
		waitDrops(t, c.Node(int(id)-1), nodeauth.Drops{BadMAC: 8})
	}
	// A write passes the whole chain, whose every member got the forgeries
	// before it (one shard per key, in order).
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	if _, err := cl.Put(wctx, key, []byte("v2")); err != nil {
		t.Fatalf("write after forged epochs: %v", err)
	}
	for id := wire.NodeID(1); id <= 3; id++ {
		r := forger.call(addrOf(c, id), raw(wire.Header{Op: wire.OpGet, ReqID: uint64(id), KeyHash: h}, key, nil))
		if r.Op != wire.OpGetReply || string(r.Value) != "v2" {
			t.Fatalf("node %d after forged epochs: %s %s %q, want v2", id, r.Op, r.Code, r.Value)
		}
	}
}
