package controller_test

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	p4config "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"

	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/model/p4rtserver"
	"github.com/netdir/netdir/wire"
)

// tableRecorder is a P4Runtime target that accepts every update the server
// validated against the pushed P4Info, and records the tables written.
type tableRecorder struct {
	mu     sync.Mutex
	tables map[string]int // alias -> updates
}

func (r *tableRecorder) SetPipeline(*p4config.P4Info, []byte) error { return nil }

func (r *tableRecorder) ApplyTable(_ p4.Update_Type, t *p4config.Table, _ *p4config.Action, _ *p4.TableEntry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tables[t.GetPreamble().GetAlias()]++
	return nil
}

func (r *tableRecorder) ApplyMulticast(p4.Update_Type, *p4.MulticastGroupEntry) error { return nil }

func (r *tableRecorder) ReadCounter(*p4config.Counter, int64) (*p4.CounterData, error) {
	return &p4.CounterData{}, nil
}

// TestP4PlaneOnEachP4Info: the controller's P4Runtime path on the committed
// P4Info of each back end, BMv2's (p4c-bm2-ss) and Tofino's (p4c-barefoot,
// TNA), whose names differ: Tofino's counters and registers carry the
// "pipe." prefix and are Tofino externs, not P4Runtime counters and
// registers, and its ids differ. On each, the schema resolves every
// counter and register the controller and the tools name (there are no
// digests: counters carry the hot-key data), and a P4Runtime server that
// checks every update's table, action, field and parameter ids and widths
// against that P4Info accepts the controller's whole programming: setup,
// an entry, new weights, hit and sketch reads, removal, which writes every
// table the controller owns.
func TestP4PlaneOnEachP4Info(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	build := filepath.Join(filepath.Dir(file), "..", "p4", "build")
	for _, c := range []struct{ name, p4info string }{
		{"bmv2", "netdir.p4info.txtpb"},
		{"tofino", filepath.Join("tofino", "netdir.p4info.txtpb")},
	} {
		t.Run(c.name, func(t *testing.T) {
			schema, err := p4rt.LoadSchema(filepath.Join(build, c.p4info))
			if err != nil {
				t.Fatal(err)
			}
			counters := []string{"slot_hits", "events", "drops", "switched"}
			for r := range directory.SketchRows {
				counters = append(counters, "sketch_row"+string(rune('0'+r)))
			}
			for _, n := range counters {
				if _, err := schema.Counter(n); err != nil {
					t.Error(err)
				}
			}
			for _, n := range []string{"ver_next", "ver_done", "fresh", "gen", "stamp_floor", "qos_done", "qos_res", "qos_done_mark", "qos_res_mark"} {
				if _, err := schema.Register(n); err != nil {
					t.Error(err)
				}
			}
			if d := schema.Info.GetDigests(); len(d) != 0 {
				t.Errorf("%d digests, want none", len(d))
			}
			programEveryTable(t, schema)
		})
	}
}

// programEveryTable runs the controller's programming of a switch against
// a validating P4Runtime server that holds schema's P4Info.
func programEveryTable(t *testing.T, schema *p4rt.Schema) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := &tableRecorder{tables: map[string]int{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	p4.RegisterP4RuntimeServer(gs, p4rtserver.New(1, rec))
	go gs.Serve(lis)
	defer gs.Stop()
	pc, err := p4rt.Dial(ctx, p4rt.Config{Addr: lis.Addr().String(), DeviceID: 1, Election: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()

	plane := controller.NewP4Plane("p4info", pc, schema)
	plane.Window = uint64(time.Millisecond)
	plane.Routes = []controller.Route{{Prefix: netip.MustParsePrefix("10.66.2.0/24"), Port: 100,
		SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}}
	if err := plane.PushPipeline(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var nodes []layout.Node
	for i := 1; i <= 4; i++ {
		nodes = append(nodes, layout.Node{ID: wire.NodeID(i), Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 66, 1, byte(i)}), 7420).String(),
			Port: uint32(i), MAC: layout.MAC{2, 0x4e, 0x44, 1, 0, byte(i)}})
	}
	m, err := layout.New(layout.Config{Epoch: 1, PartitionBits: 4, Replicas: 3, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	if err := plane.Setup(ctx, m, []uint32{100}); err != nil {
		t.Fatal(err)
	}
	key := []byte("hot")
	h := wire.HashKey(key)
	locs := append(m.ChainOf(h), 4)
	e := controller.Entry{Hash: h, Key: key, Slot: 7, Locs: locs, R: 3,
		Buckets: directory.BucketsForWeights(make([]uint32, len(locs))), Gen: 1, Ver: 1}
	if err := plane.InstallEntry(ctx, &e); err != nil {
		t.Fatal(err)
	}
	e.Buckets = directory.BucketsForWeights([]uint32{1, 1, 1, 5})
	if err := plane.SetSlotBuckets(ctx, &e); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.ReadHits(ctx, []uint32{e.Slot}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.ReadSketch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := plane.RemoveEntry(ctx, &e); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, table := range []string{"node_addr", "storage_ports", "partitions", "buckets_a", "buckets_b",
		"score_a", "score_b", "routes_v4", "slots", "slot_buckets_a", "slot_buckets_b", "members", "slot_chain"} {
		if rec.tables[table] == 0 {
			t.Errorf("table %s: no update accepted", table)
		}
	}
}
