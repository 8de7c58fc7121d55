package controller

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// The replicated state (ARCHITECTURE.md, "Reconfiguration"): the layout
// with its epoch, the directory entries and their pins, the partition
// weights and the tenants' QoS configuration (qos.go). It changes only by commands,
// applied in the same order on every controller by state.apply: the
// leader's control loops and API decide (pure functions of the state and
// their inputs) and hand their decisions to the log as commands; the log is
// raft across controllers (raft.go) or a direct call for a lone one.

// op names a command.
type op uint8

const (
	// opReserve takes a slot for a promotion before its head is told: a
	// controller that fails before opCommit leaves the reservation in the
	// state, and the next leader undoes the promotion at the head.
	opReserve op = iota + 1
	opCommit     // the promoted entry, seeded with its head's version
	opRelease    // a reservation whose promotion failed
	opEvict      // entries removed from the directory
	opUpdate     // entries of the same generation changed (pins, buckets, versions)
	opPartitions
	opLayout // a new layout, of a higher epoch
	opQoS    // the QoS configuration, as QoSStore.Save gives it
	// opIncarnation starts a new incarnation of the data planes' stamps:
	// a plane lost its state (spec/README.md, flaw G; wire/stamp.go).
	opIncarnation
)

// command is one change to the replicated state.
type command struct {
	Op         op
	Entries    []Entry            // reserve, commit, release, evict, update
	Partitions map[uint32][]uint8 // partitions: buckets by partition
	Layout     *layout.Config     // layout
	QoS        *QoSConfig         // qos
	// Incarnation is the new incarnation (incarnation); it must follow
	// the current one.
	Incarnation uint16
	// At is the deciding leader's clock (layout): the time the nodes it
	// newly marks down went down, from which any later leader counts
	// SpareAfter.
	At time.Time
}

// errStale refuses a command whose entry changed since it was decided (a
// newer promotion of the key, or none).
var errStale = errors.New("controller: the entry changed since the decision")

// snapshot is the replicated state as snapshots hold it.
type snapshot struct {
	Layout      layout.Config
	Entries     []Entry // by slot
	Reserved    []Entry
	Free        []uint32
	PartBuckets map[uint32][]uint8
	Gen         uint32
	QoS         QoSConfig
	Inc         uint16 // the data planes' incarnation (opIncarnation)
	DownSince   map[wire.NodeID]time.Time
}

func encodeCommand(c command) ([]byte, error) {
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(c)
	return b.Bytes(), err
}

func decodeCommand(b []byte) (command, error) {
	var c command
	err := gob.NewDecoder(bytes.NewReader(b)).Decode(&c)
	return c, err
}

// apply changes the state by one command; s.mu is held. A command that
// does not fit the state (its entry changed since it was decided) changes
// nothing and returns why, the same on every controller.
func (s *state) apply(c command) error {
	switch c.Op {
	case opReserve:
		for _, e := range c.Entries {
			if s.has(e.Hash) {
				return fmt.Errorf("controller: %q is already in the directory", e.Key)
			}
			i := slices.Index(s.free, e.Slot)
			if i < 0 {
				return fmt.Errorf("controller: slot %d is taken", e.Slot)
			}
			s.free = slices.Delete(s.free, i, i+1)
			s.gen = max(s.gen, e.Gen)
			s.reserved[e.Hash] = e
		}
	case opCommit:
		for _, e := range c.Entries {
			if r, ok := s.reserved[e.Hash]; !ok || r.Gen != e.Gen || r.Slot != e.Slot {
				return errStale
			}
			delete(s.reserved, e.Hash)
			e.Hits = 0
			s.entries[e.Hash] = e
		}
		s.publishLocked(directoryUpdate{kind: updateUpsert, entries: c.Entries})
	case opRelease:
		for _, e := range c.Entries {
			if r, ok := s.reserved[e.Hash]; ok && r.Gen == e.Gen {
				delete(s.reserved, e.Hash)
				s.free = append(s.free, r.Slot)
			}
		}
	case opEvict:
		var gone []Entry
		for _, e := range c.Entries {
			if cur, ok := s.entries[e.Hash]; ok && cur.Gen == e.Gen {
				delete(s.entries, e.Hash)
				delete(s.hits, e.Hash)
				// Oldest-freed first (see promote): appended.
				s.free = append(s.free, cur.Slot)
				gone = append(gone, cur)
			}
		}
		if len(gone) > 0 {
			s.publishLocked(directoryUpdate{kind: updateDelete, entries: gone})
		}
	case opUpdate:
		var changed []Entry
		for _, e := range c.Entries {
			if cur, ok := s.entries[e.Hash]; ok && cur.Gen == e.Gen && cur.Slot == e.Slot {
				e.Hits = 0
				s.entries[e.Hash] = e
				changed = append(changed, e)
			}
		}
		if len(changed) == 0 && len(c.Entries) > 0 {
			return errStale
		}
		s.publishLocked(directoryUpdate{kind: updateUpsert, entries: changed})
	case opPartitions:
		for p, b := range c.Partitions {
			if int(p) >= s.lay.Partitions() {
				return fmt.Errorf("controller: partition %d of %d", p, s.lay.Partitions())
			}
			s.partBuckets[p] = b
		}
		s.publishLocked(directoryUpdate{kind: updatePartitions, partitions: s.partitionsLocked()})
	case opLayout:
		m, err := layout.New(*c.Layout)
		if err != nil {
			return err
		}
		if m.Epoch() <= s.lay.Epoch() {
			return fmt.Errorf("controller: layout epoch %d is not above %d", m.Epoch(), s.lay.Epoch())
		}
		old := s.lay
		s.lay = m
		s.dateDownLocked(old, c.At)
		// Weights over a chain that changed, or in which a member started
		// or ended filling, no longer fit it; a filling member gets none.
		for p := range s.partBuckets {
			if !slices.Equal(old.Chain(p), m.Chain(p)) || fillingChanged(old, m, p) {
				delete(s.partBuckets, p)
			}
		}
		for _, p := range m.FillingParts() {
			if _, set := s.partBuckets[p]; !set {
				s.partBuckets[p] = directory.BucketsForWeights(m.ReadWeights(p))
			}
		}
		// Entries whose chain or filling members changed, or that name a
		// node now down, move to the new chain with a new generation, in
		// slot order so that every replica numbers the generations alike.
		down := m.Down()
		isDown := func(id wire.NodeID) bool { return slices.Contains(down, id) }
		for _, e := range s.sortedLocked() {
			if !slices.Equal(e.Locs[:e.R], m.ChainOf(e.Hash)) || slices.ContainsFunc(e.Locs, isDown) || fillingChanged(old, m, m.Partition(e.Hash)) {
				s.entries[e.Hash] = relocate(e, m, &s.gen)
			}
		}
		s.publishLocked(directoryUpdate{kind: updateSnapshot, entries: s.sortedLocked(), partitions: s.partitionsLocked()})
	case opQoS:
		s.qos = cloneQoS(*c.QoS)
	case opIncarnation:
		if !wire.IncarnationBefore(s.inc, c.Incarnation) {
			return fmt.Errorf("controller: incarnation %d does not follow %d", c.Incarnation, s.inc)
		}
		s.inc = c.Incarnation
	default:
		return fmt.Errorf("controller: unknown command %d", c.Op)
	}
	return nil
}

