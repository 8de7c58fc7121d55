package controller

import (
	"maps"
	"sync"
	"time"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// Entry is a hot key as the controller installed it in every data plane.
// Entries are values: the controller replaces an entry to change it and
// never writes into its slices, so a copy stays valid once taken.
type Entry struct {
	Hash    wire.KeyHash
	Key     []byte
	Slot    uint32        // index of the slot's counters and registers, the same on every plane
	Locs    []wire.NodeID // the chain first, then extras
	R       int           // chain length
	Buckets []uint8       // directory.Buckets entries indexing Locs
	Pinned  bool          // never evicted by the hot-key manager
	Hits    uint64        // hits in this controller's last round (not replicated)
	// Gen is the promotion's generation, unique per controller: a P4 slot
	// re-seeds its registers when it sees a new one, so a reused slot does
	// not inherit the evicted key's versions and fresh bits.
	Gen uint32
	// Ver is the seed stamp (wire.MakeStamp): the head's latest version
	// when the key was promoted (or re-synced), below the incarnation the
	// head was told. Every plane seeds the slot with the version and
	// stamps the incarnation above its versions (spec/README.md, flaw G).
	Ver uint64
}

// Partitions is the layout with the split weights installed over its
// partitions.
type Partitions struct {
	Layout *layout.Map
	// Buckets holds the partitions whose weights were set; the others split
	// evenly.
	Buckets map[uint32][]uint8
}

// updateKind says what a directoryUpdate carries.
type updateKind int

const (
	updateSnapshot   updateKind = iota // the layout's nodes, the partitions and every entry
	updateUpsert                       // entries promoted or changed
	updateDelete                       // entries evicted
	updatePartitions                   // the partitions, after their weights changed
)

// directoryUpdate is one change to the directory as watchers get it; the
// API turns it into the protobuf that agents receive.
type directoryUpdate struct {
	kind       updateKind
	sequence   uint64
	entries    []Entry
	partitions Partitions // snapshot and partitions
}

// state is the controller's intended directory, which agents subscribe to.
// Its replicated part changes only through apply (fsm.go). Watchers get a
// snapshot and then every delta in order; a watcher that falls 1024
// updates behind is cut off and must resubscribe (and so gets a fresh
// snapshot) rather than stall the controller. mu guards every field.
type state struct {
	mu sync.Mutex
	// Replicated.
	lay      *layout.Map
	entries  map[wire.KeyHash]Entry
	reserved map[wire.KeyHash]Entry // promotions under way (opReserve)
	free     []uint32               // free slot indices, oldest-freed first
	// partBuckets holds the partitions whose weights were set; the others
	// split evenly. Its slices are replaced, never written into.
	partBuckets map[uint32][]uint8
	gen         uint32 // the last promotion's generation
	// inc is the data planes' incarnation: every promotion hands it to
	// the head and seeds the slot with it (wire.MakeStamp), and a
	// re-program of a plane that lost its state takes the next one
	// (spec/README.md, flaw G).
	inc uint16
	qos QoSConfig
	// downSince dates each node down in lay: when the leader that
	// spliced it out decided so (command.At).
	downSince map[wire.NodeID]time.Time
	// This controller's own.
	hits     map[wire.KeyHash]uint64 // each entry's hits in the last round
	seq      uint64
	watchers map[chan directoryUpdate]struct{}
}

func newState(lay *layout.Map, capacity int) *state {
	s := &state{
		lay:         lay,
		entries:     map[wire.KeyHash]Entry{},
		reserved:    map[wire.KeyHash]Entry{},
		partBuckets: map[uint32][]uint8{},
		downSince:   map[wire.NodeID]time.Time{},
		hits:        map[wire.KeyHash]uint64{},
		watchers:    map[chan directoryUpdate]struct{}{},
	}
	for i := 0; i < capacity; i++ {
		s.free = append(s.free, uint32(i))
	}
	return s
}

// partitionsLocked returns the partitions as they are now; later changes
// do not show in it.
func (s *state) partitionsLocked() Partitions {
	return Partitions{Layout: s.lay, Buckets: maps.Clone(s.partBuckets)}
}

// publishLocked sends an update to every watcher.
func (s *state) publishLocked(u directoryUpdate) {
	s.seq++
	u.sequence = s.seq
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
func (s *state) watch() chan directoryUpdate {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := make(chan directoryUpdate, 1024)
	w <- directoryUpdate{kind: updateSnapshot, sequence: s.seq, entries: s.sortedLocked(),
		partitions: s.partitionsLocked()}
	s.watchers[w] = struct{}{}
	return w
}

func (s *state) unwatch(w chan directoryUpdate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.watchers[w]; ok {
		delete(s.watchers, w)
		close(w)
	}
}

// sortedLocked returns a copy of the entries, by slot, with their hits.
func (s *state) sortedLocked() []Entry {
	es := bySlot(s.entries)
	for i := range es {
		es[i].Hits = s.hits[es[i].Hash]
	}
	return es
}
