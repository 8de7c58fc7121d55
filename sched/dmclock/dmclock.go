// Package dmclock schedules requests per tenant by dmClock (Gulati, Merchant
// and Varman, "mClock: Handling Throughput Variability for Hypervisor IO
// Scheduling", OSDI'10), with the semantics of ceph/dmclock: each tenant has
// a reservation, a weight and a limit (a Policy), and every queued request
// carries a reservation tag R, a proportional tag P and a limit tag L.
//
// Pull chooses in two phases. The constraint phase serves the earliest R tag
// that is due (R ≤ now); otherwise the weight phase serves, among tenants
// whose L tag is due, the lowest P tag, and takes back the R spacing that the
// request was given, so that service by weight does not count against the
// reservation. A request whose L tag is not due waits (Pull says until when);
// it is never dropped. The limit holds in both phases.
//
// The distributed form: a request may carry δ and ρ, the completions of its
// tenant at other nodes since its previous request to this node, in all
// phases and in the reservation phase; tags then advance by (ρ+cost)/r,
// (δ+cost)/w and (δ+cost)/l, so that a tenant's reservation and limit hold
// over the cluster rather than per node. With δ = ρ = 0 this is mClock.
//
// Like the rest of sched it does no I/O and reads no clock: callers pass now,
// any monotonic duration since an origin of their choosing.
package dmclock

import (
	"math"
	"time"
)

// Phase is how Pull chose a request.
type Phase uint8

const (
	None        Phase = iota // nothing served: the queue is empty, or every request waits for its limit
	Reservation              // constraint phase: the tenant's R tag was due
	Weight                   // weight phase: lowest P tag among tenants under their limit
)

func (p Phase) String() string {
	switch p {
	case Reservation:
		return "reservation"
	case Weight:
		return "weight"
	}
	return "none"
}

// Stats is what a tenant's `qos dump` line shows of the queue (the caller
// adds inflight counts and clients).
type Stats struct {
	Policy            Policy
	Default           bool          // Policy is the defaults, not an override
	Queued            int           // requests waiting
	ServedReservation uint64        // served in the constraint phase
	ServedWeight      uint64        // served in the weight phase
	Throttled         uint64        // requests that waited at least once for their limit tag
	Delay             time.Duration // total queueing delay of the served requests
}

// MeanDelay is the mean queueing delay of the served requests.
func (s Stats) MeanDelay() time.Duration {
	n := s.ServedReservation + s.ServedWeight
	if n == 0 {
		return 0
	}
	return s.Delay / time.Duration(n)
}

// Queue is a node's dmClock queue, holding items of type T. It is not safe
// for concurrent use: the admission path owns it.
type Queue[T any] struct {
	defaults Policy
	tenants  tenantTable[T]
	// heads holds the tags of each backlogged tenant's first request,
	// contiguous so that Pull scans them without chasing pointers; a few
	// dozen active tenants cost less to scan than to keep in three heaps.
	heads  []head[T]
	queued int
	// vtime is the highest P tag served in the weight phase: a tenant that
	// comes back from idle starts there, so it neither banks weight credit
	// nor starts behind those that stayed busy.
	vtime float64
}

type head[T any] struct {
	r, p, l float64 // tags in nanoseconds; r is +Inf without a reservation
	t       *tenant[T]
}

type request[T any] struct {
	item             T
	arrival          time.Duration
	cost, delta, rho uint32
}

type tenant[T any] struct {
	policy Policy
	custom bool // policy is an override, not the defaults
	// Tag spacing per cost unit in nanoseconds: 1e9/rate; 0 for no
	// reservation (R tags are +Inf) or no limit (L tags are always due).
	resGap, propGap, limGap float64
	// The tags of the last request served; prevR less the weight-phase
	// take-back.
	prevR, prevP, prevL float64
	// Floors of the head's tags besides its arrival (R's floor): when it
	// became the head (L's), and vtime if it arrived at an idle tenant (P's;
	// -Inf otherwise).
	headSince, propFloor float64
	throttled            bool // the head has waited for its limit; counted once

	ring     []request[T] // queued requests, oldest at first
	first, n int
	slot     int // index in heads; -1 when idle

	served    [3]uint64 // by Phase
	throttles uint64
	delay     time.Duration
}

// New returns an empty queue whose tenants fall under defaults until given
// their own policy.
func New[T any](defaults Policy) (*Queue[T], error) {
	if err := defaults.Validate(); err != nil {
		return nil, err
	}
	return &Queue[T]{defaults: defaults}, nil
}

// Len is the number of queued requests.
func (q *Queue[T]) Len() int { return q.queued }

