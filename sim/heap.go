package sim

// event kinds.
const (
	evIssue        uint8 = iota // a client issues its next operation (a = client)
	evAtPlane                   // a request reaches the data plane (a = request)
	evAtNode                    // a request reaches its node (a = request)
	evServed                    // node a finishes the request at its queue's head
	evCommit                    // a write commits at its tail (a = request)
	evReplyAtPlane              // a reply reaches the data plane (a = request)
	evVSB                       // a VSB reaches the data plane (a = Sim.vsbs index, node = sender)
	evRound                     // the controller's hot-key round
	evEpoch                     // the controller's coarse epoch (HATS)
)

// event is one thing that happens at virtual time t (ns). seq orders
// events of the same time by when they were scheduled, so that a run is a
// function of its seed alone.
type event struct {
	t    uint64
	seq  uint64
	a    int32
	node uint16
	kind uint8
}

// events is a 4-ary min-heap by (t, seq), typed to keep the hot loop free
// of interface calls; four children per node halve the heap's depth.
type events struct {
	h   []event
	seq uint64
}

func (q *events) push(e event) {
	q.seq++
	e.seq = q.seq
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
}

func before(a, b *event) bool { return a.t < b.t || (a.t == b.t && a.seq < b.seq) }

func (q *events) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	last := q.h[n]
	q.h = q.h[:n]
	if n == 0 {
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
	return top
}

func (q *events) len() int { return len(q.h) }
