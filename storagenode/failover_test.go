package storagenode_test

import (
	"testing"
	"time"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/wire"
)

// TestNewHeadAnswersRetry: a write acknowledged as v1 and overwritten by
// v2; the head dies and is spliced out, so the middle heads the chain; the
// client's retry of the first write (its reply was lost) reaches the new
// head, which must answer it with v1 from its dedup table, not apply it
// again as v3 over v2. Before the fix only the head kept request ids, and
// a new head knew those of the versions in its records (clean and dirty):
// TestChaos seed 12 saw a put acknowledged as v9 whose value was read at v4.
// With restart, the middle also restarts from its data directory before it
// heads: its request ids are persisted in its own position's tree, and a
// restart loaded only the head's (v3 before the fix).
func TestNewHeadAnswersRetry(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "running", true: "restarted"}[restart], func(t *testing.T) {
			newHeadAnswersRetry(t, restart)
		})
	}
}

func newHeadAnswersRetry(t *testing.T, restart bool) {
	c := startCluster(t, cluster.Options{N: 3, R: 3})
	p := newPeer(t)
	key := []byte("retry-after-failover")
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	put := func(to wire.NodeID, id uint64, val string) wire.Packet {
		t.Helper()
		return p.call(addrOf(c, to), raw(wire.Header{Op: wire.OpPut, ReqID: id, KeyHash: h}, key, []byte(val)))
	}
	if r := put(ch[0], 101, "a"); r.Op != wire.OpPutReply || r.Stamp != 1 {
		t.Fatalf("put a: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	if r := put(ch[0], 102, "b"); r.Op != wire.OpPutReply || r.Stamp != 2 {
		t.Fatalf("put b: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	time.Sleep(50 * time.Millisecond) // v2's acks reach the middle: clean there
	if restart {
		if err := c.Crash(int(ch[1]) - 1); err != nil {
			t.Fatal(err)
		}
		if err := c.Restart(int(ch[1]) - 1); err != nil {
			t.Fatal(err)
		}
	}
	killHead(t, c, ch)
	if got := c.Node(int(ch[1]) - 1).Layout().ChainOf(h); got[0] != ch[1] {
		t.Fatalf("spliced chain %v: want %d at the head", got, ch[1])
	}
	r := untilAvailable(func() wire.Packet { return put(ch[1], 101, "a") })
	if r.Op != wire.OpPutReply || r.Stamp != 1 {
		t.Fatalf("retry at the new head: %s %s v%d, want the first answer, v1", r.Op, r.Code, r.Stamp)
	}
	g := p.call(addrOf(c, ch[2]), raw(wire.Header{Op: wire.OpGet, ReqID: 103, KeyHash: h}, key, nil))
	if g.Op != wire.OpGetReply || g.Stamp != 2 || string(g.Value) != "b" {
		t.Fatalf("read at the tail: %s v%d %q, want v2 \"b\"", g.Op, g.Stamp, g.Value)
	}
}

// killHead crashes the head of chain ch (of 3) and splices it out of the
// other two nodes' layout: the middle heads the chain.
func killHead(t *testing.T, c *cluster.Cluster, ch []wire.NodeID) {
	t.Helper()
	if err := c.Crash(int(ch[0]) - 1); err != nil {
		t.Fatal(err)
	}
	spliced, err := c.Layout.Without(ch[0])
	if err != nil {
		t.Fatal(err)
	}
	c.Node(int(ch[1]) - 1).SetLayout(spliced)
	c.Node(int(ch[2]) - 1).SetLayout(spliced)
}

// untilAvailable calls call until its answer is not ERR unavailable (a
// new head adopting its chain), for at most 5 s, and returns the answer.
func untilAvailable(call func() wire.Packet) wire.Packet {
	r := call()
	for deadline := time.Now().Add(5 * time.Second); r.Op == wire.OpErr && r.Code == wire.CodeUnavailable && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		r = call()
	}
	return r
}
