package system

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/directory"
)

// TestRemoteSetUp drives an in-process cluster as a running deployment:
// static pauses the controller's loops, evicts every key and puts every
// partition's weights on its head; netdir resumes the loops from even
// weights; the node counters come from the nodes' stats op. Of the
// controllers it is given, it calls the one that leads.
func TestRemoteSetUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := cluster.Start(cluster.Options{N: 4, R: 3, PartitionBits: 3, Epoch: 1, Dir: t.TempDir(), Controller: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.StartPlane(ctx, cluster.PlaneConfig{Directory: directory.Config{Policy: directory.PolicyNetdir}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctl := p.Controller
	if _, err := ctl.Pin(ctx, []byte("hot")); err != nil {
		t.Fatal(err)
	}
	// Several controllers, the first gone: the calls go to the one that
	// answers and leads.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	r, err := Dial(ctx, RemoteConfig{Service: cl.DataPlane(), Controller: gone.Addr().String() + "," + ctl.APIAddr(), Auth: cl.NewAuth()})
	if err != nil {
		t.Fatal(err)
	}
	if r.N() != 4 {
		t.Fatalf("%d nodes, want 4", r.N())
	}
	buckets := func() map[uint32][]uint8 { return ctl.Partitions().Buckets }
	if err := r.setUp(ctx, RemoteStatic); err != nil {
		t.Fatal(err)
	}
	if !ctl.Paused() || len(ctl.Entries()) != 0 {
		t.Fatalf("static: paused %v, directory %v", ctl.Paused(), ctl.Entries())
	}
	for part := range uint32(8) {
		if b := buckets()[part]; len(b) != directory.Buckets || slices.ContainsFunc(b, func(x uint8) bool { return x != 0 }) {
			t.Fatalf("static: partition %d buckets %v, want all on the head", part, b)
		}
	}
	if _, err := r.Target().Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if s := r.Sample(); slices.Max(s.Requests) == 0 || r.sampleErr != nil {
		t.Fatalf("node requests %v after a put (%v)", s.Requests, r.sampleErr)
	}
	// Close resumes what static paused.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if ctl.Paused() {
		t.Fatal("loops still paused after Close")
	}
	for part := range uint32(8) {
		b := buckets()[part]
		for m := range uint8(3) {
			if n := len(b) - len(slices.DeleteFunc(slices.Clone(b), func(x uint8) bool { return x == m })); n < directory.Buckets/3 {
				t.Fatalf("after Close: partition %d buckets %v, want even over the chain", part, b)
			}
		}
	}
}