// dateDownLocked dates the nodes that s.lay marks down and old did not
// (at: the command's time) and forgets the dates of nodes no longer down.
// A layout that comes with nodes down (a YAML's) leaves them undated.
func (s *state) dateDownLocked(old *layout.Map, at time.Time) {
	down := s.lay.Down()
	for id := range s.downSince {
		if !slices.Contains(down, id) {
			delete(s.downSince, id)
		}
	}
	if at.IsZero() {
		return
	}
	for _, id := range down {
		if !slices.Contains(old.Down(), id) {
			s.downSince[id] = at
		}
	}
}

// has reports whether h is in the directory or reserved for it.
func (s *state) has(h wire.KeyHash) bool {
	_, ok := s.entries[h]
	_, res := s.reserved[h]
	return ok || res
}

// snapshotLocked copies the replicated state; s.mu is held.
func (s *state) snapshotLocked() snapshot {
	sn := snapshot{Layout: s.lay.Config(), Entries: s.sortedLocked(), Free: slices.Clone(s.free),
		PartBuckets: maps.Clone(s.partBuckets), Gen: s.gen, QoS: cloneQoS(s.qos), Inc: s.inc, DownSince: maps.Clone(s.downSince)}
	sn.Reserved = bySlot(s.reserved)
	for i := range sn.Entries {
		sn.Entries[i].Hits = 0 // this controller's last round: not replicated
	}
	return sn
}

// restoreLocked replaces the replicated state with a snapshot's; watchers
// get it as a new snapshot. s.mu is held.
func (s *state) restoreLocked(sn snapshot) error {
	m, err := layout.New(sn.Layout)
	if err != nil {
		return err
	}
	s.lay, s.free, s.gen, s.inc = m, sn.Free, sn.Gen, sn.Inc
	s.partBuckets = sn.PartBuckets
	if s.partBuckets == nil {
		s.partBuckets = map[uint32][]uint8{}
	}
	s.entries, s.reserved, s.qos = map[wire.KeyHash]Entry{}, map[wire.KeyHash]Entry{}, sn.QoS
	s.downSince = sn.DownSince
	if s.downSince == nil {
		s.downSince = map[wire.NodeID]time.Time{}
	}
	clear(s.hits)
	for _, e := range sn.Entries {
		s.entries[e.Hash] = e
	}
	for _, e := range sn.Reserved {
		s.reserved[e.Hash] = e
	}
	s.publishLocked(directoryUpdate{kind: updateSnapshot, entries: s.sortedLocked(), partitions: s.partitionsLocked()})
	return nil
}

// bySlot lists a map's entries by slot.
func bySlot(m map[wire.KeyHash]Entry) []Entry {
	es := slices.Collect(maps.Values(m))
	slices.SortFunc(es, func(a, b Entry) int { return int(a.Slot) - int(b.Slot) })
	return es
}

// raftQoSStore keeps a replicated controller's QoS configuration in the
// raft state: Save is a command, so only the leader saves.
type raftQoSStore struct{ c *Controller }

func (r raftQoSStore) Load() (QoSConfig, error) {
	r.c.st.mu.Lock()
	defer r.c.st.mu.Unlock()
	return cloneQoS(r.c.st.qos), nil
}

func (r raftQoSStore) Save(q QoSConfig) error {
	return r.c.repl.apply(command{Op: opQoS, QoS: &q})
}
