package controller_test

import (
	"context"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/model/p4rtserver"
	"github.com/netdir/netdir/storagenode/cluster"
	"github.com/netdir/netdir/wire"
)

// p4info is the committed P4Info of the netdir P4 program.
func p4info(t *testing.T) *p4rt.Schema {
	_, file, _, _ := runtime.Caller(0)
	s, err := p4rt.LoadSchema(filepath.Join(filepath.Dir(file), "..", "p4", "build", "netdir.p4info.txtpb"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEndToEndPromotion runs the controller against the software data
// plane's P4Runtime server over loopback gRPC, with real storage nodes and a
// real client: the pipeline is pushed, a hot key is promoted under a skewed
// load, its reads then spread over its copies through the data plane, and it
// is evicted once it cools.
func TestEndToEndPromotion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const bits = 4
	sw, err := model.New(model.Config{Listen: "127.0.0.1:0", Directory: directory.Config{PartitionBits: bits, Slots: 64}})
	if err != nil {
		t.Fatal(err)
	}
	go sw.Run(ctx)
	defer sw.Close()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	p4.RegisterP4RuntimeServer(gs, p4rtserver.New(1, model.NewP4Target(sw)))
	go gs.Serve(lis)
	defer gs.Stop()

	cl, err := cluster.Start(cluster.Options{N: 6, R: 3, PartitionBits: bits, Dir: t.TempDir(), DataPlane: sw.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	schema := p4info(t)
	pc, err := p4rt.Dial(ctx, p4rt.Config{Addr: lis.Addr().String(), DeviceID: 1, Election: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if err := pc.SetPipeline(ctx, schema.Info, nil); err != nil {
		t.Fatal(err)
	}
	var nodes []controller.NodeAddr
	for _, id := range cl.Layout.Nodes() {
		a, _ := cl.Layout.Addr(id)
		nodes = append(nodes, controller.NodeAddr{ID: id, Addr: a.String()})
	}
	ctl, err := controller.New(controller.Config{PartitionBits: bits, Replicas: 3, Nodes: nodes, PromoteMin: 20},
		[]controller.DataPlane{controller.NewP4Plane("model", pc, schema)}, &controller.UDPStorage{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := cl.Client(client.Options{Service: sw.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	hot := []byte("hot-key")
	if _, err := c.Put(ctx, hot, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	// The controller knows no key names from the data plane (it sees hashes);
	// nodes report them. Here the test reports what a node would.
	for i := 0; i < 200; i++ {
		if _, _, err := c.Get(ctx, hot); err != nil {
			t.Fatal(err)
		}
	}
	ctl.Report(&api.NodeStats{Node: 1, Version: 1, HotKeys: []*api.KeyCount{{Key: hot, Count: 200}}})
	if err := ctl.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	es := ctl.Entries()
	if len(es) != 1 || string(es[0].Key) != string(hot) || len(es[0].Locs) <= es[0].R {
		t.Fatalf("directory after the skewed round: %+v, want %q with extra copies", es, hot)
	}
	if _, ok := sw.Lookup(wire.HashKey(hot)); !ok {
		t.Fatal("the controller's entry never reached the software data plane")
	}

	// Extras serve once their VSBs are accepted; wait (bounded) until reads
	// reach every location, checking every read's value.
	want := map[wire.NodeID]bool{}
	for _, n := range es[0].Locs {
		want[n] = true
	}
	seen := map[wire.NodeID]int{}
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < len(want) && time.Now().Before(deadline) {
		for i := 0; i < 100; i++ {
			r, err := c.GetResult(ctx, hot)
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Value) != "v1" {
				t.Fatalf("read %q from node %d, want v1", r.Value, r.Node)
			}
			if !want[r.Node] {
				t.Fatalf("read served by node %d outside the LocationList %v", r.Node, es[0].Locs)
			}
			seen[r.Node]++
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("reads reached %v, want every location of %v", seen, es[0].Locs)
	}

	// A write after promotion is stamped by the data plane and read back
	// everywhere.
	if _, err := c.Put(ctx, hot, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		v, _, err := c.Get(ctx, hot)
		if err != nil {
			t.Fatal(err)
		}
		if string(v) != "v2" {
			t.Fatalf("read %q after the acknowledged write of v2", v)
		}
	}

	// Cold rounds evict it from the data plane.
	for i := 0; i < 4; i++ {
		if err := ctl.HotKeyRound(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := sw.Lookup(wire.HashKey(hot)); ok || len(ctl.Entries()) != 0 {
		t.Fatalf("hot key not evicted after cooling: %v", ctl.Entries())
	}
}