// TenantLen is the number of requests tenant has queued.
func (q *Queue[T]) TenantLen(tenant uint16) int {
	if t := q.tenants.get(tenant); t != nil {
		return t.n
	}
	return 0
}

// Add queues item for tenant at now. cost is the op's cost (0 counts as 1);
// delta and rho are the tenant's completions at other nodes since its
// previous request to this node, all and in the reservation phase (ρ ≤ δ),
// or 0 for rank-local scheduling.
func (q *Queue[T]) Add(tenant uint16, cost, delta, rho uint32, item T, now time.Duration) {
	t := q.tenant(tenant)
	t.push(request[T]{item: item, arrival: now, cost: max(cost, 1), delta: delta, rho: rho})
	q.queued++
	if t.n == 1 {
		t.headSince = float64(now)
		t.propFloor = q.vtime
		t.slot = len(q.heads)
		q.heads = append(q.heads, head[T]{t: t})
		q.retag(t)
	}
}

// Pull serves the next request at now: the earliest due R tag, else the
// lowest P tag among tenants under their limit. When it serves none, phase
// is None and until is when the first limit-held request becomes due (0 if
// the queue is empty); the caller sleeps until then or until the next Add.
func (q *Queue[T]) Pull(now time.Duration) (item T, phase Phase, until time.Duration) {
	tnow := float64(now)
	res, prop := -1, -1
	minR, minP, next := math.Inf(1), math.Inf(1), math.Inf(1)
	for i := range q.heads {
		h := &q.heads[i]
		if h.l > tnow {
			if !h.t.throttled {
				h.t.throttled = true
				h.t.throttles++
			}
			next = min(next, h.l)
			continue
		}
		if h.r < minR {
			minR, res = h.r, i
		}
		if h.p < minP || prop < 0 {
			minP, prop = h.p, i
		}
	}
	switch {
	case minR <= tnow:
		return q.serve(res, Reservation, now), Reservation, 0
	case prop >= 0:
		return q.serve(prop, Weight, now), Weight, 0
	case len(q.heads) > 0:
		return item, None, time.Duration(math.Ceil(next))
	}
	return item, None, 0
}

// serve pops the head at slot i, advances its tenant's tags and retags its
// next request, or retires the tenant to idle.
func (q *Queue[T]) serve(i int, phase Phase, now time.Duration) T {
	h := q.heads[i]
	t := h.t
	req := t.pop()
	q.queued--
	switch {
	case math.IsInf(h.r, 1):
	case phase == Reservation:
		t.prevR = h.r
	default:
		// The paper's take-back: this request's own cost was spaced on R
		// as if the reservation would serve it; it did not. (h.r is at
		// least prevR plus that spacing; max only guards the rounding.)
		t.prevR = max(t.prevR, h.r-float64(req.cost)*t.resGap)
	}
	t.prevP = h.p
	if t.limGap > 0 {
		t.prevL = h.l
	}
	if phase == Weight {
		q.vtime = max(q.vtime, h.p)
	}
	t.served[phase]++
	t.delay += now - req.arrival
	t.throttled = false
	if t.n > 0 {
		t.headSince = float64(now)
		t.propFloor = math.Inf(-1)
		q.retag(t)
	} else {
		q.idle(t)
	}
	return req.item
}

// retag computes the tags of t's head request from t's previous tags:
// each is the previous one plus its spacing times the units this request
// accounts for, and never earlier than its floor (arrival for R, when it
// became the head for L, vtime on return from idle for P), so that an idle
// tenant banks no credit.
func (q *Queue[T]) retag(t *tenant[T]) {
	req := &t.ring[t.first]
	h := &q.heads[t.slot]
	cost := float64(req.cost)
	h.r = math.Inf(1)
	if t.resGap > 0 {
		h.r = max(t.prevR+(float64(req.rho)+cost)*t.resGap, float64(req.arrival))
	}
	h.p = max(t.prevP+(float64(req.delta)+cost)*t.propGap, t.propFloor)
	h.l = t.headSince
	if t.limGap > 0 {
		h.l = max(t.prevL+(float64(req.delta)+cost)*t.limGap, t.headSince)
	}
}

// idle removes t from heads.
func (q *Queue[T]) idle(t *tenant[T]) {
	last := len(q.heads) - 1
	if t.slot != last {
		q.heads[t.slot] = q.heads[last]
		q.heads[t.slot].t.slot = t.slot
	}
	q.heads[last] = head[T]{}
	q.heads = q.heads[:last]
	t.slot = -1
}

// tenant returns tenant id's state, made under the defaults on first sight.
func (q *Queue[T]) tenant(id uint16) *tenant[T] {
	t := q.tenants.get(id)
	if t == nil {
		// No previous tags: the first request's are its floors.
		inf := math.Inf(-1)
		t = &tenant[T]{slot: -1, prevR: inf, prevP: inf, prevL: inf}
		t.setPolicy(q.defaults, 0)
		q.tenants.put(id, t)
	}
	return t
}

