package controller

import (
	"slices"
	"sync"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// Entry is a hot key as the controller installed it in every data plane.
type Entry struct {
	Hash    wire.KeyHash
	Key     []byte
	Slot    uint32        // index of the slot's counters and registers, the same on every plane
	Locs    []wire.NodeID // the chain first, then extras
	R       int           // chain length
	Buckets []uint8       // directory.Buckets entries indexing Locs
	Pinned  bool          // never evicted by the hot-key manager
	Hits    uint64        // hits in the last round
	// Gen is the promotion's generation, unique per controller: a P4 slot
	// re-seeds its registers when it sees a new one, so a reused slot does
	// not inherit the evicted key's versions and fresh bits.
	Gen uint32
	// Ver is the head's latest version when the key was promoted. Every
	// plane seeds the slot with it.
	Ver uint64
}

func (e *Entry) proto() *api.DirectoryEntry {
	pe := &api.DirectoryEntry{
		KeyHash: append([]byte(nil), e.Hash[:]...), Key: e.Key, ChainLength: uint32(e.R),
		Pinned: e.Pinned, Hits: e.Hits, Version: e.Ver,
	}
	for _, n := range e.Locs {
		pe.Locations = append(pe.Locations, uint32(n))
	}
	for _, b := range e.Buckets {
		pe.Buckets = append(pe.Buckets, uint32(b))
	}
	return pe
}

// state is the controller's intended directory, which agents subscribe to.
// Watchers get a snapshot and then every delta in order; a watcher that
// falls 1024 updates behind is cut off and must resubscribe (and so gets a
// fresh snapshot) rather than stall the controller.
type state struct {
	mu      sync.Mutex
	lay     *layout.Map
	entries map[wire.KeyHash]*Entry
	free    []uint32 // free slot indices
	// partBuckets holds the partitions whose weights were set; the others
	// split evenly.
	partBuckets map[uint32][]uint8
	seq         uint64
	gen         uint32 // the last promotion's generation
	watchers    map[chan *api.DirectoryUpdate]struct{}
}

func newState(capacity int) *state {
	s := &state{
		entries:     map[wire.KeyHash]*Entry{},
		partBuckets: map[uint32][]uint8{},
		watchers:    map[chan *api.DirectoryUpdate]struct{}{},
	}
	for i := 0; i < capacity; i++ {
		s.free = append(s.free, uint32(i))
	}
	return s
}

func (s *state) partitionsProtoLocked() []*api.Partition {
	ps := make([]*api.Partition, s.lay.Partitions())
	for p, c := range s.lay.Chains() {
		ap := &api.Partition{Index: uint32(p)}
		for _, n := range c {
			ap.Chain = append(ap.Chain, uint32(n))
		}
		b, ok := s.partBuckets[uint32(p)]
		for i := 0; i < directory.Buckets; i++ {
			if ok {
				ap.Buckets = append(ap.Buckets, uint32(b[i]))
			} else {
				ap.Buckets = append(ap.Buckets, uint32(i%len(c)))
			}
		}
		ps[p] = ap
	}
	return ps
}

func (s *state) nodesProtoLocked() []*api.Node {
	ids := s.lay.Nodes()
	out := make([]*api.Node, len(ids))
	for i, id := range ids {
		n, _ := s.lay.Node(id)
		out[i] = &api.Node{Id: uint32(id), Addr: n.Addr}
	}
	return out
}

// publishLocked sends an update to every watcher.
func (s *state) publishLocked(u *api.DirectoryUpdate) {
	s.seq++
	u.Sequence = s.seq
	for w := range s.watchers {
		select {
		case w <- u:
		default:
			delete(s.watchers, w)
			close(w)
		}
	}
}

// watch registers a watcher and returns its channel, primed with a snapshot.
func (s *state) watch() chan *api.DirectoryUpdate {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := make(chan *api.DirectoryUpdate, 1024)
	snap := &api.DirectoryUpdate{Kind: api.DirectoryUpdate_SNAPSHOT, Sequence: s.seq, Nodes: s.nodesProtoLocked(),
		Partitions: s.partitionsProtoLocked(), Epoch: s.lay.Epoch(), PartitionBits: uint32(s.lay.Bits())}
	for _, e := range s.sortedLocked() {
		snap.Entries = append(snap.Entries, e.proto())
	}
	w <- snap
	s.watchers[w] = struct{}{}
	return w
}

func (s *state) unwatch(w chan *api.DirectoryUpdate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.watchers[w]; ok {
		delete(s.watchers, w)
		close(w)
	}
}

func (s *state) sortedLocked() []*Entry {
	es := make([]*Entry, 0, len(s.entries))
	for _, e := range s.entries {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *Entry) int { return int(a.Slot) - int(b.Slot) })
	return es
}
