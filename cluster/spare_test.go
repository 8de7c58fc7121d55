package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// TestSpareFill kills a node for good: the controller splices it out, and
// once it has been down SpareAfter, spares take its place in every chain
// it was in, each filling at the nodes' paced copy rate while clients
// write and read. Every chain must have R members again, every spare must
// hold the data written before the kill, every history must be
// linearizable, and no acknowledged write may be lost.
func TestSpareFill(t *testing.T) {
	const syncRate = 64 << 10 // bytes/s: the fill takes about a second, under the histories
	c, err := cluster.Start(cluster.Options{N: 4, R: 3, Dir: t.TempDir(), Controller: true, Round: 100 * time.Millisecond,
		Node: func(o *storagenode.Options) { o.RetransmitAfter = 30 * time.Millisecond; o.SyncRate = syncRate }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	pl, err := c.StartPlane(ctx, cluster.PlaneConfig{
		Controller: cluster.ControllerConfig{Round: 100 * time.Millisecond, CoarseEpoch: time.Minute, SpareAfter: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	// Data written before the kill, which the spares must copy.
	cl, err := c.Client(chainClient)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pre := map[string][]byte{}
	for i := range 160 {
		key := fmt.Sprintf("spare-pre-%d", i)
		val := bytes.Repeat([]byte{byte('a' + i%26)}, 512)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cl.Put(pctx, []byte(key), val)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		pre[key] = val
	}
	lay := pl.Controller.Layout()
	const victim = 1 // node 2
	vid := wire.NodeID(victim + 1)
	placed := lay.Placed(vid)

	// Histories, round after round, from before the kill until every
	// spare has caught up.
	stop := make(chan struct{})
	var hists []cluster.History
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for round := 0; ; round++ {
			select {
			case <-stop:
				return
			default:
			}
			h, err := c.RunHistory(cluster.HistoryConfig{Clients: 4, OpsPer: 60, Keys: 4, Prefix: fmt.Sprintf("spare-r%d", round),
				Seed: uint64(round), Gets: 45, Puts: 55, OpTimeout: 5 * time.Second, Client: chainClient})
			if err != nil {
				t.Error(err)
				return
			}
			hists = append(hists, h)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	killed := time.Now()
	if err := c.Crash(victim); err != nil {
		t.Fatal(err)
	}
	var whole, caught time.Duration
	waitFor(t, "spares in every chain of node 2, and 3 members each", func() bool {
		m := pl.Controller.Layout()
		if m.Placed(vid) != 0 {
			return false
		}
		for p := range m.Partitions() {
			if len(m.Chain(uint32(p))) != 3 {
				return false
			}
		}
		whole = time.Since(killed)
		return true
	})
	final := pl.Controller.Layout()
	waitFor(t, "the spares caught up", func() bool {
		for i := range c.N() {
			if n := c.Node(i); n != nil && (n.Layout().Epoch() != final.Epoch() || !n.Ready()) {
				return false
			}
		}
		caught = time.Since(killed)
		return true
	})
	close(stop)
	wg.Wait()

	if final.Placed(vid) != 0 || !slices.Contains(final.Down(), vid) {
		t.Fatalf("node %d still placed in %d chains (down %v)", vid, final.Placed(vid), final.Down())
	}
	acked := map[string]uint64{}
	ops := 0
	for i, h := range hists {
		checkHistory(t, h, fmt.Sprintf("round %d", i))
		maps.Copy(acked, h.Acked)
		ops += len(h.Ops)
	}
	checkAcked(t, c, acked)

	// Each spare holds, as its chain's tail, every key written before the kill.
	conn, err := client.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	spares := map[wire.NodeID]int{}
	var copied uint64
	for key, val := range pre {
		h := wire.HashKey([]byte(key))
		p := final.Partition(h)
		spare, ok := final.Spare(p)
		if !ok {
			if lay.Slot(p, vid) >= 0 {
				t.Fatalf("partition %d of node %d has no spare: chain %v", p, vid, final.Chain(p))
			}
			continue
		}
		spares[spare]++
		addr, _ := final.Addr(spare)
		req := wire.Packet{Header: wire.Header{Op: wire.OpGet, ReqID: uint64(len(spares)*1000 + spares[spare]), KeyHash: h, Epoch: final.Epoch()}, Key: []byte(key)}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := conn.Call(rctx, addr, &req, client.Retry{Timeout: 100 * time.Millisecond})
		cancel()
		if err != nil {
			t.Fatalf("read %s at spare %d: %v", key, spare, err)
		}
		if r.Op != wire.OpGetReply || !bytes.Equal(r.Value, val) {
			t.Fatalf("read %s at spare %d (partition %d, chain %v): %s %q", key, spare, p, final.Chain(p), r.Op, r.Value)
		}
	}
	for i := range c.N() {
		if n := c.Node(i); n != nil {
			copied += n.Stats().SyncedBytes
		}
	}
	t.Logf("node %d killed, placed in %d chains: spares %v; 3 members again after %v, caught up after %v; %d bytes copied (rate limit %d B/s); %d ops in %d histories linearizable, %d acknowledged writes kept",
		vid, placed, spares, whole.Round(time.Millisecond), caught.Round(time.Millisecond), copied, syncRate, ops, len(hists), len(acked))
}
