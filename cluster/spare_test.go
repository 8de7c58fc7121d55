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
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// startSpares starts o with 4 nodes (R=3) and a controller, and a plane
// whose controller brings spares in for a node down a second; both close
// with t. Gossip takes 3 s to declare a node dead: with the default 1 s, a
// live node under -race on a loaded machine was taken for dead and back,
// and refilled every chain it is in.
func startSpares(t *testing.T, o cluster.Options) (*cluster.Cluster, *cluster.Plane) {
	t.Helper()
	o.N, o.R, o.Dir, o.Controller, o.Round = 4, 3, t.TempDir(), true, 100*time.Millisecond
	o.FailureTimeout = 3 * time.Second
	c, err := cluster.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	pl, err := c.StartPlane(context.Background(), cluster.PlaneConfig{
		Controller: cluster.ControllerConfig{Round: 100 * time.Millisecond, CoarseEpoch: time.Minute, SpareAfter: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	return c, pl
}

// TestSpareFill kills a node for good: the controller splices it out, and
// once it has been down SpareAfter, spares take its place in every chain
// it was in, each filling at the nodes' paced copy rate while clients
// write and read. Every chain must have R members again, every spare must
// hold the data written before the kill, every history must be
// linearizable, and no acknowledged write may be lost.
func TestSpareFill(t *testing.T) {
	const syncRate = 64 << 10 // bytes/s: the fill takes about a second, under the histories
	c, pl := startSpares(t, cluster.Options{Node: func(o *storagenode.Options) { o.RetransmitAfter = 30 * time.Millisecond; o.SyncRate = syncRate }})
	ctx := context.Background()
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
	// Caught up: every spare serves its chains' reads (the layout has
	// none filling), and every node holds that layout and is ready.
	var final *layout.Map
	waitFor(t, "the spares caught up", func() bool {
		final = pl.Controller.Layout()
		if len(final.FillingParts()) > 0 {
			return false
		}
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

// TestSpareReadSet: a spare still filling a chain takes its writes but is
// no fresh replica, so no client (direct, on the layout's read set) and no
// data plane (partition buckets) sends it a read of that chain: none is
// answered unavailable by a spare, every read during the fill succeeds
// with the value written, and once each spare has caught up the layout
// serves its reads again.
func TestSpareReadSet(t *testing.T) {
	const syncRate = 128 << 10 // bytes/s: the fill lasts seconds, and under -race at its pace's floor (1/32) not a minute
	c, pl := startSpares(t, cluster.Options{PartitionBits: 6, Node: func(o *storagenode.Options) { o.SyncRate = syncRate }})
	load := startReadLoad(t, c, "readset", 320)
	const victim = 1 // node 2
	if err := c.Crash(victim); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "spares filling the chains of node 2", func() bool {
		m := pl.Controller.Layout()
		return m.Placed(wire.NodeID(victim+1)) == 0 && len(m.FillingParts()) > 0
	})
	filling := pl.Controller.Layout()
	// Reads refused between two epochs' gossip (StaleLayoutGets) are
	// retried and are no read set's fault; they are logged, not counted.
	before, staleBefore := unavailableGets(c)
	deadline := time.Now().Add(60 * time.Second)
	// final is the first layout with no chain filling: a node that
	// gossip later takes for dead and back (under -race on a loaded
	// machine) fills its chains again.
	var final *layout.Map
	for i := 0; ; i++ {
		if final = pl.Controller.Layout(); len(final.FillingParts()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spares still filling %v after 60 s", final.FillingParts())
		}
		// Writes go through the filling spare, its chain's tail.
		if err := load.step(i); err != nil {
			t.Fatalf("during the fill: %v", err)
		}
	}
	after, staleAfter := unavailableGets(c)
	if n := after - before; n > 0 {
		t.Errorf("%d of %d reads during the fill answered unavailable: a filling spare was in a read set", n, load.reads)
	}
	for _, p := range filling.FillingParts() {
		spare, _ := final.Spare(p)
		if !slices.Contains(final.ReadSet(p), spare) {
			t.Errorf("partition %d: spare %d caught up but not in the read set %v", p, spare, final.ReadSet(p))
		}
	}
	t.Logf("%d chains filling at epoch %d, served by epoch %d; %d reads and %d writes during the fill, half through the data plane; %d reads refused between epochs",
		len(filling.FillingParts()), filling.Epoch(), final.Epoch(), load.reads, load.writes, staleAfter-staleBefore)
}
