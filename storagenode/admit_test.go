package storagenode

import (
	"testing"

	"github.com/netdir/netdir/wire"
)

// TestLoadCountsRequestsInService: the load a reply carries counts a
// request from its submission until its shard has handled it, in the
// shard's hands too (where a GET waits for the device), and a request
// refused for a full queue not at all.
func TestLoadCountsRequestsInService(t *testing.T) {
	s := &shard{ch: make(chan item, 1)}
	a := &admission{shards: []*shard{s}}
	var h wire.KeyHash
	if !a.submit(h, true, wire.OpGet, item{b: []byte{1}}) {
		t.Fatal("submit refused with room in the queue")
	}
	if got := a.load(); got != 1 {
		t.Fatalf("load with one request queued: %d, want 1", got)
	}
	if a.submit(h, true, wire.OpGet, item{b: []byte{2}}) {
		t.Fatal("submit accepted into a full queue")
	}
	if got := a.load(); got != 1 {
		t.Fatalf("load after a refused request: %d, want 1", got)
	}
	it := <-s.ch // the shard takes it: in service, no longer queued
	if got := a.load(); got != 1 {
		t.Fatalf("load with one request in service: %d, want 1", got)
	}
	a.handled(it)
	if got := a.load(); got != 0 {
		t.Fatalf("load once handled: %d, want 0", got)
	}
	a.handled(item{fn: func() {}}) // a shard's own task was never counted
	if got := a.load(); got != 0 {
		t.Fatalf("load after an uncounted task: %d, want 0", got)
	}
}
