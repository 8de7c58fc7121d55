package storagenode

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/netdir/netdir/storagenode/device"
)

// TestHeldRecords: a shard reads back a dirty record it stored without
// reading Pebble, a copy its caller may change; a clean record, or one the
// full table could not take, is read from Pebble, as stored.
func TestHeldRecords(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tr := &tree{pos: 1, db: db, lat: newLatencyRing(16), clock: device.RealClock{}}
	s := &shard{held: newHeldRecords(1)}
	put := func(key string, rec record) {
		t.Helper()
		if err := s.putRecord(tr, 7, []byte(key), &rec, &s.commit); err != nil {
			t.Fatal(err)
		}
		if err := s.commit.wait(); err != nil {
			t.Fatal(err)
		}
	}
	get := func(key string, fromPebble bool) record {
		t.Helper()
		reads := tr.reads.Load()
		rec, err := s.getRecord(tr, 7, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.reads.Load() != reads; got != fromPebble {
			t.Fatalf("%s: read from Pebble %v, want %v", key, got, fromPebble)
		}
		return rec
	}
	put("a", record{Clean: version{Ver: 1, Val: []byte("one")}, Dirty: []version{{Ver: 2, Val: []byte("two"), ReqID: 9}}})
	rec := get("a", false)
	if rec.Clean.Ver != 1 || len(rec.Dirty) != 1 || string(rec.Dirty[0].Val) != "two" {
		t.Fatalf("held: %+v", rec)
	}
	rec.commit(2) // changes the caller's copy only
	if rec = get("a", false); len(rec.Dirty) != 1 {
		t.Fatalf("held record changed through a copy: %+v", rec)
	}
	// The table is full: b is stored, not held.
	put("b", record{Dirty: []version{{Ver: 1, Val: []byte("b1")}}})
	if rec = get("b", true); rec.Latest().Ver != 1 {
		t.Fatalf("b: %+v", rec)
	}
	// Clean: a leaves the table, and Pebble has it as stored.
	rec = get("a", false)
	rec.commit(2)
	put("a", rec)
	if rec = get("a", true); rec.Clean.Ver != 2 || len(rec.Dirty) != 0 || string(rec.Clean.Val) != "two" {
		t.Fatalf("a after commit: %+v", rec)
	}
	if len(s.held.m) != 0 {
		t.Fatalf("%d records held, want 0", len(s.held.m))
	}
}
