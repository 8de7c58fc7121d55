package sched

import (
	"cmp"
	"slices"
	"unsafe"
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
	heap   []*topEntry // the counters, a min-heap by (count, key)
}

// topEntry is a counter. Its key is a string over buf, which an evicted
// entry reuses for the key that takes it over (after leaving the map), so
// that counting allocates nothing once the k counters exist.
type topEntry struct {
	key   string
	buf   []byte
	count uint64
	at    int // index in TopK.heap
}

func (e *topEntry) setKey(key []byte) {
	e.buf = append(e.buf[:0], key...)
	e.key = unsafe.String(unsafe.SliceData(e.buf), len(e.buf))
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

// Add counts one occurrence of key, in O(log k).
func (t *TopK) Add(key []byte) {
	if e, ok := t.counts[string(key)]; ok {
		e.count++
		t.down(e.at)
		return
	}
	if len(t.counts) < t.k {
		e := &topEntry{count: 1, at: len(t.heap)}
		e.setKey(key)
		t.counts[e.key] = e
		t.heap = append(t.heap, e)
		t.up(e.at)
		return
	}
	// The smallest counter, ties to the smallest key, takes key over.
	min := t.heap[0]
	delete(t.counts, min.key)
	min.setKey(key)
	min.count++
	t.counts[min.key] = min
	t.down(0)
}

func (t *TopK) less(i, j int) bool {
	a, b := t.heap[i], t.heap[j]
	return a.count < b.count || (a.count == b.count && a.key < b.key)
}

func (t *TopK) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.heap[i].at, t.heap[j].at = i, j
}

func (t *TopK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *TopK) down(i int) {
	for {
		m := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(t.heap) && t.less(c, m) {
				m = c
			}
		}
		if m == i {
			return
		}
		t.swap(i, m)
		i = m
	}
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
	clear(t.heap)
	t.heap = t.heap[:0]
	return out
}
