package gossip

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/netdir/netdir/wire"
)

// entry is one versioned value of the table, as it travels.
type entry struct {
	Key     string          `json:"k"`
	Version uint64          `json:"v"`
	Data    json.RawMessage `json:"d"`
}

const (
	statsPrefix    = "s/"
	expectedPrefix = "e/"
	layoutKey      = "layout" // the controller's newest layout, versioned by its epoch
)

func statsKey(id wire.NodeID) string    { return fmt.Sprintf("%s%d", statsPrefix, id) }
func expectedKey(id wire.NodeID) string { return fmt.Sprintf("%s%d", expectedPrefix, id) }

// table keeps the newest version of every key. It is the whole of the
// gossip's state: merging is taking the newer version per key, which is
// commutative, associative and idempotent, so members converge whatever
// the order and repetition of messages.
type table struct {
	mu sync.Mutex
	m  map[string]entry
}

// put keeps e if it is newer than what the table holds, and reports it.
func (t *table) put(e entry) bool {
	if e.Key == "" || e.Version == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]entry{}
	}
	if old, ok := t.m[e.Key]; ok && old.Version >= e.Version {
		return false
	}
	t.m[e.Key] = e
	return true
}

func (t *table) get(key string) (entry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	return e, ok
}

// entries returns the entries whose key starts with prefix.
func (t *table) entries(prefix string) []entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []entry
	for k, e := range t.m {
		if strings.HasPrefix(k, prefix) {
			out = append(out, e)
		}
	}
	return out
}

func (t *table) encode() []byte {
	b, _ := json.Marshal(t.entries(""))
	return b
}

// merge puts every entry of an encoded table and returns the ones that were
// newer.
func (t *table) merge(b []byte) ([]entry, error) {
	var in []entry
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	var out []entry
	for _, e := range in {
		if t.put(e) {
			out = append(out, e)
		}
	}
	return out, nil
}
