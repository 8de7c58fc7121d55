package controller_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
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
			resolveEveryEntity(t, schema)
			programEveryTable(t, schema)
		})
	}
}

// TestP4InfosAgree: the controller programs BMv2 and Tofino with the same
// names, so the two committed P4Infos must have the same tables (keys by
// name, match kind and width), actions (parameters by name and width) and
// registers, by alias, but for each architecture's own: v1model's clock
// table and its actions, TNA's sample action, TNA's register copies and
// scratch cells (p4/tna: a register is read once per packet), the actions
// of TNA's coherence tables (hidden: one table per register picks its
// RegisterAction, p4/tna/coherence.p4), and the score tables' latency key,
// 20 bits on Tofino.
func TestP4InfosAgree(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	build := filepath.Join(filepath.Dir(file), "..", "p4", "build")
	bmv2, err := p4rt.LoadSchema(filepath.Join(build, "netdir.p4info.txtpb"))
	if err != nil {
		t.Fatal(err)
	}
	tofino, err := p4rt.LoadSchema(filepath.Join(build, "tofino", "netdir.p4info.txtpb"))
	if err != nil {
		t.Fatal(err)
	}
	compare := func(kind string, b, f map[string]string, bmv2Only, tofinoOnly []string) {
		t.Helper()
		for _, n := range bmv2Only {
			delete(b, n)
		}
		for _, n := range tofinoOnly {
			delete(f, n)
		}
		for n, sig := range b {
			if fsig, ok := f[n]; !ok {
				t.Errorf("%s %s: in BMv2's P4Info only", kind, n)
			} else if fsig != sig {
				t.Errorf("%s %s: BMv2 %s, Tofino %s", kind, n, sig, fsig)
			}
		}
		for n := range f {
			if _, ok := b[n]; !ok {
				t.Errorf("%s %s: in Tofino's P4Info only", kind, n)
			}
		}
	}
	b, f := tableSigs(bmv2), tableSigs(tofino)
	// Tofino's range key is the latency's low 20 bits (p4/tna/arch.p4).
	for _, n := range []string{"score_a", "score_b"} {
		if b[n] != "latency:RANGE:32 " || f[n] != "latency:RANGE:20 " {
			t.Errorf("table %s: BMv2 %q, Tofino %q; want 32- and 20-bit latency ranges", n, b[n], f[n])
		}
		delete(b, n)
		delete(f, n)
	}
	compare("table", b, f, []string{"clock"}, nil)
	// Tofino's own hidden tables' actions: coherence's and node stats'
	// one table per register, the top level's decisions, the egress tail's
	// bridged inputs.
	var tofinoActions []string
	for _, a := range tofino.Info.GetActions() {
		name := a.GetPreamble().GetName()
		if strings.HasPrefix(name, "NetdirIngress.netdir.coherence.") ||
			strings.HasPrefix(name, "NetdirIngress.netdir.node_stats.") ||
			strings.HasPrefix(name, "NetdirEgress.") ||
			(strings.HasPrefix(name, "NetdirIngress.") && !strings.HasPrefix(name, "NetdirIngress.netdir.")) {
			tofinoActions = append(tofinoActions, a.GetPreamble().GetAlias())
		}
	}
	compare("action", actionSigs(bmv2), actionSigs(tofino), []string{"switch_clock", "fixed_clock"}, tofinoActions)
	compare("register", registerSigs(bmv2), registerSigs(tofino), []string{"latency", "load"},
		[]string{"latency_a", "latency_b", "load_a", "load_b", "seed_cmp", "floor_cmp"})
}

// tableSigs: each table by alias, with its keys (name, kind, width).
func tableSigs(s *p4rt.Schema) map[string]string {
	out := map[string]string{}
	for _, tb := range s.Info.GetTables() {
		sig := ""
		for _, f := range tb.GetMatchFields() {
			sig += fmt.Sprintf("%s:%v:%d ", f.GetName(), f.GetMatchType(), f.GetBitwidth())
		}
		out[tb.GetPreamble().GetAlias()] = sig
	}
	return out
}

// actionSigs: each action by alias, with its parameters (name, width).
func actionSigs(s *p4rt.Schema) map[string]string {
	out := map[string]string{}
	for _, a := range s.Info.GetActions() {
		sig := ""
		for _, p := range a.GetParams() {
			sig += fmt.Sprintf("%s:%d ", p.GetName(), p.GetBitwidth())
		}
		out[a.GetPreamble().GetAlias()] = sig
	}
	return out
}

// registerSigs: each register by alias (standard or Tofino extern).
func registerSigs(s *p4rt.Schema) map[string]string {
	out := map[string]string{}
	for _, r := range append(s.Info.GetRegisters(), p4rt.TofinoRegisters(s.Info)...) {
		out[r.GetPreamble().GetAlias()] = ""
	}
	return out
}

