package controller_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/layout"
)

// TestGetLayout fetches the controller's layout over gRPC on loopback: the
// YAML parses back to the same layout, overrides, epoch, ports and MACs
// included.
func TestGetLayout(t *testing.T) {
	lay, err := layout.Parse([]byte(`
epoch: 7
partition_bits: 3
replicas: 2
dataplane: 127.0.0.1:7420
nodes:
  - {id: 1, addr: 127.0.0.1:7501, port: 1, mac: 02:4e:44:01:00:01}
  - {id: 2, addr: 127.0.0.1:7502, port: 2, mac: 02:4e:44:01:00:02}
  - {id: 3, addr: 127.0.0.1:7503}
chains:
  5: [3, 1]
`))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := controller.New(controller.Config{Layout: lay}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := serveAPI(t, ctl).GetLayout(context.Background(), &api.GetLayoutRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := layout.Parse([]byte(r.GetYaml()))
	if err != nil {
		t.Fatalf("%v in\n%s", err, r.GetYaml())
	}
	if !reflect.DeepEqual(got.Config(), lay.Config()) || !reflect.DeepEqual(got.Chains(), lay.Chains()) {
		t.Fatalf("served layout\n%s\nwant %+v", r.GetYaml(), lay.Config())
	}
	if got.Epoch() != 7 || got.Chain(5)[0] != 3 {
		t.Fatalf("epoch %d, chain 5 %v", got.Epoch(), got.Chain(5))
	}
}

// TestSetLoops pauses the hot-key rounds over gRPC, sees no round run
// while paused, and sees them run again once resumed.
func TestSetLoops(t *testing.T) {
	lay, err := layout.Parse([]byte(`
partition_bits: 3
replicas: 1
nodes:
  - {id: 1, addr: 127.0.0.1:7501}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := controller.New(controller.Config{Layout: lay, Round: time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := serveAPI(t, ctl)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctl.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	rounds := func() (uint64, bool) {
		s, err := c.Status(ctx, &api.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return s.GetRounds(), s.GetLoopsPaused()
	}
	// awaitRounds waits for a round after n.
	awaitRounds := func(n uint64) uint64 {
		for {
			if r, _ := rounds(); r > n {
				return r
			}
			time.Sleep(time.Millisecond)
		}
	}
	awaitRounds(0)
	if _, err := c.SetLoops(ctx, &api.SetLoopsRequest{Paused: true}); err != nil {
		t.Fatal(err)
	}
	// A round that had begun before the pause may still end.
	time.Sleep(20 * time.Millisecond)
	before, paused := rounds()
	if !paused {
		t.Fatal("Status: loops not paused")
	}
	time.Sleep(50 * time.Millisecond)
	if after, _ := rounds(); after != before {
		t.Fatalf("%d hot-key rounds ran while paused", after-before)
	}
	if _, err := c.SetLoops(ctx, &api.SetLoopsRequest{Paused: false}); err != nil {
		t.Fatal(err)
	}
	if _, paused := rounds(); paused {
		t.Fatal("Status: loops still paused")
	}
	awaitRounds(before)
}
