package controller_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/wire"
)

// TestCoarseEpochReachesEveryPlane: a hot key is weighted 30:1:1 onto node 1
// of its chain, so node 1 serves most of the cluster's reads; one epoch of
// the coarse loop moves load off it, and the partition and hot-key bucket
// tables that realise E reach both software switches (over P4Runtime) and an
// agent watching the controller's API.
func TestCoarseEpochReachesEveryPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const bits = 4
	schema := p4info(t)
	var (
		switches []*model.Switch
		planes   []controller.DataPlane
	)
	for i := range 2 {
		sw, addr := serveModel(ctx, t, bits)
		pc, err := p4rt.Dial(ctx, p4rt.Config{Addr: addr, DeviceID: 1, Election: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		if err := pc.SetPipeline(ctx, schema.Info, nil); err != nil {
			t.Fatal(err)
		}
		switches = append(switches, sw)
		planes = append(planes, controller.NewP4Plane(fmt.Sprintf("model%d", i), pc, schema))
	}
	var nodes []layout.Node
	for id := range wire.NodeID(4) {
		nodes = append(nodes, layout.Node{ID: id + 1, Addr: fmt.Sprintf("127.0.0.1:%d", 9+id)})
	}
	lay, err := layout.New(layout.Config{PartitionBits: bits, Replicas: 3, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := controller.New(controller.Config{Layout: lay,
		// Capacity far above the load: the epoch's counts, scaled to L by
		// however long the test took, never bound the moves.
		Epoch: 5 * time.Second, NodeCapacity: 1e9}, planes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	updates := watch(ctx, t, ctl)
	// The nodes' first reports are the baseline that later epochs count from.
	report := func(version uint64, reads func(n wire.NodeID, pos int) uint64) {
		for _, n := range nodes {
			s := controller.NodeReport{Node: n.ID, Version: version}
			for j := range 3 {
				s.Trees = append(s.Trees, controller.TreeReport{Position: uint32(j), Reads: reads(n.ID, j), MeanReadLatency: 10 * time.Microsecond})
			}
			ctl.Report(s)
		}
	}
	report(1, func(wire.NodeID, int) uint64 { return 0 })
	if _, err := ctl.CoarseRound(ctx); err != nil {
		t.Fatal(err)
	}

	// A hot key on node 1's chains, hit through the first switch.
	var key []byte
	for i := 0; ; i++ {
		key = []byte(fmt.Sprintf("hot%d", i))
		if slices.Contains(ctl.Layout().ChainOf(wire.HashKey(key)), 1) {
			break
		}
	}
	if _, err := ctl.Pin(ctx, key); err != nil {
		t.Fatal(err)
	}
	chain := ctl.Layout().ChainOf(wire.HashKey(key))
	weights := []uint32{1, 1, 1}
	weights[slices.Index(chain, 1)] = 30
	if err := ctl.SetKeyWeights(ctx, key, weights); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(switches[0].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const sent = 1000
	for i := range sent {
		b, _ := (&wire.Packet{Header: wire.Header{Op: wire.OpGet, ReqID: uint64(i + 1), KeyHash: wire.HashKey(key)}, Key: key}).AppendEncode(nil)
		conn.Write(b)
	}
	// Until the count stops growing (the switch has taken what loopback
	// did not drop), bounded in time.
	var hits uint64
	for prev, deadline := uint64(1<<62), time.Now().Add(10*time.Second); (hits == 0 || hits != prev) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		prev = hits
		s, _ := switches[0].Lookup(wire.HashKey(key))
		hits = s.Hits
	}
	if hits < sent/2 {
		t.Fatalf("the switch counted %d hits of %d GETs", hits, sent)
	}
	if err := ctl.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	// Each node serves 100 reads per tree, and the chain members serve the
	// key's reads by its weights (30, 1 and 1 buckets of 32).
	report(2, func(n wire.NodeID, j int) uint64 {
		if chain[j] == n {
			return 100 + hits*uint64(weights[j])/32
		}
		return 100
	})

	plan, err := ctl.CoarseRound(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every partition's buckets are the plan's, or, where the plan moved no
	// member's share by more than a bucket, the even ones still installed.
	m := ctl.Layout()
	parts, err := controller.NewAPI(ctl).ListPartitions(ctx, &api.ListPartitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	installed := make([][]uint8, m.Partitions())
	moved := false
	for p, ap := range parts.GetPartitions() {
		for _, x := range ap.GetBuckets() {
			installed[p] = append(installed[p], uint8(x))
		}
		even := directory.BucketsForWeights(make([]uint32, len(m.Chain(uint32(p)))))
		if want := directory.BucketsForWeights(plan.Partitions[p]); !slices.Equal(installed[p], even) && !slices.Equal(installed[p], want) {
			t.Fatalf("partition %d: controller installed %v, plan %v", p, installed[p], want)
		}
		if m.Chain(uint32(p))[0] == 1 && slices.Equal(installed[p], directory.BucketsForWeights(plan.Partitions[p])) &&
			plan.Partitions[p][0] < 65536/3-2048 {
			moved = true
		}
		// The model rebuilds a chain from the bucket entries' nodes, so
		// compare the nodes that the buckets name.
		for i, sw := range switches {
			got, _ := sw.Partition(uint32(p))
			for b, x := range installed[p] {
				if got.Chain[got.Buckets[b]] != m.Chain(uint32(p))[x] {
					t.Fatalf("switch %d partition %d bucket %d names node %d, want %d", i, p, b, got.Chain[got.Buckets[b]], m.Chain(uint32(p))[x])
				}
			}
		}
	}
	if !moved {
		t.Errorf("no partition headed by the overloaded node 1 lost a bucket: %v", plan.Partitions)
	}
	es := ctl.Entries()
	if len(es) != 1 {
		t.Fatalf("%d entries", len(es))
	}
	wantKey := directory.BucketsForWeights(plan.HotKeys[0])
	if !slices.Equal(es[0].Buckets, wantKey) {
		t.Fatalf("controller holds key buckets %v, plan %v", es[0].Buckets, wantKey)
	}
	for i, sw := range switches {
		s, ok := sw.Lookup(wire.HashKey(key))
		if !ok || !slices.Equal(s.Buckets[:], wantKey) {
			t.Fatalf("switch %d slot buckets %v, want %v", i, s.Buckets, wantKey)
		}
	}
	if n := slices.Index(es[0].Locs, 1); plan.HotKeys[0][n] >= 65536*30/32 {
		t.Errorf("the hot key's weights %v over %v keep node 1's 30 of 32 buckets", plan.HotKeys[0], es[0].Locs)
	}

	// The agent saw the same partitions and key weights.
	gotParts, gotKey := false, false
	for !gotParts || !gotKey {
		var u *api.DirectoryUpdate
		select {
		case u = <-updates:
		case <-ctx.Done():
			t.Fatalf("agent stream: partitions %v, key %v", gotParts, gotKey)
		}
		switch u.GetKind() {
		case api.DirectoryUpdate_PARTITIONS:
			gotParts = true
			for p, ap := range u.GetPartitions() {
				for b, x := range ap.GetBuckets() {
					if uint8(x) != installed[p][b] {
						t.Fatalf("agent partition %d buckets %v, want %v", p, ap.GetBuckets(), installed[p])
					}
				}
			}
		case api.DirectoryUpdate_UPSERT:
			for _, e := range u.GetEntries() {
				got := make([]uint8, len(e.GetBuckets()))
				for b, x := range e.GetBuckets() {
					got[b] = uint8(x)
				}
				gotKey = gotKey || slices.Equal(got, wantKey)
			}
		}
	}

	shares := ctl.ExpectedShares()
	var sum float64
	for _, s := range shares {
		sum += s
	}
	if len(shares) != len(nodes) || math.Abs(sum-1) > 1e-9 {
		t.Errorf("expected shares %v", shares)
	}
}

// serveAPI serves ctl's API on loopback until the test ends and returns a
// client of it.
func serveAPI(t *testing.T, ctl *controller.Controller) api.ControllerClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	api.RegisterControllerServer(gs, controller.NewAPI(ctl))
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return api.NewControllerClient(conn)
}

// watch subscribes to the controller's directory stream as an agent does.
func watch(ctx context.Context, t *testing.T, ctl *controller.Controller) <-chan *api.DirectoryUpdate {
	t.Helper()
	stream, err := serveAPI(t, ctl).WatchDirectory(ctx, &api.WatchDirectoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the snapshot
		t.Fatal(err)
	}
	out := make(chan *api.DirectoryUpdate, 64)
	go func() {
		for {
			u, err := stream.Recv()
			if err != nil {
				return
			}
			out <- u
		}
	}()
	return out
}
