package storagenode

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/sched/dmclock"
	"github.com/netdir/netdir/wire"
)

// QoS is a node's per-tenant dmClock configuration, as the controller pushes
// it. With no Default and no Tenants QoS is off: client requests bypass the
// scheduler entirely.
type QoS struct {
	// Generation names this configuration; the node reports the one it
	// applied, so the controller sends a new one only when it changed.
	Generation uint64
	Default    *dmclock.Policy // nil: DefaultPolicy
	Tenants    map[uint16]dmclock.Policy
}

// On reports whether the configuration asks for scheduling.
func (c QoS) On() bool { return c.Default != nil || len(c.Tenants) > 0 }

// DefaultPolicy is the policy of tenants without their own when the
// configuration sets no defaults: weight 1, no reservation, no limit.
var DefaultPolicy = dmclock.Policy{Weight: 1}

// TenantQoS is one tenant's scheduling at a node: its `qos dump` figures.
type TenantQoS struct {
	Tenant   uint16         `json:"tenant"`
	Policy   dmclock.Policy `json:"policy"`
	Default  bool           `json:"default"` // Policy is the defaults
	Queued   int            `json:"queued"`
	Inflight int            `json:"inflight"` // admitted to a shard, not yet handled
	// Served counts requests served by phase; Throttled those that waited
	// for their limit; Delay is their total queueing delay.
	ServedReservation uint64        `json:"served_reservation"`
	ServedWeight      uint64        `json:"served_weight"`
	Throttled         uint64        `json:"throttled"`
	Delay             time.Duration `json:"delay_ns"`
	// Clients are the requester addresses seen since the node started, at
	// most maxClients (behind a proxying data plane: the plane's).
	Clients []netip.AddrPort `json:"clients"`
}

// maxClients bounds the requester addresses a node remembers per tenant.
const maxClients = 16

// qosAdmission is admission's dmClock: when a configuration is on, client
// requests queue per tenant, and one goroutine hands them to their shards
// in dmClock order, as capacity frees up (MaxOps's bucket if there is one,
// and at most maxInflight requests in the shards). A tenant's queue holds
// at most perTenant requests, so a tenant that floods the node is answered
// queue-full alone; QoS itself never refuses a request. With QoS off the
// path costs one atomic load.
type qosAdmission struct {
	on          atomic.Bool
	generation  atomic.Uint64
	origin      time.Time
	perTenant   int
	maxInflight int
	// global schedules with the δ and ρ the data plane stamps (dmClock's
	// distributed form); false: rank-local, every node on its own.
	global bool
	wake   chan struct{} // a request arrived, or one left the shards
	queued atomic.Int64  // the queue's length, for the node's load

	mu       sync.Mutex
	q        *dmclock.Queue[admitted]
	inflight map[uint16]int
	busy     int // the sum of inflight
	clients  map[uint16][]netip.AddrPort
}

func (a *qosAdmission) init(n *Node) {
	q, _ := dmclock.New[admitted](DefaultPolicy)
	a.q, a.origin = q, time.Now()
	a.perTenant = n.opts.QueueLen
	a.maxInflight = 2 * n.opts.Workers
	a.global = !n.opts.QoSRankLocal
	a.wake = make(chan struct{}, 1)
	a.inflight = map[uint16]int{}
	a.clients = map[uint16][]netip.AddrPort{}
}

func (a *qosAdmission) now() time.Duration { return time.Since(a.origin) }

