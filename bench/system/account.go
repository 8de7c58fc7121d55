package system

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/wire"
)

// Hot-key counting per node and round, on the client side (see the package
// doc): every key a node served in the round is counted exactly until the
// node's table holds roundKeys keys; later new keys of that round are not
// counted. Hot keys are met early in a round, so the top of the table is
// exact; the controller's miss sketch bounds counts from below as well.
const (
	roundKeys  = 4096
	reportTopK = 64
)

// accounting is what the clients learn from replies: per-node read latency
// and per-node key counts for hot-key reports.
type accounting struct {
	nodes []nodeAcct
}

type nodeAcct struct {
	reads  atomic.Uint64
	latSum atomic.Uint64 // ns
	ver    atomic.Uint64

	mu   sync.Mutex
	keys map[string]uint64
}

func newAccounting(n int) *accounting {
	a := &accounting{nodes: make([]nodeAcct, n)}
	for i := range a.nodes {
		a.nodes[i].keys = make(map[string]uint64)
	}
	return a
}

func (a *accounting) node(id wire.NodeID) *nodeAcct {
	i := int(id) - 1
	if i < 0 || i >= len(a.nodes) {
		return nil
	}
	return &a.nodes[i]
}

// read records a read of key served by node id in lat.
func (a *accounting) read(id wire.NodeID, key []byte, lat time.Duration) {
	n := a.node(id)
	if n == nil {
		return
	}
	n.reads.Add(1)
	n.latSum.Add(uint64(max(lat, 0)))
	n.count(key)
}

// write records a write of key at its chain head id.
func (a *accounting) write(id wire.NodeID, key []byte) {
	if n := a.node(id); n != nil {
		n.count(key)
	}
}

func (n *nodeAcct) count(key []byte) {
	n.mu.Lock()
	if c, ok := n.keys[string(key)]; ok {
		n.keys[string(key)] = c + 1
	} else if len(n.keys) < roundKeys {
		n.keys[string(key)] = 1
	}
	n.mu.Unlock()
}

// latency returns each node's cumulative reads and latency sum.
func (a *accounting) latency() (reads, sum []uint64) {
	reads, sum = make([]uint64, len(a.nodes)), make([]uint64, len(a.nodes))
	for i := range a.nodes {
		reads[i], sum[i] = a.nodes[i].reads.Load(), a.nodes[i].latSum.Load()
	}
	return reads, sum
}

// report takes node id's counts of the round just ended and returns them as
// the node's hot-key report: its reportTopK most requested keys.
func (a *accounting) report(id wire.NodeID, queue uint16) *api.NodeStats {
	n := a.node(id)
	if n == nil {
		return nil
	}
	n.mu.Lock()
	keys := n.keys
	n.keys = make(map[string]uint64, len(keys))
	n.mu.Unlock()
	kc := make([]*api.KeyCount, 0, len(keys))
	for k, c := range keys {
		kc = append(kc, &api.KeyCount{Key: []byte(k), Count: c})
	}
	slices.SortFunc(kc, func(x, y *api.KeyCount) int {
		switch {
		case x.Count > y.Count:
			return -1
		case x.Count < y.Count:
			return 1
		}
		return 0
	})
	if len(kc) > reportTopK {
		kc = kc[:reportTopK]
	}
	return &api.NodeStats{Node: uint32(id), Version: n.ver.Add(1), HotKeys: kc, QueueDepth: uint32(queue)}
}
