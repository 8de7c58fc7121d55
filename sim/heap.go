package sim

// event kinds.
const (
	evIssue         uint8 = iota // a client issues its next operation (a = client)
	evAtPlane                    // a request reaches the data plane (a = request)
	evAtNode                     // a request reaches its node (a = request)
	evServed                     // node a finishes the request at its queue's head
	evCommit                     // a write commits at its tail (a = request)
	evReplyAtPlane               // a reply reaches the data plane (a = request)
	evReplyAtClient              // a reply reaches its client (a = request)
	evVSB                        // a VSB reaches the data plane (key, node, v, a = attempt)
	evRound                      // the controller's hot-key round
	evEpoch                      // the controller's coarse epoch (HATS)
)

// event is one thing that happens at virtual time t (ns). seq orders
// events of the same time by when they were scheduled, so that a run is a
// function of its seed alone.
type event struct {
	t    uint64
	seq  uint64
	kind uint8
	a    int32
	node uint16
	key  int64
	v    uint64
}

// events is a binary min-heap by (t, seq), typed to keep the hot loop free
// of interface calls.
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
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *events) less(i, j int) bool {
	a, b := &q.h[i], &q.h[j]
	return a.t < b.t || (a.t == b.t && a.seq < b.seq)
}

func (q *events) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h = q.h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}

func (q *events) len() int { return len(q.h) }