// Default is the policy of tenants without their own.
func (q *Queue[T]) Default() Policy { return q.defaults }

// SetDefault changes the defaults at now, for every tenant without its own
// policy.
func (q *Queue[T]) SetDefault(p Policy, now time.Duration) error {
	if err := p.Validate(); err != nil {
		return err
	}
	q.defaults = p
	q.tenants.each(func(_ uint16, t *tenant[T]) {
		if !t.custom {
			q.change(t, p, now)
		}
	})
	return nil
}

// SetPolicy gives tenant its own policy from now on.
func (q *Queue[T]) SetPolicy(tenant uint16, p Policy, now time.Duration) error {
	if err := p.Validate(); err != nil {
		return err
	}
	t := q.tenant(tenant)
	t.custom = true
	q.change(t, p, now)
	return nil
}

// RemovePolicy puts tenant back under the defaults.
func (q *Queue[T]) RemovePolicy(tenant uint16, now time.Duration) {
	if t := q.tenants.get(tenant); t != nil && t.custom {
		t.custom = false
		q.change(t, q.defaults, now)
	}
}

// Policy is tenant's policy, and whether it is the defaults.
func (q *Queue[T]) Policy(tenant uint16) (p Policy, isDefault bool) {
	if t := q.tenants.get(tenant); t != nil && t.custom {
		return t.policy, false
	}
	return q.defaults, true
}

// change applies p to t at now and retags its head, so that a raised limit
// or reservation takes effect at once.
func (q *Queue[T]) change(t *tenant[T], p Policy, now time.Duration) {
	t.setPolicy(p, now)
	if t.slot >= 0 {
		q.retag(t)
	}
}

// setPolicy sets t's policy and spacings. A changed reservation counts from
// now: the backlog queued before it was set is not owed at the new rate (an
// idle tenant's next arrival is its floor anyway).
func (t *tenant[T]) setPolicy(p Policy, now time.Duration) {
	if p.Reservation != t.policy.Reservation && t.slot >= 0 {
		t.prevR = max(t.prevR, float64(now))
	}
	t.policy = p
	t.resGap, t.propGap, t.limGap = spacing(p.Reservation), spacing(p.Weight), spacing(p.Limit)
}

// Stats is tenant's queue state and counters.
func (q *Queue[T]) Stats(tenant uint16) Stats {
	p, def := q.Policy(tenant)
	s := Stats{Policy: p, Default: def}
	if t := q.tenants.get(tenant); t != nil {
		s.Queued = t.n
		s.ServedReservation = t.served[Reservation]
		s.ServedWeight = t.served[Weight]
		s.Throttled = t.throttles
		s.Delay = t.delay
	}
	return s
}

// Tenants appends the ids of the tenants the queue knows (seen or given a
// policy), in order, to dst.
func (q *Queue[T]) Tenants(dst []uint16) []uint16 {
	q.tenants.each(func(id uint16, _ *tenant[T]) { dst = append(dst, id) })
	return dst
}

// tenantTable maps a 16-bit tenant id to its state in two array steps, with
// no hashing on the admission path; a page of 256 ids is made on first use.
type tenantTable[T any] [256]*[256]*tenant[T]

func (tt *tenantTable[T]) get(id uint16) *tenant[T] {
	if page := tt[id>>8]; page != nil {
		return page[id&0xff]
	}
	return nil
}

func (tt *tenantTable[T]) put(id uint16, t *tenant[T]) {
	if tt[id>>8] == nil {
		tt[id>>8] = new([256]*tenant[T])
	}
	tt[id>>8][id&0xff] = t
}

// each calls f for every tenant, in id order.
func (tt *tenantTable[T]) each(f func(uint16, *tenant[T])) {
	for hi, page := range tt {
		if page == nil {
			continue
		}
		for lo, t := range page {
			if t != nil {
				f(uint16(hi)<<8|uint16(lo), t)
			}
		}
	}
}

func (t *tenant[T]) push(r request[T]) {
	if t.n == len(t.ring) {
		ring := make([]request[T], max(4, 2*len(t.ring)))
		for i := range t.n {
			ring[i] = t.ring[(t.first+i)%len(t.ring)]
		}
		t.ring, t.first = ring, 0
	}
	t.ring[(t.first+t.n)%len(t.ring)] = r
	t.n++
}

func (t *tenant[T]) pop() request[T] {
	r := t.ring[t.first]
	t.ring[t.first] = request[T]{} // let the item go
	t.first = (t.first + 1) % len(t.ring)
	t.n--
	return r
}
