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

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/model/p4rtserver"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// p4info is the committed P4Info of the netdir P4 program.
func p4info(t testing.TB) *p4rt.Schema {
	_, file, _, _ := runtime.Caller(0)
	s, err := p4rt.LoadSchema(filepath.Join(filepath.Dir(file), "..", "p4", "build", "netdir.p4info.txtpb"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serveModel runs the software data plane (partitionBits, 64 slots) and its
// P4Runtime server on loopback until the test ends; it returns the switch
// and the server's address.
func serveModel(ctx context.Context, t testing.TB, partitionBits uint) (*model.Switch, string) {
	t.Helper()
	return serveModelSlots(ctx, t, partitionBits, 64)
}

// serveModelSlots is serveModel with a directory of slots entries.
func serveModelSlots(ctx context.Context, t testing.TB, partitionBits uint, slots int) (*model.Switch, string) {
	t.Helper()
	sw, err := model.New(model.Config{Listen: "127.0.0.1:0", Directory: directory.Config{PartitionBits: partitionBits, Slots: slots}})
	if err != nil {
		t.Fatal(err)
	}
	go sw.Run(ctx)
	t.Cleanup(func() { sw.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	p4.RegisterP4RuntimeServer(gs, p4rtserver.New(1, model.NewP4Target(sw)))
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return sw, lis.Addr().String()
}

// e2eEnv is the controller in front of one data plane with real storage
// nodes behind it: what the promotion scenario needs, whichever data plane
// (the software one over loopback, BMv2 in network namespaces).
type e2eEnv struct {
	ctl    *controller.Controller
	client *client.Client // reaches the nodes through the data plane
	nodes  []*storagenode.Node
	// installed reports whether the data plane holds a directory entry for
	// the hash.
	installed func(wire.KeyHash) (bool, error)
	// inNet runs f where the controller reaches the chain heads from (nil:
	// here), for hot-key rounds, which promote and demote at the heads.
	inNet func(f func() error) error
}

// do runs f in the controller's network (see inNet).
func (env *e2eEnv) do(f func() error) error {
	if env.inNet == nil {
		return f()
	}
	return env.inNet(f)
}

// round runs one hot-key round.
func (env *e2eEnv) round(ctx context.Context) error {
	return env.do(func() error { return env.ctl.HotKeyRound(ctx) })
}

// Bounds of the scenario's load loops: requests per burst, and the reads
// and time that reads may take to reach every copy. The copies' first VSBs
// reach the data plane before its slot exists (the head is promoted first)
// and are refused; the extras re-send them every 500 ms, so 100-read rounds
// must cover a few such periods on a fast machine.
const (
	e2eBurst      = 200
	e2eSpreadIter = 400
	e2eSpreadTime = 30 * time.Second
)

// reportHotKeys sends the controller every node's hot-key report, as the
// nodes do over the API (netdir node --controller).
func (env *e2eEnv) reportHotKeys() {
	for _, n := range env.nodes {
		env.ctl.Report(controller.NodeReport{Node: n.ID(), Version: uint64(time.Now().UnixNano()), HotKeys: n.HotKeys(8)})
	}
}

// gets counts the GETs each node has served.
func (env *e2eEnv) gets() map[wire.NodeID]uint64 {
	m := map[wire.NodeID]uint64{}
	for _, n := range env.nodes {
		m[n.ID()] = n.Stats().Gets
	}
	return m
}

// promotionScenario: the pipeline has been pushed and the controller set
// up. A skewed load makes one key hot; the nodes report it and a hot-key
// round promotes it with extra copies; its reads then spread over every copy
// through the data plane (counted at the nodes, every value checked); a
// write after promotion is read back everywhere; cold rounds evict it from
// the data plane and the heads; the next key promoted into its slot counts
// only its own hits. The controller must have capacity 1.
func promotionScenario(ctx context.Context, t *testing.T, env *e2eEnv) {
	t.Helper()
	c := env.client
	hot := []byte("hot-key")
	if _, err := c.Put(ctx, hot, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	for _, n := range env.nodes {
		n.HotKeys(8) // start the nodes' counts from here
	}
	for i := 0; i < e2eBurst; i++ {
		if _, _, err := c.Get(ctx, hot); err != nil {
			t.Fatal(err)
		}
	}
	env.reportHotKeys()
	if err := env.round(ctx); err != nil {
		t.Fatal(err)
	}
	es := env.ctl.Entries()
	if len(es) != 1 || string(es[0].Key) != string(hot) || len(es[0].Locs) <= es[0].R {
		t.Fatalf("directory after the skewed round: %+v, want %q with extra copies", es, hot)
	}
	e := es[0]
	if ok, err := env.installed(e.Hash); err != nil || !ok {
		t.Fatalf("the controller's entry is not in the data plane (%v)", err)
	}

	// Extras serve once their VSBs are accepted; read (bounded in count and
	// time) until every location has served, checking every read's value
	// and counting at the nodes.
	want := map[wire.NodeID]bool{}
	for _, n := range e.Locs {
		want[n] = true
	}
	before := env.gets()
	seen := map[wire.NodeID]int{}
	deadline := time.Now().Add(e2eSpreadTime)
	for it := 0; len(seen) < len(want) && it < e2eSpreadIter && time.Now().Before(deadline); it++ {
		for i := 0; i < 100; i++ {
			r, err := c.GetResult(ctx, hot)
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Value) != "v1" {
				t.Fatalf("read %q from node %d, want v1", r.Value, r.Node)
			}
			if !want[r.Node] {
				t.Fatalf("read served by node %d outside the LocationList %v", r.Node, e.Locs)
			}
			seen[r.Node]++
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("replies came from %v, want every location of %v", seen, e.Locs)
	}
	after := env.gets()
	for id := range after {
		d := after[id] - before[id]
		switch {
		case want[id] && d == 0:
			t.Errorf("location %d served no GET by its own count (replies named it %d times)", id, seen[id])
		case !want[id] && d != 0:
			t.Errorf("node %d outside the LocationList %v served %d GETs", id, e.Locs, d)
		}
	}
	t.Logf("reads over the copies of %q (chain %v, extras %v): replies %v", hot, e.Locs[:e.R], e.Locs[e.R:], seen)

	// A write after promotion is stamped by the data plane and read back
	// everywhere.
	if _, err := c.Put(ctx, hot, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < e2eBurst; i++ {
		v, _, err := c.Get(ctx, hot)
		if err != nil {
			t.Fatal(err)
		}
		if string(v) != "v2" {
			t.Fatalf("read %q after the acknowledged write of v2", v)
		}
	}

	// Cold rounds (no load, no reports) evict it from the data plane, and
	// the head drops the promotion and the extras their copies.
	for i := 0; i < 4; i++ {
		if err := env.round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(env.ctl.Entries()) != 0 {
		t.Fatalf("hot key not evicted after cooling: %v", env.ctl.Entries())
	}
	if ok, err := env.installed(e.Hash); err != nil || ok {
		t.Fatalf("evicted entry still in the data plane (%v)", err)
	}
	held := func() []wire.NodeID {
		var out []wire.NodeID
		for _, n := range env.nodes {
			_, copy := n.Copies()[e.Hash]
			_, promo := n.Promoted()[e.Hash]
			if copy || promo {
				out = append(out, n.ID())
			}
		}
		return out
	}
	for deadline := time.Now().Add(5 * time.Second); len(held()) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if h := held(); len(h) > 0 {
		t.Fatalf("nodes %v still hold a copy or the promotion of %q after eviction", h, hot)
	}

	// The next key promoted reuses the slot (the controller's capacity is
	// one): its hit count is its own, although a P4 switch's counter cell
	// still holds the evicted key's hits.
	next := []byte("next-key")
	if _, err := c.Put(ctx, next, []byte("n1")); err != nil {
		t.Fatal(err)
	}
	var pe controller.Entry
	if err := env.do(func() (err error) { pe, err = env.ctl.Pin(ctx, next); return err }); err != nil {
		t.Fatal(err)
	}
	if pe.Slot != e.Slot {
		t.Fatalf("%q got slot %d, want the evicted key's %d (the test's controller has one slot)", next, pe.Slot, e.Slot)
	}
	const reads = 50
	for i := 0; i < reads; i++ {
		if v, _, err := c.Get(ctx, next); err != nil || string(v) != "n1" {
			t.Fatalf("read %q, %v: want n1", v, err)
		}
	}
	if err := env.round(ctx); err != nil {
		t.Fatal(err)
	}
	// Resent requests (a client timeout) may add some hits; the evicted
	// key's were hundreds.
	if es := env.ctl.Entries(); len(es) != 1 || es[0].Hits < reads || es[0].Hits > 2*reads {
		t.Fatalf("after %d reads of %q in a reused slot: %+v, want about %d hits", reads, next, es, reads)
	}
	if err := env.do(func() error { return env.ctl.Unpin(ctx, next) }); err != nil {
		t.Fatal(err)
	}
}

// TestEndToEndPromotion runs the promotion scenario with the controller
// driving the software data plane's P4Runtime server over loopback gRPC,
// real storage nodes and a real client.
func TestEndToEndPromotion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const bits = 4
	sw, addr := serveModel(ctx, t, bits)
	cl, err := cluster.Start(cluster.Options{N: 6, R: 3, PartitionBits: bits, Dir: t.TempDir(), DataPlane: sw.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	schema := p4info(t)
	pc, err := p4rt.Dial(ctx, p4rt.Config{Addr: addr, DeviceID: 1, Election: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if err := pc.SetPipeline(ctx, schema.Info, nil); err != nil {
		t.Fatal(err)
	}
	ctl, err := controller.New(controller.Config{Layout: cl.Layout, PromoteMin: 20, Capacity: 1},
		[]controller.DataPlane{controller.NewP4Plane("model", pc, schema)}, &controller.UDPStorage{Auth: cl.NewAuth()})
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
	env := &e2eEnv{ctl: ctl, client: c, installed: func(h wire.KeyHash) (bool, error) {
		_, ok := sw.Lookup(h)
		return ok, nil
	}}
	for i := 0; i < cl.N(); i++ {
		env.nodes = append(env.nodes, cl.Node(i))
	}
	promotionScenario(ctx, t, env)
}
