package storagenode

import (
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// heldRecords are the records of a shard's keys that hold dirty versions,
// as the shard last stored them. The shard is the only writer of its keys'
// records and writes through to Pebble, so a held record is the stored
// one: the later steps of a write at a chain member (the tail's ack at the
// middle and at the head) take it instead of reading Pebble again. A
// record leaves when it is stored clean; when the table is full a record
// is not held, and is read from Pebble as before.
type heldRecords struct {
	m   map[string]record
	cap int
	key []byte // the lookup key: tree position, then the record's Pebble key
}

func newHeldRecords(capacity int) heldRecords {
	return heldRecords{m: make(map[string]record), cap: capacity}
}

func (h *heldRecords) lookupKey(t *tree, part uint32, key []byte) []byte {
	h.key = appendRecordKey(append(h.key[:0], byte(t.pos)), part, key)
	return h.key
}

// getRecord reads a key's record, its values its own (and its Dirty
// slice, which the caller may change).
func (s *shard) getRecord(t *tree, part uint32, key []byte) (record, error) {
	if rec, ok := s.held.m[string(s.held.lookupKey(t, part, key))]; ok {
		rec.Dirty = slices.Clone(rec.Dirty)
		return rec, nil
	}
	return t.getRecord(part, key)
}

// putRecord stores a key's record as tree.putRecord does, and holds it
// while it is dirty. The record's values must be its own, and rec must not
// change afterwards.
func (s *shard) putRecord(t *tree, part uint32, key []byte, rec *record, g *groupCommit) error {
	if err := t.putRecord(part, key, rec, g); err != nil {
		s.forgetRecord(t, part, key)
		return err
	}
	s.hold(t, part, key, rec)
	return nil
}

// commitRecord stores a key's record and the batch's other entries as one
// synced write in the shard's group commit, and holds the record while it
// is dirty. Its values must be its own, and rec must not change afterwards.
func (s *shard) commitRecord(t *tree, part uint32, key []byte, rec *record, b *pebble.Batch) error {
	t.writes.Add(1)
	b.Set(recordKey(part, key), rec.encode(), nil)
	if err := s.commit.apply(t.db, b); err != nil {
		s.forgetRecord(t, part, key)
		return err
	}
	s.hold(t, part, key, rec)
	return nil
}

func (s *shard) hold(t *tree, part uint32, key []byte, rec *record) {
	k := s.held.lookupKey(t, part, key)
	if len(rec.Dirty) == 0 {
		delete(s.held.m, string(k))
		return
	}
	if _, ok := s.held.m[string(k)]; ok || len(s.held.m) < s.held.cap {
		s.held.m[string(k)] = *rec
	}
}

// forgetRecord drops what is held for a key whose record was written
// another way (or whose write failed): the next read goes to Pebble.
func (s *shard) forgetRecord(t *tree, part uint32, key []byte) {
	delete(s.held.m, string(s.held.lookupKey(t, part, key)))
}
