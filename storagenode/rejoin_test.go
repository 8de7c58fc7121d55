package storagenode_test

import (
	"testing"
	"time"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// TestRejoinAfterMissedSplice: the tail T dies and is spliced out (epoch
// 2); the chain acknowledges v2; T restarts on its data directory with the
// layout it was started with (epoch 1, where it is the tail: a restarted
// process knows no newer one), catches up from its neighbours and serves;
// the chain acknowledges v3 without T; the controller adds T back as tail
// (epoch 3), and T hears epoch 3 without ever having heard epoch 2. Its
// chain is the same in epochs 1 and 3, so before the fix T counted itself
// a member throughout, did not catch up, and served v2 after v3 was
// acknowledged (TestChaos seed 108, history 6: v19 read after v26). A node
// that missed a layout may have been out of any of its chains meanwhile.
func TestRejoinAfterMissedSplice(t *testing.T) {
	c, p, key, ch := chainOfThree(t, "rejoin-after-missed-splice")
	h := wire.HashKey(key)
	head, mid, tail := int(ch[0])-1, int(ch[1])-1, int(ch[2])-1
	id := uint64(100)
	put := func(val string, want uint64) {
		t.Helper()
		id++
		r := p.call(addrOf(c, ch[0]), raw(wire.Header{Op: wire.OpPut, ReqID: id, KeyHash: h}, key, []byte(val)))
		for deadline := time.Now().Add(5 * time.Second); r.Op == wire.OpErr && r.Code == wire.CodeUnavailable && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			r = p.call(addrOf(c, ch[0]), raw(wire.Header{Op: wire.OpPut, ReqID: id, KeyHash: h}, key, []byte(val)))
		}
		if r.Op != wire.OpPutReply || r.Stamp != want {
			t.Fatalf("put %s: %s %s v%d, want v%d", val, r.Op, r.Code, r.Stamp, want)
		}
	}
	// take gives every node in nodes layout m.
	take := func(m *layout.Map, err error, nodes ...int) *layout.Map {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range nodes {
			c.Node(i).SetLayout(m)
		}
		return m
	}
	put("v1", 1)
	if err := c.Crash(tail); err != nil {
		t.Fatal(err)
	}
	spliced := take(c.Layout.Without(ch[2]))
	take(spliced, nil, head, mid)
	put("v2", 2)
	time.Sleep(50 * time.Millisecond) // v2's ack reaches the head: clean on both
	if err := c.Restart(tail); err != nil {
		t.Fatal(err)
	}
	put("v3", 3)
	rejoined := take(spliced.WithTail(ch[2]))
	take(rejoined, nil, head, mid, tail)
	if !c.Node(tail).WaitReady(10 * time.Second) {
		t.Fatal("T not ready after rejoining")
	}
	g := p.call(addrOf(c, ch[2]), raw(wire.Header{Op: wire.OpGet, ReqID: 1, KeyHash: h}, key, nil))
	if g.Op != wire.OpGetReply || g.Stamp != 3 || string(g.Value) != "v3" {
		t.Fatalf("read at the rejoined tail after v3 was acknowledged: %s %s v%d %q, want v3 \"v3\"", g.Op, g.Code, g.Stamp, g.Value)
	}
}

// TestRestartedNodeServesNoOlderLayout: the tail T dies and is spliced out
// (epoch 2, where the chain acknowledges v1); T restarts with the layout
// it was started with (epoch 1, where it is still the tail) and catches up
// from its predecessor, which answers at epoch 2; the chain acknowledges
// v2 without T. Until T takes a layout as new as the one its neighbour
// answered at, it must not serve the chain's reads: before the fix it
// answered v1, as the tail of a chain it had left, after v2 was
// acknowledged (as a data plane whose table lags the splice routes it).
func TestRestartedNodeServesNoOlderLayout(t *testing.T) {
	c, p, key, ch := chainOfThree(t, "restarted-older-layout")
	h := wire.HashKey(key)
	tail := int(ch[2]) - 1
	if err := c.Crash(tail); err != nil {
		t.Fatal(err)
	}
	spliced, err := c.Layout.Without(ch[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ch[:2] {
		c.Node(int(id) - 1).SetLayout(spliced)
	}
	for i, val := range []string{"v1", "v2"} {
		r := p.call(addrOf(c, ch[0]), raw(wire.Header{Op: wire.OpPut, ReqID: uint64(10 + i), KeyHash: h}, key, []byte(val)))
		if r.Op != wire.OpPutReply || r.Stamp != uint64(i+1) {
			t.Fatalf("put %s: %s %s v%d", val, r.Op, r.Code, r.Stamp)
		}
		if i == 0 {
			time.Sleep(50 * time.Millisecond) // v1's ack reaches the head: clean on both
			if err := c.Restart(tail); err != nil {
				t.Fatal(err)
			}
		}
	}
	g := p.call(addrOf(c, ch[2]), raw(wire.Header{Op: wire.OpGet, ReqID: 1, KeyHash: h}, key, nil))
	if g.Op == wire.OpGetReply && g.Stamp < 2 {
		t.Fatalf("read at the restarted node after v2 was acknowledged: v%d %q", g.Stamp, g.Value)
	}
	if g.Op != wire.OpErr || g.Code != wire.CodeUnavailable {
		t.Fatalf("read at the restarted node: %s %s v%d, want unavailable", g.Op, g.Code, g.Stamp)
	}
	c.Node(tail).SetLayout(spliced)
	g = p.call(addrOf(c, ch[2]), raw(wire.Header{Op: wire.OpGet, ReqID: 2, KeyHash: h}, key, nil))
	if g.Op != wire.OpErr || g.Code != wire.CodeWrongNode {
		t.Fatalf("read at the node spliced out: %s %s v%d, want wrong-node", g.Op, g.Code, g.Stamp)
	}
}

// chainOfThree starts three nodes in chains of three, and a peer; key's
// chain lists them.
func chainOfThree(t *testing.T, key string) (*cluster.Cluster, *peer, []byte, []wire.NodeID) {
	c := startCluster(t, cluster.Options{N: 3, R: 3})
	return c, newPeer(t), []byte(key), c.Layout.ChainOf(wire.HashKey([]byte(key)))
}
