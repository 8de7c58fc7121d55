package storagenode

import (
	"testing"

	"github.com/netdir/netdir/sched/dmclock"
	"github.com/netdir/netdir/wire"
)

// BenchmarkAdmitQoS is admission's per-request cost, the hand-off to the
// shard's queue included: with QoS off (the bypass: one atomic load more
// than before QoS existed) and on (dmClock's add, pull and done around the
// same hand-off), over 8 backlogged tenants. Neither allocates.
func BenchmarkAdmitQoS(b *testing.B) {
	key := []byte("k")
	h := wire.HashKey(key)
	pkts := make([][]byte, 8)
	for i := range pkts {
		hd := wire.Header{Op: wire.OpGet, Tenant: uint16(i), ReqID: 1, KeyHash: h}
		pkts[i] = wire.AppendNodeOp(nil, &hd, key, nil, nil)
	}
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "qos=off", true: "qos=on"}[on]
		b.Run(name, func(b *testing.B) {
			n := &Node{opts: Options{Workers: 1, QueueLen: 1024}}
			a := &n.admit
			a.shards = []*shard{{n: n, ch: make(chan item, 1024)}}
			a.qos.init(n)
			if on {
				tenants := map[uint16]dmclock.Policy{}
				for i := range uint16(8) {
					tenants[i] = dmclock.Policy{Reservation: float64(10 * (i + 1)), Weight: float64(1 + i%3), Limit: 1e6}
				}
				if err := a.qos.apply(QoS{Generation: 1, Tenants: tenants}); err != nil {
					b.Fatal(err)
				}
				for _, p := range pkts { // every tenant backlogged
					for range 4 {
						a.submit(h, true, wire.OpGet, item{b: p})
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if !a.submit(h, true, wire.OpGet, item{b: pkts[i%len(pkts)]}) {
					b.Fatal("queue full")
				}
				if on {
					next, ok, _ := a.qos.pull()
					if !ok {
						b.Fatal("nothing to pull")
					}
					next.s.ch <- next.it
				}
				it := <-a.shards[0].ch
				if it.qos {
					a.qos.done(wire.Frame(it.b).Tenant())
				}
			}
		})
	}
}
