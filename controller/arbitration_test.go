package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/controller/p4rt"
)

// arbitrationScenario holds a P4Runtime device at addr to the spec's
// mastership rules, with the netdir P4Info and the target's device config
// (nil for the software data plane, the BMv2 JSON for BMv2):
//   - a second controller with the primary's election id is refused;
//   - a controller with a higher election id takes over: the old primary is
//     told it lost mastership, and its writes and pipeline pushes, which
//     carry its now stale election id, are refused with PERMISSION_DENIED;
//   - a controller that arrives with a lower id is a backup, refused alike;
//   - when the primary leaves, the backup with the highest id is primary
//     and its writes are accepted.
func arbitrationScenario(ctx context.Context, t *testing.T, addr string, schema *p4rt.Schema, deviceConfig []byte) {
	t.Helper()
	dial := func(election uint64) (*p4rt.Client, error) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := p4rt.Dial(dctx, p4rt.Config{Addr: addr, DeviceID: 1, Election: election})
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	waitPrimary := func(c *p4rt.Client, want bool, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); c.Primary() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Primary() stayed %v", what, !want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	entry := func(node uint64) *p4.TableEntry {
		e, err := schema.Entry("node_addr", []p4rt.Match{{Field: "node", Value: p4rt.Uint(node)}}, "set_node_addr",
			p4rt.Param{Name: "mac", Value: []byte{2, 0, 0, 0, 0, byte(node)}}, p4rt.Param{Name: "ip", Value: []byte{10, 0, 0, byte(node)}},
			p4rt.Param{Name: "udp_port", Value: p4rt.Uint(7420)}, p4rt.Param{Name: "port", Value: p4rt.Uint(node)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	denied := func(err error, what string) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s: got %v, want PERMISSION_DENIED", what, err)
		}
	}

	first, err := dial(10)
	if err != nil {
		t.Fatalf("first controller: %v", err)
	}
	if err := first.SetPipeline(ctx, schema.Info, deviceConfig); err != nil {
		t.Fatalf("pipeline push by the primary: %v", err)
	}
	if err := first.Write(ctx, p4rt.Insert(entry(1))); err != nil {
		t.Fatalf("write by the primary: %v", err)
	}

	// The primary's election id again: refused, and no mastership change.
	if _, err := dial(10); err == nil || errors.Is(err, p4rt.ErrNotPrimary) {
		t.Fatalf("a second controller with election id 10: got %v, want the stream refused", err)
	}
	if !first.Primary() {
		t.Fatal("the primary lost mastership to a refused duplicate election id")
	}

	// A higher election id takes over.
	second, err := dial(20)
	if err != nil {
		t.Fatalf("controller with a higher election id: %v", err)
	}
	waitPrimary(first, false, "the old primary after a higher election id arrived")
	denied(first.Write(ctx, p4rt.Insert(entry(2))), "write with the stale election id")
	denied(first.SetPipeline(ctx, schema.Info, deviceConfig), "pipeline push without mastership")

	// A lower election id is a backup from the start.
	backup, err := dial(15)
	if !errors.Is(err, p4rt.ErrNotPrimary) {
		t.Fatalf("controller with a lower election id: got %v, want ErrNotPrimary", err)
	}
	denied(backup.SetPipeline(ctx, schema.Info, deviceConfig), "pipeline push by a backup")
	denied(backup.Write(ctx, p4rt.Insert(entry(2))), "write by a backup")

	if err := second.Write(ctx, p4rt.Insert(entry(2))); err != nil {
		t.Fatalf("write by the new primary: %v", err)
	}
	got, err := second.ReadTable(ctx, entry(1).GetTableId())
	if err != nil || len(got) != 2 {
		t.Fatalf("node_addr after the handover: %d entries (%v), want the two the primaries wrote", len(got), err)
	}

	// The primary leaves: the highest remaining id (15) takes over.
	second.Close()
	waitPrimary(backup, true, "the backup after the primary left")
	if first.Primary() {
		t.Fatal("the controller with the lowest election id became primary")
	}
	if err := backup.Write(ctx, p4rt.Delete(entry(2))); err != nil {
		t.Fatalf("write by the backup turned primary: %v", err)
	}
}

// TestArbitration runs the arbitration scenario on the software data
// plane's P4Runtime server.
func TestArbitration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, addr := serveModel(ctx, t, 4)
	arbitrationScenario(ctx, t, addr, p4info(t), nil)
}
