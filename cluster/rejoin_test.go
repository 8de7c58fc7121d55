package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// TestRejoinBehindAcknowledged replays flaw H of spec/README.md (Spin's
// trail, make spec-flaws H-rejoin-behind-dirty) step by step, with the
// fault proxies: v1 is committed at the tail T and acknowledged while T's
// ack to the middle M is lost; T dies and is spliced out (M, holding v1
// dirty, is the tail); the head's re-send of v1 never reaches M; T
// restarts on an empty disk and rejoins as tail. A read at M (dirty) asks T, which must
// answer v1: before the fix T's catch-up pulled clean versions only, was
// ready at v0, and the read returned v0 after v1 was acknowledged.
func TestRejoinBehindAcknowledged(t *testing.T) {
	dir := t.TempDir()
	c, err := cluster.Start(cluster.Options{N: 3, R: 3, Epoch: 1, Dir: dir, Proxy: true,
		// Only a new layout makes the head re-send: the trail's timing.
		Node: func(o *storagenode.Options) { o.RetransmitAfter = time.Minute }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := []byte("flaw-h")
	ch := c.Layout.ChainOf(wire.HashKey(key))
	if len(ch) != 3 {
		t.Fatalf("chain %v, want 3 members", ch)
	}
	head, mid, tail := int(ch[0])-1, int(ch[1])-1, int(ch[2])-1
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := c.Client(client.Options{Timeout: 50 * time.Millisecond, MaxTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	v0, err := cl.Put(ctx, key, []byte("v0"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // v0's acks reach M and the head: v0 is clean everywhere

	// v1 commits at T and is acknowledged; T's ack to M is lost.
	c.Proxy(mid).SetFaults(cluster.Faults{DropOps: []wire.Op{wire.OpChainAck}})
	v1, err := cl.Put(ctx, key, []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if v1 <= v0 {
		t.Fatalf("v1 %d not above v0 %d", v1, v0)
	}
	// T dies and is spliced out (M is the tail); the head's re-send of v1
	// down the new chain is lost too, so M keeps v1 dirty.
	c.Proxy(mid).SetFaults(cluster.Faults{DropOps: []wire.Op{wire.OpChainAck, wire.OpChainWrite}})
	if err := c.Crash(tail); err != nil {
		t.Fatal(err)
	}
	spliced, err := c.Layout.Without(ch[2])
	if err != nil {
		t.Fatal(err)
	}
	c.Node(head).SetLayout(spliced)
	c.Node(mid).SetLayout(spliced)
	// T restarts on a new disk (the model's T comes back empty), hears of
	// the splice, and rejoins as tail.
	if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("node-%d", ch[2]))); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(tail); err != nil {
		t.Fatal(err)
	}
	c.Node(tail).SetLayout(spliced)
	rejoined, err := spliced.WithTail(ch[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{tail, head, mid} {
		c.Node(i).SetLayout(rejoined)
	}
	if !c.Node(tail).WaitReady(10 * time.Second) {
		t.Fatal("T not ready after rejoining")
	}

	// A read at M, which holds v1 dirty, asks the tail T.
	conn, err := client.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	addr, _ := rejoined.Addr(ch[1])
	req := wire.Packet{Header: wire.Header{Op: wire.OpGet, ReqID: 1, KeyHash: wire.HashKey(key), Epoch: rejoined.Epoch()}, Key: key}
	r, err := conn.Call(ctx, addr, &req, client.Retry{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Op != wire.OpGetReply || r.Stamp < v1 || string(r.Value) != "v1" {
		t.Fatalf("read at M after version %d was acknowledged: %s version %d %q, want %d \"v1\"", v1, r.Op, r.Stamp, r.Value, v1)
	}
}
