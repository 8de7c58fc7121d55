package controller

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/netdir/netdir/sched/dmclock"
)

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

// restoreSnapshot gives to the state of from, through a raft snapshot.
func restoreSnapshot(t *testing.T, from, to *Controller) {
	t.Helper()
	snap, err := fsm{from.st}.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if err := (fsm{to.st}).Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotRestore: a state built by commands (promotions, a pin,
// weights, a reservation left behind, the QoS configuration) survives a
// raft snapshot into a fresh controller's state: same entries,
// reservations, free slots in the same order, generation, weights and QoS;
// the restored controller, leading, undoes the reservation at its head.
func TestSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	c, _, _ := testController(t)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := c.Pin(ctx, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Unpin(ctx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetKeyWeights(ctx, []byte("c"), []uint32{3, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPartitionWeights(ctx, 2, []uint32{1, 0, 2}); err != nil {
		t.Fatal(err)
	}
	q := QoSConfig{Generation: 3, Default: &dmclock.Policy{Weight: 1},
		Tenants: []Tenant{{Name: "gold", ID: 7, Policy: &dmclock.Policy{Reservation: 100, Weight: 2}}}}
	if err := (raftQoSStore{c}).Save(q); err != nil {
		t.Fatal(err)
	}
	left := Entry{Hash: [16]byte{9}, Key: []byte("half-promoted"), Slot: c.st.free[0], Locs: []uint16{1, 2, 3}, R: 3, Gen: c.st.gen + 1}
	if err := c.repl.apply(command{Op: opReserve, Entries: []Entry{left}}); err != nil {
		t.Fatal(err)
	}

	d, _, st := testController(t)
	restoreSnapshot(t, c, d)
	c.st.mu.Lock()
	want := c.st.snapshotLocked()
	c.st.mu.Unlock()
	d.st.mu.Lock()
	got := d.st.snapshotLocked()
	d.st.mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored\n%+v\nwant\n%+v", got, want)
	}
	if got, _ := (raftQoSStore{d}).Load(); !reflect.DeepEqual(got, q) {
		t.Fatalf("QoS %+v, want %+v", got, q)
	}
	// The restored controller, leading, undoes the reservation at its head.
	if err := d.TakeOver(ctx); err != nil {
		t.Fatal(err)
	}
	if len(d.st.reserved) != 0 || len(st.demoted) != 1 || st.demoted[0] != "half-promoted" {
		t.Fatalf("after take-over: reserved %v, demoted %v", d.st.reserved, st.demoted)
	}
}

// TestStaleCommands: a command decided on an entry that changed since (a
// re-promotion's new generation) changes nothing and says so, the same on
// every replica; a layout must raise the epoch.
func TestStaleCommands(t *testing.T) {
	ctx := context.Background()
	c, _, _ := testController(t)
	e, err := c.Pin(ctx, []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	old := e
	old.Gen--
	old.Pinned = false
	if err := c.repl.apply(command{Op: opUpdate, Entries: []Entry{old}}); !errors.Is(err, errStale) {
		t.Fatalf("update of an old generation: %v, want %v", err, errStale)
	}
	if err := c.repl.apply(command{Op: opCommit, Entries: []Entry{e}}); !errors.Is(err, errStale) {
		t.Fatalf("commit without a reservation: %v, want %v", err, errStale)
	}
	if got, _ := c.entry([]byte("k")); !got.Pinned {
		t.Fatal("a stale command unpinned the key")
	}
	cfg := c.Layout().Config()
	if err := c.repl.apply(command{Op: opLayout, Layout: &cfg}); err == nil {
		t.Fatal("a layout of the same epoch was taken")
	}
	cfg.Epoch++
	if err := c.repl.apply(command{Op: opLayout, Layout: &cfg}); err != nil || c.Layout().Epoch() != cfg.Epoch {
		t.Fatalf("layout of epoch %d: %v (epoch now %d)", cfg.Epoch, err, c.Layout().Epoch())
	}
}

var _ raft.SnapshotSink = (*memSink)(nil)
