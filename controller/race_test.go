package controller

import (
	"context"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/sched"
)

// watchStream is a WatchDirectory stream that reads every update it is sent
// in full, as gRPC's marshalling does.
type watchStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *watchStream) Context() context.Context { return s.ctx }
func (s *watchStream) Send(u *api.DirectoryUpdate) error {
	proto.Size(u)
	return nil
}

// TestConcurrentRoundsAndAPI runs hot-key rounds and coarse epochs beside
// the API's reads, pins, unpins and weights, and a watcher, on the same
// keys (run it with -race). Afterwards every slot is either free or holds
// exactly one entry, and the plane holds what the controller holds:
// promotions and evictions from the API were serialised with the rounds'.
func TestConcurrentRoundsAndAPI(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, p, _ := testController(t)
	a := NewAPI(c)
	const rounds = 40
	keys := []string{"k0", "k1", "k2", "k3"}

	var watchers sync.WaitGroup
	watchers.Go(func() {
		for {
			err := a.WatchDirectory(&api.WatchDirectoryRequest{}, &watchStream{ctx: ctx})
			// A watcher that falls behind is cut off and resubscribes,
			// as agents do; on a loaded machine this one may.
			if status.Code(err) == codes.ResourceExhausted && ctx.Err() == nil {
				continue
			}
			if err != nil {
				t.Errorf("watch: %v", err)
			}
			return
		}
	})
	var wg sync.WaitGroup
	roundsDone := make(chan struct{})
	wg.Go(func() {
		defer close(roundsDone)
		for i := range rounds {
			for j, k := range keys {
				for n := range 20 {
					p.get(t, k, uint64(i<<16|j<<8|n))
				}
			}
			hot := []sched.KeyCount{{Key: []byte(keys[i%len(keys)]), Count: 100}}
			c.Report(NodeReport{Node: 1, Version: uint64(i + 1), HotKeys: hot,
				Trees: []TreeReport{{Position: 0, Reads: uint64(100 * i), MeanReadLatency: 10 * time.Microsecond}}})
			if err := c.HotKeyRound(ctx); err != nil {
				t.Errorf("round %d: %v", i, err)
			}
		}
	})
	wg.Go(func() {
		for range rounds / 4 {
			if _, err := c.CoarseRound(ctx); err != nil {
				t.Errorf("coarse round: %v", err)
			}
		}
	})
	wg.Go(func() {
		for i := range rounds {
			k := []byte(keys[i%len(keys)])
			if _, err := a.Pin(ctx, &api.PinRequest{Key: k}); err != nil {
				t.Errorf("pin %s: %v", k, err)
			}
			a.SetWeights(ctx, &api.SetWeightsRequest{Target: &api.SetWeightsRequest_Key{Key: k}, Weights: []uint32{1, 2, 3}})
			a.Unpin(ctx, &api.PinRequest{Key: k}) // a round may have evicted it first: NotFound
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-roundsDone:
				return
			default:
			}
			if _, err := a.ListDirectory(ctx, &api.ListDirectoryRequest{}); err != nil {
				t.Errorf("list: %v", err)
			}
			a.SetWeights(ctx, &api.SetWeightsRequest{Target: &api.SetWeightsRequest_Partition{Partition: uint32(i % 16)},
				Weights: []uint32{1, 1, 2}})
			c.Entries()
		}
	})
	wg.Wait()
	cancel()
	watchers.Wait()

	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	slots := map[uint32]bool{}
	for _, s := range c.st.free {
		slots[s] = true
	}
	for h, e := range c.st.entries {
		if slots[e.Slot] {
			t.Errorf("slot %d of %x is also free, or another entry's", e.Slot, h[:4])
		}
		slots[e.Slot] = true
		if _, ok := p.d.Lookup(h); !ok {
			t.Errorf("entry %q is not in the plane", e.Key)
		}
	}
	if len(slots) != c.cfg.Capacity {
		t.Errorf("%d of %d slots accounted for", len(slots), c.cfg.Capacity)
	}
	if p.d.Len() != len(c.st.entries) {
		t.Errorf("the plane holds %d entries, the controller %d", p.d.Len(), len(c.st.entries))
	}
}
