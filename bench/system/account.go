package system

import (
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/wire"
)

// accounting is what the clients learn from replies: the read latency of
// each node as clients see it (response time, queueing included), and which
// node served each read of the workload's hottest key.
type accounting struct {
	nodes   []nodeAcct
	hotKey  atomic.Pointer[string]
	hotRead []atomic.Uint64 // per node: reads of hotKey it served
}

type nodeAcct struct {
	reads  atomic.Uint64
	latSum atomic.Uint64 // ns
}

func newAccounting(n int) *accounting {
	return &accounting{nodes: make([]nodeAcct, n), hotRead: make([]atomic.Uint64, n)}
}

// trackHot makes key the hot key whose reads are counted per node.
func (a *accounting) trackHot(key []byte) {
	k := string(key)
	a.hotKey.Store(&k)
}

func (a *accounting) node(id wire.NodeID) *nodeAcct {
	i := int(id) - 1
	if i < 0 || i >= len(a.nodes) {
		return nil
	}
	return &a.nodes[i]
}

// read records a read of key served by node id in lat.
func (a *accounting) read(key []byte, id wire.NodeID, lat time.Duration) {
	n := a.node(id)
	if n == nil {
		return
	}
	n.reads.Add(1)
	n.latSum.Add(uint64(max(lat, 0)))
	if hk := a.hotKey.Load(); hk != nil && *hk == string(key) {
		a.hotRead[int(id)-1].Add(1)
	}
}

// hot returns the tracked hot key (nil if none) and the reads of it each
// node served so far.
func (a *accounting) hot() ([]byte, []uint64) {
	hk := a.hotKey.Load()
	if hk == nil {
		return nil, nil
	}
	reads := make([]uint64, len(a.hotRead))
	for i := range reads {
		reads[i] = a.hotRead[i].Load()
	}
	return []byte(*hk), reads
}

// latency returns each node's cumulative reads and latency sum.
func (a *accounting) latency() (reads, sum []uint64) {
	reads, sum = make([]uint64, len(a.nodes)), make([]uint64, len(a.nodes))
	for i := range a.nodes {
		reads[i], sum[i] = a.nodes[i].reads.Load(), a.nodes[i].latSum.Load()
	}
	return reads, sum
}
