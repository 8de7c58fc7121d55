package cluster_test

import (
	"bytes"
	"context"
	"fmt"
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

// TestRejoinFillsBeforeServing: a node killed, spliced out, restarted and
// added back as tail fills its chains (layout `filling:`) as a spare does,
// so no client (direct, on the layout's read set) and no data plane
// (partition buckets) sends it a read of a chain it has not caught up
// with: under read load from before the kill until it serves again, no
// read is answered unavailable by a node catching up, and every read
// returns the value written.
func TestRejoinFillsBeforeServing(t *testing.T) {
	if testing.Short() {
		t.Skip("a restart and two paced catch-ups under load: tens of seconds under -race")
	}
	const syncRate = 64 << 10 // bytes/s: the rejoin's catch-up lasts seconds
	c, err := cluster.Start(cluster.Options{N: 4, R: 3, PartitionBits: 6, Dir: t.TempDir(), Controller: true, Round: 100 * time.Millisecond,
		Node: func(o *storagenode.Options) { o.SyncRate = syncRate }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	pl, err := c.StartPlane(context.Background(), cluster.PlaneConfig{
		Controller: cluster.ControllerConfig{Round: 100 * time.Millisecond, CoarseEpoch: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	load := startReadLoad(t, c, "rejoinfill", 320)

	// The load until stop, bounded in time.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures []error
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(90 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := load.step(i); err != nil {
				failures = append(failures, err)
			}
		}
	}()

	const victim = 1 // node 2
	vid := wire.NodeID(victim + 1)
	if err := c.Crash(victim); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node 2 spliced out", func() bool { return slices.Contains(pl.Controller.Layout().Down(), vid) })
	before, staleBefore := unavailableGets(c)
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	sawFilling := false
	waitFor(t, "node 2 back, filling its chains", func() bool {
		m := pl.Controller.Layout()
		if slices.Contains(m.Down(), vid) {
			return false
		}
		for _, p := range m.FillingParts() {
			sawFilling = sawFilling || slices.Contains(m.FillingIn(p), vid)
		}
		return true
	})
	// final is the first layout in which every node serves: a node that
	// gossip later takes for dead and back fills its chains again.
	var final *layout.Map
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := pl.Controller.Layout()
		served := len(m.FillingParts()) == 0
		for i := range c.N() {
			if n := c.Node(i); n == nil || n.Layout().Epoch() != m.Epoch() || !n.Ready() {
				served = false
			}
		}
		if served {
			final = m
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 2 still filling %v after 60 s", m.FillingParts())
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	after, staleAfter := unavailableGets(c)
	if !sawFilling {
		t.Error("node 2 rejoined but was never seen filling its chains")
	}
	if n := after - before; n > 0 {
		t.Errorf("%d of %d reads answered unavailable by a node catching up: it was in a read set", n, load.reads)
	}
	for _, err := range failures {
		t.Errorf("during the rejoin: %v", err)
	}
	for p := range uint32(final.Partitions()) {
		if final.Position(p, vid) >= 0 && !slices.Contains(final.ReadSet(p), vid) {
			t.Errorf("partition %d: node 2 caught up but not in the read set %v", p, final.ReadSet(p))
		}
	}
	t.Logf("node 2 rejoined and served by epoch %d; %d reads and %d writes from before the kill, half through the data plane; %d reads refused between epochs",
		final.Epoch(), load.reads, load.writes, staleAfter-staleBefore)
}

// readLoad is a read-mostly load over keys written once, with values
// known: alternately through a direct client (on the layout's read sets)
// and through the data plane.
type readLoad struct {
	direct, plane *client.Client
	prefix        string
	keys          int
	reads, writes int
}

// startReadLoad writes the load's keys; its clients close with t.
func startReadLoad(t *testing.T, c *cluster.Cluster, prefix string, keys int) *readLoad {
	t.Helper()
	l := &readLoad{prefix: prefix, keys: keys}
	var err error
	if l.direct, err = c.Client(chainClient); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.direct.Close() })
	viaPlane := chainClient
	viaPlane.Service = c.Service()
	if l.plane, err = c.Client(viaPlane); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.plane.Close() })
	for i := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := l.direct.Put(ctx, l.key(i), l.val(i))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l *readLoad) key(i int) []byte { return []byte(fmt.Sprintf("%s-%d", l.prefix, i)) }
func (l *readLoad) val(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 1024) }

// step is the load's i-th operation: one in 8 writes its key's value
// again, the others read it and check the value.
func (l *readLoad) step(i int) error {
	k := i % l.keys
	cl := l.direct
	if i%2 == 1 {
		cl = l.plane
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if i%8 == 7 {
		l.writes++
		if _, err := cl.Put(ctx, l.key(k), l.val(k)); err != nil {
			return fmt.Errorf("put %s: %w", l.key(k), err)
		}
		return nil
	}
	l.reads++
	got, _, err := cl.Get(ctx, l.key(k))
	if err == nil && !bytes.Equal(got, l.val(k)) {
		err = fmt.Errorf("value %.8q…, want %.8q…", got, l.val(k))
	}
	if err != nil {
		return fmt.Errorf("get %s: %w", l.key(k), err)
	}
	return nil
}

// unavailableGets sums the nodes' reads answered unavailable while
// catching up (sum) and between two epochs' gossip (stale).
func unavailableGets(c *cluster.Cluster) (sum, stale uint64) {
	for i := range c.N() {
		if n := c.Node(i); n != nil {
			st := n.Stats()
			sum += st.UnavailableGets
			stale += st.StaleLayoutGets
		}
	}
	return sum, stale
}
