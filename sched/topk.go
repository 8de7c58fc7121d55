package sched

import (
	"cmp"
	"slices"
)

// TopK counts the most frequent keys of a stream in bounded memory with the
// Space-Saving algorithm (Metwally et al.): k counters; a key not counted
// takes over the smallest counter and inherits its count. Any key with more
// than N/k occurrences is among the counters, and a count overestimates a
// key by at most the count it inherited. Storage nodes use it to name their
// hot keys to the controller, which sees only hashes in the data plane.
type TopK struct {
	k      int
	counts map[string]*topEntry
}

type topEntry struct {
	key   string
	count uint64
}

// KeyCount is a key and its (over)estimated count.
type KeyCount struct {
	Key   []byte
	Count uint64
}

// NewTopK keeps k counters.
func NewTopK(k int) *TopK {
	return &TopK{k: max(k, 1), counts: make(map[string]*topEntry, k)}
}

// Add counts one occurrence of key.
func (t *TopK) Add(key []byte) {
	if e, ok := t.counts[string(key)]; ok {
		e.count++
		return
	}
	if len(t.counts) < t.k {
		s := string(key)
		t.counts[s] = &topEntry{key: s, count: 1}
		return
	}
	var min *topEntry
	for _, e := range t.counts {
		if min == nil || e.count < min.count || (e.count == min.count && e.key < min.key) {
			min = e
		}
	}
	delete(t.counts, min.key)
	min.key = string(key)
	min.count++
	t.counts[min.key] = min
}

// Top returns up to n keys, most frequent first, and starts a new round.
func (t *TopK) Top(n int) []KeyCount {
	es := make([]*topEntry, 0, len(t.counts))
	for _, e := range t.counts {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *topEntry) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	out := make([]KeyCount, 0, min(n, len(es)))
	for _, e := range es[:min(n, len(es))] {
		out = append(out, KeyCount{Key: []byte(e.key), Count: e.count})
	}
	clear(t.counts)
	return out
}
