package model

import "github.com/netdir/netdir/internal/udpbatch"

// pending remembers which client sent each request in flight, so that the
// reply, which the node sends back to the switch, can be relayed. It is a
// fixed ring of entries in arrival order plus an open-addressed index
// (linear probing, at most half full, backward-shift deletion) from request
// id to ring position. When the ring is full the oldest entry is overwritten;
// if its reply had not come yet that counts as an eviction. Nothing in it
// allocates after newPending.
type pending struct {
	ring    []pendEntry
	index   []pendIndex // len is a power of two, twice len(ring)
	mask    uint64
	shift   uint
	head    int // next ring position to write
	live    int // requests in flight
	evicted uint64
}

type pendEntry struct {
	id   uint64
	to   udpbatch.Peer
	live bool
}

type pendIndex struct {
	id  uint64
	pos int32 // ring position + 1; 0 is empty
}

// newPending returns a table for size requests in flight (rounded up to a
// power of two, at least 2).
func newPending(size int) *pending {
	n := 2
	for n < size {
		n <<= 1
	}
	bits := uint(0)
	for 1<<bits < 2*n {
		bits++
	}
	return &pending{
		ring:  make([]pendEntry, n),
		index: make([]pendIndex, 2*n),
		mask:  uint64(2*n - 1),
		shift: 64 - bits,
	}
}

func (t *pending) home(id uint64) uint64 { return (id * 0x9E3779B97F4A7C15) >> t.shift }

// find returns the index slot holding id, or -1.
func (t *pending) find(id uint64) int {
	for i, n := t.home(id), 0; n < len(t.index); i, n = (i+1)&t.mask, n+1 {
		e := &t.index[i]
		if e.pos == 0 {
			return -1
		}
		if e.id == id {
			return int(i)
		}
	}
	return -1
}

// put records that request id came from to. A request id already in flight
// (a retransmission) keeps its place and takes the new address.
func (t *pending) put(id uint64, to udpbatch.Peer) {
	if i := t.find(id); i >= 0 {
		t.ring[t.index[i].pos-1].to = to
		return
	}
	pos := t.head
	t.head++
	if t.head == len(t.ring) {
		t.head = 0
	}
	if old := &t.ring[pos]; old.live {
		t.evicted++
		t.live--
		t.remove(t.find(old.id))
	}
	t.live++
	t.ring[pos] = pendEntry{id: id, to: to, live: true}
	i := t.home(id)
	for t.index[i].pos != 0 {
		i = (i + 1) & t.mask
	}
	t.index[i] = pendIndex{id: id, pos: int32(pos + 1)}
}

// take returns and forgets the client of request id.
func (t *pending) take(id uint64) (udpbatch.Peer, bool) {
	i := t.find(id)
	if i < 0 {
		return udpbatch.Peer{}, false
	}
	e := &t.ring[t.index[i].pos-1]
	e.live = false
	t.live--
	t.remove(i)
	return e.to, true
}

// remove deletes index slot i by backward shift, keeping every remaining
// entry reachable from its home slot.
func (t *pending) remove(i int) {
	if i < 0 {
		return
	}
	hole := uint64(i)
	for j, n := (hole+1)&t.mask, 0; n < len(t.index); j, n = (j+1)&t.mask, n+1 {
		e := t.index[j]
		if e.pos == 0 {
			break
		}
		h := t.home(e.id)
		// e stays if its home lies cyclically in (hole, j].
		if (hole < j && hole < h && h <= j) || (hole > j && (h > hole || h <= j)) {
			continue
		}
		t.index[hole] = e
		hole = j
	}
	t.index[hole] = pendIndex{}
}
