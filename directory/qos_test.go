package directory

import (
	"math/rand/v2"
	"testing"

	"github.com/netdir/netdir/wire"
)

// qosLog is δ and ρ from their definition: the log of every completion,
// and per (tenant, node) the log's length at the tenant's last request there.
type qosLog struct {
	events []completion
	last   map[[2]int]int
}

type completion struct {
	tenant      uint16
	node        wire.NodeID
	reservation bool
}

func (l *qosLog) stamp(tenant uint16, n wire.NodeID) (delta, rho uint32) {
	k := [2]int{int(tenant), int(n)}
	for _, c := range l.events[l.last[k]:] {
		if c.tenant == tenant && c.node != n {
			delta++
			if c.reservation {
				rho++
			}
		}
	}
	l.last[k] = len(l.events)
	return delta, rho
}

func qosFrame(op wire.Op, tenant uint16, n wire.NodeID, flags uint8) wire.Frame {
	p := wire.Packet{Header: wire.Header{Op: op, Tenant: tenant, Node: n, Flags: flags}}
	b, _ := p.AppendEncode(nil)
	return b
}

// TestQoSMatchesDefinition: on random interleavings of requests and replies
// of tenants and nodes that do not alias, the registers' δ and ρ equal
// those of the definition.
func TestQoSMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q qosCounters
	ref := &qosLog{last: map[[2]int]int{}}
	for i := 0; i < 20000; i++ {
		tenant, n := uint16(rng.IntN(6)), wire.NodeID(1+rng.IntN(5))
		if rng.IntN(2) == 0 {
			res := rng.IntN(3) == 0
			var flags uint8
			if res {
				flags = wire.FlagReservation
			}
			q.complete(qosFrame(wire.OpGetReply, tenant, n, flags), n)
			ref.events = append(ref.events, completion{tenant, n, res})
			continue
		}
		f := qosFrame(wire.OpGet, tenant, n, 0)
		q.stamp(f, n)
		d, r := ref.stamp(tenant, n)
		if f.Delta() != d || f.Rho() != r {
			t.Fatalf("step %d: tenant %d node %d: δ=%d ρ=%d, want δ=%d ρ=%d", i, tenant, n, f.Delta(), f.Rho(), d, r)
		}
	}
}

// TestQoSCountersWrap: the counters are 32 bits and δ, ρ modular
// differences, so a tenant's totals passing 2³² change nothing.
func TestQoSCountersWrap(t *testing.T) {
	var q qosCounters
	const tenant, here, there = 7, 1, 2
	top := ^uint32(0) - 1
	q.done[tenant], q.res[tenant] = top, top
	i := QoSIndex(tenant, here)
	q.doneMark[i], q.resMark[i] = top, top
	for range 5 {
		q.complete(qosFrame(wire.OpPutReply, tenant, there, wire.FlagReservation), there)
	}
	q.complete(qosFrame(wire.OpGetReply, tenant, there, 0), there)
	q.complete(qosFrame(wire.OpGetReply, tenant, here, wire.FlagReservation), here)
	f := qosFrame(wire.OpGet, tenant, here, 0)
	q.stamp(f, here)
	if f.Delta() != 6 || f.Rho() != 5 || q.done[tenant] >= top {
		t.Fatalf("across the wrap: δ=%d ρ=%d (done %d), want δ=6 ρ=5 and done wrapped", f.Delta(), f.Rho(), q.done[tenant])
	}
}
