package sim

// Requests on their way to their nodes. Every request reaches its node
// one link after the data plane routed it (atPlane), so requests arrive
// in the order routed, each at the order (t, seq) its own event would
// have: its seq is taken when it is routed. An arrival needs an event
// only where it starts a node's service (the node has nothing else to
// serve nor on its way), or where its time may start the measurement
// (the warm-up's end). The others wait in Sim.arriving until a reader of
// their node's queues (served, an arrival's event) moves every request
// arrived by the event in hand to its node's queues, in order: one event
// fewer for most requests, the queues as they were at each read.

// arrival is a request on its way to its node, which it reaches at its
// order.
type arrival struct {
	order
	i     int32 // the request
	node  int32 // its node's index in Sim.nodes
	write bool
	own   bool // it has an event of its own, at its order
}

// arrivals is the requests on their way, in order, and which nodes are
// claimed: serving, or with a request on its way whose event will start
// their service (a bitset by node index).
type arrivals struct {
	queue[arrival]
	claimed []uint64
	// everyOne: no request waits here, each arrives at an event of its
	// own, pushed to its node's queue there, as before arrivals waited
	// here (for tests: it must not change the run).
	everyOne bool
}

// claim claims node n and says whether it was claimed already.
func (a *arrivals) claim(n int32) bool {
	w := int(n / 64)
	if w >= len(a.claimed) {
		a.claimed = append(a.claimed, make([]uint64, w+1-len(a.claimed))...)
	}
	bit := uint64(1) << (n % 64)
	was := a.claimed[w]&bit != 0
	a.claimed[w] |= bit
	return was
}

// release unclaims node n.
func (a *arrivals) release(n int32) {
	if w := int(n / 64); w < len(a.claimed) { // else never claimed
		a.claimed[w] &^= uint64(1) << (n % 64)
	}
}

// route sends request i, routed by the data plane now to s.nodes[node],
// on its way there.
func (s *Sim) route(i int32, write bool, node int32) {
	if s.arriving.everyOne {
		s.at(s.link(), event{kind: evAtNode, a: i})
		return
	}
	a := arrival{i: i, node: node, write: write}
	t := s.now + s.link()
	// An event where the arrival starts the node's service, or may be
	// the first event past the warm-up.
	if !s.arriving.claim(node) || !s.stats.measuring && t >= uint64(s.cfg.Warmup) {
		s.at(s.link(), event{kind: evAtNode, a: i})
		a.order, a.own = order{t, s.ev.seq}, true
	} else {
		a.order = s.ev.reserve(t)
	}
	s.arriving.push(a)
	prefetchPair(&s.nodes[node]) // its queues, which arrive pushes to
}

// arrive moves the requests arrived by the event in hand to their nodes'
// queues.
func (s *Sim) arrive() {
	for s.arriving.len() > 0 {
		a := s.arriving.first()
		if !a.notAfter(s.ev.cur) {
			return
		}
		n := &s.nodes[a.node]
		if a.write {
			s.pushWrite(n, a.i)
		} else {
			n.reads.push(a.i)
		}
		s.arriving.pop()
	}
}

// await leaves node n, with nothing to serve, to the first request on
// its way to it: that request's arrival starts the service, at an event
// of its own (scheduled now at its order, if it has none). With none on
// its way n is released: the next routed to it gets an event.
func (s *Sim) await(n *node) {
	idx := int32(n.id) - 1
	for j := range s.arriving.len() {
		if a := s.arriving.at(j); a.node == idx {
			if !a.own {
				s.ev.insert(event{t: a.t, seq: a.seq, kind: evAtNode, a: a.i})
				a.own = true
			}
			return
		}
	}
	s.arriving.release(idx)
}
