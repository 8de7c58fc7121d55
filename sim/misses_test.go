package sim

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// TestDeferredMissesCountAsServed: the misses a round's flush adds node by
// node leave every node's top-k as counting each miss's name when served
// did, over rounds and with flushes within a round, on skewed random keys
// (more than the 64 counters, so that the order of a node's keys and the
// ties between their names matter): the same keys, named by appendTopKey,
// with the same counts in the same order.
func TestDeferredMissesCountAsServed(t *testing.T) {
	cfg := smallConfig(1)
	cfg.Nodes, cfg.RackSize = 40, 8
	s := newSim(t, cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	zipf := rand.NewZipf(rng, 1.1, 1, 4999)
	want := make([]*sched.TopK, cfg.Nodes)
	for i := range want {
		want[i] = sched.NewTopK(64)
	}
	var name []byte
	for round := range 3 {
		for i := range 20_000 {
			if i%7000 == 6999 {
				s.flushMisses()
			}
			id := wire.NodeID(1 + rng.IntN(cfg.Nodes))
			k := int64(zipf.Uint64())
			s.misses = append(s.misses, missOf(id, k))
			name = s.src.AppendKey(name[:0], k)
			want[id-1].Add(name)
		}
		s.flushMisses()
		for i := range s.nodes {
			got := s.nodes[i].top.Top(64)
			for j := range got {
				got[j].Key = s.src.Key(topKeyIndex(got[j].Key))
			}
			if exp := want[i].Top(64); !reflect.DeepEqual(got, exp) {
				t.Fatalf("round %d, node %d: top-k %v, want %v", round, i+1, got, exp)
			}
		}
	}
}
