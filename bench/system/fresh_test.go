package system

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/client"
)

// TestFreshFromTemplate: every system Fresh starts holds the template's
// keys, and a write on one is not seen by the next (each step starts from
// the template, not from the step before).
func TestFreshFromTemplate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src, err := bench.Workload{Name: "load", Mix: bench.WriteMix(1), Keys: 50, ValueSize: 16, Seed: 1}.Build()
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFresh(ctx, Config{Nodes: 3, Capacity: -1, PartitionBits: 6, Dir: t.TempDir(),
		Round: 100 * time.Millisecond, Clients: 1, P4Info: "none"}, src, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	extra := []byte("written-in-step-1")
	for step := range 2 {
		s, err := f.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range int64(50) {
			if _, _, err := s.direct.Get(ctx, src.Key(i)); err != nil {
				s.Close()
				t.Fatalf("step %d: key %d of the template: %v", step, i, err)
			}
		}
		_, _, err = s.direct.Get(ctx, extra)
		if step == 0 {
			if !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("step 0: %q before it was written: %v", extra, err)
			}
			if _, err := s.direct.Put(ctx, extra, []byte("x")); err != nil {
				t.Fatal(err)
			}
		} else if !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("step 1 sees step 0's write: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
