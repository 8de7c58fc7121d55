package p4rt_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	p4config "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/model/p4rtserver"
)

// testInfo is a one-table P4Info: t(k: bit<16>) → set(port: bit<9>).
func testInfo() *p4config.P4Info {
	return &p4config.P4Info{
		Tables: []*p4config.Table{{
			Preamble:    &p4config.Preamble{Id: 1, Name: "Ingress.t", Alias: "t"},
			MatchFields: []*p4config.MatchField{{Id: 1, Name: "k", Bitwidth: 16, Match: &p4config.MatchField_MatchType_{MatchType: p4config.MatchField_EXACT}}},
			ActionRefs:  []*p4config.ActionRef{{Id: 10}},
			Size:        16,
		}},
		Actions: []*p4config.Action{{
			Preamble: &p4config.Preamble{Id: 10, Name: "Ingress.set", Alias: "set"},
			Params:   []*p4config.Action_Param{{Id: 1, Name: "port", Bitwidth: 9}},
		}},
		Counters: []*p4config.Counter{{
			Preamble: &p4config.Preamble{Id: 20, Name: "Ingress.hits", Alias: "hits"},
			Spec:     &p4config.CounterSpec{Unit: p4config.CounterSpec_PACKETS}, Size: 4,
		}},
	}
}

type recTarget struct{ applied []string }

func (r *recTarget) SetPipeline(*p4config.P4Info, []byte) error { return nil }
func (r *recTarget) ApplyTable(t p4.Update_Type, tbl *p4config.Table, a *p4config.Action, e *p4.TableEntry) error {
	r.applied = append(r.applied, t.String()+" "+tbl.GetPreamble().GetAlias())
	return nil
}
func (r *recTarget) ApplyMulticast(p4.Update_Type, *p4.MulticastGroupEntry) error { return nil }
func (r *recTarget) ReadCounter(c *p4config.Counter, i int64) (*p4.CounterData, error) {
	return &p4.CounterData{PacketCount: 100 + i}, nil
}

func serve(t *testing.T) (string, *recTarget) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tgt := &recTarget{}
	gs := grpc.NewServer()
	p4.RegisterP4RuntimeServer(gs, p4rtserver.New(1, tgt))
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), tgt
}

func dial(t *testing.T, addr string, election uint64) (*p4rt.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := p4rt.Dial(ctx, p4rt.Config{Addr: addr, DeviceID: 1, Election: election})
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func TestArbitrationAndWrites(t *testing.T) {
	addr, tgt := serve(t)
	ctx := context.Background()
	primary, err := dial(t, addr, 10)
	if err != nil {
		t.Fatalf("primary: %v", err)
	}
	backup, err := dial(t, addr, 5)
	if !errors.Is(err, p4rt.ErrNotPrimary) {
		t.Fatalf("lower election id: got %v, want ErrNotPrimary", err)
	}
	// A pipeline push and a write without mastership are refused.
	if err := backup.SetPipeline(ctx, testInfo(), nil); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("backup pipeline push: got %v, want PermissionDenied", err)
	}
	if err := primary.SetPipeline(ctx, testInfo(), nil); err != nil {
		t.Fatal(err)
	}
	s := p4rt.NewSchema(testInfo())
	e, err := s.Entry("t", []p4rt.Match{{Field: "k", Value: []byte{0, 0, 7}}}, "set", p4rt.Param{Name: "port", Value: p4rt.Uint(3)})
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.Write(ctx, p4rt.Insert(e)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("backup write: got %v, want PermissionDenied", err)
	}
	if err := primary.Write(ctx, p4rt.Insert(e)); err != nil {
		t.Fatal(err)
	}
	if err := primary.Write(ctx, p4rt.Insert(e)); status.Code(err) != codes.Unknown {
		t.Fatalf("duplicate insert: got %v, want a batch error", err)
	}
	got, err := primary.ReadTable(ctx, 1)
	if err != nil || len(got) != 1 || string(got[0].GetMatch()[0].GetExact().GetValue()) != "\x07" {
		t.Fatalf("read back %v, %v: want one entry with canonical key 0x07", got, err)
	}
	if len(tgt.applied) != 1 || tgt.applied[0] != "INSERT t" {
		t.Fatalf("target saw %v", tgt.applied)
	}
	cs, err := primary.ReadCounter(ctx, 20)
	if err != nil || len(cs) != 4 || cs[2].GetData().GetPacketCount() != 102 {
		t.Fatalf("counter read %v, %v", cs, err)
	}

	// When the primary leaves, the backup is told it is primary.
	primary.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !backup.Primary() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !backup.Primary() {
		t.Fatal("backup never became primary after the primary left")
	}
	if err := backup.Write(ctx, p4rt.Delete(e)); err != nil {
		t.Fatalf("new primary's delete: %v", err)
	}
}