func (a *qosAdmission) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// apply installs c at runtime: tenants dropped from it go back under the
// defaults; queued requests keep their place.
func (a *qosAdmission) apply(c QoS) error {
	def := DefaultPolicy
	if c.Default != nil {
		def = *c.Default
	}
	for _, p := range c.Tenants {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if err := a.q.SetDefault(def, now); err != nil {
		return err
	}
	for _, id := range a.q.Tenants(nil) {
		if _, ok := c.Tenants[id]; !ok {
			a.q.RemovePolicy(id, now)
		}
	}
	for id, p := range c.Tenants {
		_ = a.q.SetPolicy(id, p, now) // validated above
	}
	a.generation.Store(c.Generation)
	a.on.Store(c.On())
	a.signal() // turned off: the queue drains
	return nil
}

// add queues a client request; false if its tenant's queue is full.
func (a *qosAdmission) add(b []byte, op wire.Op, it admitted) bool {
	f := wire.Frame(b)
	tenant := f.Tenant()
	var delta, rho uint32
	if a.global {
		delta, rho = f.Delta(), f.Rho()
	}
	a.mu.Lock()
	if a.q.TenantLen(tenant) >= a.perTenant {
		a.mu.Unlock()
		return false
	}
	a.q.Add(tenant, dmclock.Cost(op != wire.OpGet, len(b)-wire.PrefixLen), delta, rho, it, a.now())
	a.queued.Store(int64(a.q.Len()))
	a.seen(tenant, it.it.from)
	a.mu.Unlock()
	a.signal()
	return true
}

// seen remembers a requester of tenant (a.mu held).
func (a *qosAdmission) seen(tenant uint16, from netip.AddrPort) {
	cs := a.clients[tenant]
	if len(cs) >= maxClients {
		return
	}
	for _, c := range cs {
		if c == from {
			return
		}
	}
	a.clients[tenant] = append(cs, from)
}

// done is called by a shard when it has handled a request that came
// through the queue.
func (a *qosAdmission) done(tenant uint16) {
	a.mu.Lock()
	a.inflight[tenant]--
	a.busy--
	a.mu.Unlock()
	a.signal()
}

// pull takes the next request in dmClock order if there is capacity for
// it. When there is none, until is when a limit-held request becomes due
// (0: wait for the next arrival or completion).
func (a *qosAdmission) pull() (next admitted, ok bool, until time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy >= a.maxInflight || a.q.Len() == 0 {
		return next, false, 0
	}
	now := a.now()
	next, phase, until := a.q.Pull(now)
	a.queued.Store(int64(a.q.Len()))
	if phase == dmclock.None {
		return next, false, until - now
	}
	a.inflight[wire.Frame(next.it.b).Tenant()]++
	a.busy++
	next.it.qos = true
	markReservation(next.it.b, phase == dmclock.Reservation)
	return next, true, 0
}

// markReservation flags a request served in dmClock's reservation phase,
// and clears the flag otherwise: replies echo the request's flags, so the
// data plane counts the completion into the tenant's ρ. A write's reply
// comes from the chain's tail, which learns the head's phase from the
// chain-write (wire.ChainExt.Reservation).
func markReservation(b []byte, reservation bool) {
	f := wire.Frame(b)
	if reservation {
		f.SetFlags(f.Flags() | wire.FlagReservation)
	} else {
		f.SetFlags(f.Flags() &^ wire.FlagReservation)
	}
}

// clearClientReservation drops FlagReservation from a client request as it
// arrives: only this node's dmClock sets it (markReservation), and replies
// echo a request's flags, so a forged flag would skew the tenant's ρ at the
// data plane.
func clearClientReservation(b []byte) {
	f := wire.Frame(b)
	if f.Check() != nil {
		return
	}
	switch f.Op() {
	case wire.OpGet, wire.OpPut, wire.OpDel:
		markReservation(b, false)
	}
}

// stats is every known tenant's scheduling.
func (a *qosAdmission) stats() []TenantQoS {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []TenantQoS
	for _, id := range a.q.Tenants(nil) {
		s := a.q.Stats(id)
		out = append(out, TenantQoS{
			Tenant: id, Policy: s.Policy, Default: s.Default, Queued: s.Queued, Inflight: a.inflight[id],
			ServedReservation: s.ServedReservation, ServedWeight: s.ServedWeight,
			Throttled: s.Throttled, Delay: s.Delay,
			Clients: append([]netip.AddrPort(nil), a.clients[id]...),
		})
	}
	return out
}

// SetQoS applies the controller's QoS configuration at runtime; an invalid
// policy leaves the running one in place.
func (n *Node) SetQoS(c QoS) error { return n.admit.qos.apply(c) }

// QoSGeneration is the generation of the QoS configuration applied (0:
// none yet).
func (n *Node) QoSGeneration() uint64 { return n.admit.qos.generation.Load() }

// QoSStats is every tenant's scheduling at this node, by tenant id.
func (n *Node) QoSStats() []TenantQoS { return n.admit.qos.stats() }