// resolveEveryEntity: the schema finds every table, action, counter,
// register and digest of its P4Info by full name and by alias, and finds
// that entity (same id): no two of a kind share an alias.
func resolveEveryEntity(t *testing.T, s *p4rt.Schema) {
	t.Helper()
	type preambled interface{ GetPreamble() *p4config.Preamble }
	type lookup func(string) (preambled, error)
	var entities []preambled
	var lookups []lookup
	add := func(l lookup, es ...preambled) {
		for _, e := range es {
			entities = append(entities, e)
			lookups = append(lookups, l)
		}
	}
	for _, e := range s.Info.GetTables() {
		add(func(n string) (preambled, error) { return s.Table(n) }, e)
	}
	for _, e := range s.Info.GetActions() {
		add(func(n string) (preambled, error) { return s.Action(n) }, e)
	}
	for _, e := range append(s.Info.GetCounters(), p4rt.TofinoCounters(s.Info)...) {
		add(func(n string) (preambled, error) { return s.Counter(n) }, e)
	}
	for _, e := range append(s.Info.GetRegisters(), p4rt.TofinoRegisters(s.Info)...) {
		add(func(n string) (preambled, error) { return s.Register(n) }, e)
	}
	for _, e := range s.Info.GetDigests() {
		add(func(n string) (preambled, error) { return s.Digest(n) }, e)
	}
	if len(entities) == 0 {
		t.Fatal("an empty P4Info")
	}
	for i, e := range entities {
		p := e.GetPreamble()
		for _, n := range []string{p.GetName(), p.GetAlias()} {
			got, err := lookups[i](n)
			if err != nil {
				t.Error(err)
			} else if id := got.GetPreamble().GetId(); id != p.GetId() {
				t.Errorf("%q resolves to %s (id %d), want %s (id %d)", n, got.GetPreamble().GetName(), id, p.GetName(), p.GetId())
			}
		}
	}
}

// TestP4PlaneWindowFitsScoreKey: the controller refuses a fine-score
// window that the score tables' latency key cannot keep clear of clamped
// latencies (Tofino's 20-bit key), before it writes anything, and takes
// the largest that fits.
func TestP4PlaneWindowFitsScoreKey(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	schema, err := p4rt.LoadSchema(filepath.Join(filepath.Dir(file), "..", "p4", "build", "tofino", "netdir.p4info.txtpb"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		window uint64
		ok     bool
	}{{1<<20 - 2, true}, {1<<20 - 1, false}, {1 << 20, false}} {
		plane, rec := dialPlane(t, schema)
		plane.Window = c.window
		m, err := layout.New(layout.Config{Epoch: 1, PartitionBits: 2, Replicas: 1,
			Nodes: []layout.Node{{ID: 1, Addr: "10.66.1.1:7420", Port: 1, MAC: layout.MAC{2, 0x4e, 0x44, 1, 0, 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		err = plane.Setup(context.Background(), m, nil)
		rec.mu.Lock()
		writes := len(rec.tables)
		rec.mu.Unlock()
		switch {
		case c.ok && err != nil:
			t.Errorf("window %d: %v", c.window, err)
		case !c.ok && err == nil:
			t.Errorf("window %d: accepted; the 20-bit key's clamped latency would score", c.window)
		case !c.ok && writes != 0:
			t.Errorf("window %d: refused after writing %d tables", c.window, writes)
		}
	}
}

// dialPlane connects a P4Plane to a P4Runtime server that validates every
// update against schema's P4Info and records the tables written.
func dialPlane(t *testing.T, schema *p4rt.Schema) (*controller.P4Plane, *tableRecorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	rec := &tableRecorder{tables: map[string]int{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	p4.RegisterP4RuntimeServer(gs, p4rtserver.New(1, rec))
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	pc, err := p4rt.Dial(ctx, p4rt.Config{Addr: lis.Addr().String(), DeviceID: 1, Election: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	plane := controller.NewP4Plane("p4info", pc, schema)
	if err := plane.PushPipeline(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return plane, rec
}

// programEveryTable runs the controller's programming of a switch against
// a validating P4Runtime server that holds schema's P4Info.
func programEveryTable(t *testing.T, schema *p4rt.Schema) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plane, rec := dialPlane(t, schema)
	plane.Window = uint64(time.Millisecond)
	plane.Routes = []controller.Route{{Prefix: netip.MustParsePrefix("10.66.2.0/24"), Port: 100,
		SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}}
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
	for _, table := range []string{"node_addr", "node_addr_b", "storage_ports", "partitions", "buckets_a", "buckets_b",
		"score_a", "score_b", "routes_v4", "slots", "slot_buckets_a", "slot_buckets_b", "members"} {
		if rec.tables[table] == 0 {
			t.Errorf("table %s: no update accepted", table)
		}
	}
}
