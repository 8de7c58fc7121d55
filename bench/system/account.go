package system

import (
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/wire"
)

// accounting is what the clients learn from replies: the read latency of
// each node as clients see it (response time, queueing included).
type accounting struct {
	nodes []nodeAcct
}

type nodeAcct struct {
	reads  atomic.Uint64
	latSum atomic.Uint64 // ns
}

func newAccounting(n int) *accounting {
	return &accounting{nodes: make([]nodeAcct, n)}
}

func (a *accounting) node(id wire.NodeID) *nodeAcct {
	i := int(id) - 1
	if i < 0 || i >= len(a.nodes) {
		return nil
	}
	return &a.nodes[i]
}

// read records a read served by node id in lat.
func (a *accounting) read(id wire.NodeID, lat time.Duration) {
	n := a.node(id)
	if n == nil {
		return
	}
	n.reads.Add(1)
	n.latSum.Add(uint64(max(lat, 0)))
}

// latency returns each node's cumulative reads and latency sum.
func (a *accounting) latency() (reads, sum []uint64) {
	reads, sum = make([]uint64, len(a.nodes)), make([]uint64, len(a.nodes))
	for i := range a.nodes {
		reads[i], sum[i] = a.nodes[i].reads.Load(), a.nodes[i].latSum.Load()
	}
	return reads, sum
}