func TestEntryValidation(t *testing.T) {
	addr, _ := serve(t)
	ctx := context.Background()
	c, err := dial(t, addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetPipeline(ctx, testInfo(), nil); err != nil {
		t.Fatal(err)
	}
	s := p4rt.NewSchema(testInfo())
	if _, err := s.Entry("nope", nil, "set"); err == nil {
		t.Error("unknown table accepted by the schema")
	}
	if _, err := s.Entry("t", []p4rt.Match{{Field: "k", Value: []byte{1, 0, 0}}}, "set"); err == nil {
		t.Error("17-bit value accepted for a 16-bit field")
	}
	// Entities the P4Info does not name get NOT_FOUND; padded values INVALID_ARGUMENT.
	bad := &p4.TableEntry{TableId: 99}
	err = c.Write(ctx, p4rt.Insert(bad))
	if code := batchCode(err); code != codes.NotFound {
		t.Errorf("unknown table id: got %v, want NotFound", err)
	}
	padded := &p4.TableEntry{TableId: 1, Match: []*p4.FieldMatch{{FieldId: 1, FieldMatchType: &p4.FieldMatch_Exact_{Exact: &p4.FieldMatch_Exact{Value: []byte{0, 7}}}}},
		Action: &p4.TableAction{Type: &p4.TableAction_Action{Action: &p4.Action{ActionId: 10, Params: []*p4.Action_Param{{ParamId: 1, Value: []byte{3}}}}}}}
	if code := batchCode(c.Write(ctx, p4rt.Insert(padded))); code != codes.InvalidArgument {
		t.Errorf("padded key: got %v, want InvalidArgument", code)
	}
	if _, err := c.Read(ctx, &p4.Entity{Entity: &p4.Entity_RegisterEntry{RegisterEntry: &p4.RegisterEntry{}}}); status.Code(err) != codes.Unimplemented {
		t.Errorf("register read: got %v, want Unimplemented", err)
	}
}

func TestStaleElectionIDRefused(t *testing.T) {
	addr, _ := serve(t)
	if _, err := dial(t, addr, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, addr, 7); err == nil || errors.Is(err, p4rt.ErrNotPrimary) {
		t.Fatalf("a second controller with the same election id: got %v, want the stream refused", err)
	}
}

// batchCode is the code of the first per-update error in a batch error.
func batchCode(err error) codes.Code {
	st, ok := status.FromError(err)
	if !ok {
		return codes.Unknown
	}
	for _, d := range st.Details() {
		if pe, ok := d.(*p4.Error); ok && pe.GetCanonicalCode() != 0 {
			return codes.Code(pe.GetCanonicalCode())
		}
	}
	return st.Code()
}

func TestCanonical(t *testing.T) {
	for _, c := range []struct{ in, want []byte }{
		{nil, []byte{0}}, {[]byte{0, 0}, []byte{0}}, {[]byte{0, 1, 0}, []byte{1, 0}}, {[]byte{5}, []byte{5}},
	} {
		if got := p4rt.Canonical(c.in); string(got) != string(c.want) {
			t.Errorf("Canonical(%x) = %x, want %x", c.in, got, c.want)
		}
	}
}

func TestUintCanonical(t *testing.T) {
	for _, tc := range []struct {
		v    uint64
		want []byte
	}{
		{0, []byte{0}}, {1, []byte{1}}, {255, []byte{0xff}}, {256, []byte{1, 0}},
		{0x12345678, []byte{0x12, 0x34, 0x56, 0x78}}, {1<<64 - 1, bytes.Repeat([]byte{0xff}, 8)},
	} {
		if got := p4rt.Uint(tc.v); !bytes.Equal(got, tc.want) {
			t.Errorf("Uint(%#x) = %x, want %x", tc.v, got, tc.want)
		}
	}
}
