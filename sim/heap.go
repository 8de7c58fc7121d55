package sim

import (
	"math"
	"math/bits"
)

// event kinds.
const (
	evIssue        uint8 = iota // a client issues its next operation (a = client)
	evAtPlane                   // a request reaches the data plane (a = request)
	evAtNode                    // a request reaches its node, if at an event (arrivals.go; a = request)
	evServed                    // node a finishes the request at its queue's head
	evCommit                    // a write commits at its tail (a = request)
	evReplyAtPlane              // a reply reaches the data plane (a = request)
	evVSB                       // VSBs sent together reach the data plane (a = Sim.vsbs index)
	evVerify                    // a verified read's version query reaches the key's tail (a = request)
	evRound                     // the controller's hot-key round
	evEpoch                     // the controller's coarse epoch (HATS)
)

// event is one thing that happens at virtual time t (ns). seq orders
// events of the same time by when they were scheduled, so that a run is a
// function of its seed alone. Four fields at most: the compiler keeps
// such a struct in registers, where a bigger one is copied through the
// stack, and a copy read back right after its fields were stored one by
// one waits for the stores (store-to-load forwarding fails).
type event struct {
	t    uint64
	seq  uint64
	a    int32 // the event's request, client, node (evServed) or VSBs
	kind uint8
}

// events is the queue of future events, ordered by (t, seq). Most events
// come a fixed delay after the one that schedules them (a link, two, a
// deterministic service time), and those of one delay are scheduled in
// time order: each such delay gets a FIFO lane, which needs no ordering
// at all. The rest go to a 4-ary min-heap (four children per node halve
// its depth), typed to keep the hot loop free of interface calls.
type events struct {
	h     []event
	seq   uint64
	lanes []lane
	// heads is each lane's first event's order (t, seq), and the heap's
	// at heapHead; none: noEvent. The search for the earliest reads this
	// one small array, not each lane's ring (two dependent loads a lane).
	heads [maxLanes + 1]order
	// cur is the order of the event taken last: the one in hand.
	cur order
}

// order is an event's place in the queue: its (t, seq).
type order struct{ t, seq uint64 }

// notAfter says whether o comes no later than c.
func (o order) notAfter(c order) bool { return o.t < c.t || o.t == c.t && o.seq <= c.seq }

// noEvent is the order of an empty lane or heap: after every event.
var noEvent = order{math.MaxUint64, math.MaxUint64}

// heapHead is the heap's index in events.heads.
const heapHead = maxLanes

// lane holds the events scheduled d after their scheduling: in (t, seq)
// order, since time does not go back.
type lane struct {
	d uint64
	queue[event]
}

// maxLanes bounds the lanes; delays beyond the first maxLanes go to the
// heap.
const maxLanes = 6

// newEvents is an empty queue.
func newEvents() events {
	var q events
	for i := range q.heads {
		q.heads[i] = noEvent
	}
	return q
}

// after queues e at now+d.
func (q *events) after(now, d uint64, e event) {
	e.t = now + d
	for i := range q.lanes {
		if l := &q.lanes[i]; l.d == d {
			q.seq++
			e.seq = q.seq
			if l.len() == 0 {
				q.heads[i] = order{e.t, e.seq}
			}
			l.push(e)
			return
		}
	}
	if len(q.lanes) < maxLanes {
		q.lanes = append(q.lanes, lane{d: d})
		q.after(now, d, e)
		return
	}
	q.push(e)
}

// reserve takes the seq of an event at t that is not queued (yet): the
// order it has among the others, should it be queued at (insert).
func (q *events) reserve(t uint64) order {
	q.seq++
	return order{t, q.seq}
}

// rarely queues e at now+d in the heap: for events of a delay that
// recurs seldom (the controller's rounds and epochs, the clients' first
// issues), which would hold a lane each, lengthening every search of the
// lanes. The same order as after: seq counts both.
func (q *events) rarely(now, d uint64, e event) {
	e.t = now + d
	q.push(e)
}

// earliest finds the earliest event: its source (a lane's index, or
// heapHead for the heap) for take, and its time; false if there is none.
// One scan serves both the caller's look at the time and the removal.
// (t, seq) compares as one 128-bit number, t high: the borrow of its
// subtraction, with no branch on which source is earlier, a choice the
// branch predictor gets wrong often. Small enough to inline.
func (q *events) earliest() (src int, t uint64, ok bool) {
	t, seq := q.heads[0].t, q.heads[0].seq
	for i := 1; i < len(q.heads); i++ {
		h := &q.heads[i]
		_, borrow := bits.Sub64(h.seq, seq, 0)
		if _, borrow = bits.Sub64(h.t, t, borrow); borrow != 0 {
			t, seq, src = h.t, h.seq, i
		}
	}
	return src, t, seq != noEvent.seq // an event's seq is below it
}

// take removes and returns the earliest event of source src, as earliest
// returned it.
func (q *events) take(src int) event {
	q.cur = q.heads[src]
	if src == heapHead {
		return q.pop()
	}
	l := &q.lanes[src]
	e := l.pop()
	q.heads[src] = noEvent
	if l.len() > 0 {
		f := l.first()
		q.heads[src] = order{f.t, f.seq}
	}
	return e
}

func (q *events) push(e event) {
	q.seq++
	e.seq = q.seq
	q.insert(e)
}

// insert queues e at its order, set already (reserve), in the heap.
func (q *events) insert(e event) {
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !before(&e, &q.h[p]) {
			break
		}
		q.h[i] = q.h[p]
		i = p
	}
	q.h[i] = e
	q.heads[heapHead] = order{q.h[0].t, q.h[0].seq}
}

func before(a, b *event) bool { return a.t < b.t || (a.t == b.t && a.seq < b.seq) }

func (q *events) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	last := q.h[n]
	q.h = q.h[:n]
	if n == 0 {
		q.heads[heapHead] = noEvent
		return top
	}
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < min(c+4, n); j++ {
			if before(&q.h[j], &q.h[m]) {
				m = j
			}
		}
		if !before(&q.h[m], &last) {
			break
		}
		q.h[i] = q.h[m]
		i = m
	}
	q.h[i] = last
	q.heads[heapHead] = order{q.h[0].t, q.h[0].seq}
	return top
}

// queue is a FIFO in a ring buffer that doubles when full: memory in
// use stays at the most it ever held, and no pop copies.
type queue[T any] struct {
	buf  []T // its length a power of two
	head int
	n    int
}

func (f *queue[T]) len() int { return f.n }

func (f *queue[T]) push(x T) {
	if f.n == len(f.buf) {
		b := make([]T, max(16, 2*len(f.buf)))
		m := copy(b, f.buf[f.head:])
		copy(b[m:], f.buf[:f.head])
		f.buf, f.head = b, 0
	}
	f.buf[(f.head+f.n)&(len(f.buf)-1)] = x
	f.n++
}

// first is the head; the queue must not be empty.
func (f *queue[T]) first() *T { return &f.buf[f.head] }

// at is the i'th from the head; i must be below len.
func (f *queue[T]) at(i int) *T { return &f.buf[(f.head+i)&(len(f.buf)-1)] }

func (f *queue[T]) pop() T {
	x := f.buf[f.head]
	f.head = (f.head + 1) & (len(f.buf) - 1)
	f.n--
	return x
}
