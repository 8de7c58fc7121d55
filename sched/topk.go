package sched

import (
	"cmp"
	"encoding/binary"
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
	heap   []topItem // the counters, a min-heap by (count, key)
}

// topItem is a counter's place in the heap: its count and key inline, so
// that ordering reads no pointer, and the key's first 16 bytes as two
// big-endian numbers, so that ties of count between keys of up to 16
// bytes (YCSB's are) order without a string comparison.
type topItem struct {
	count uint64
	head  [2]uint64
	key   string
	e     *topEntry
}

// keyHead is key's first 16 bytes, big-endian, zero-padded: a smaller
// head means a smaller key, and equal heads leave the order to the keys.
func keyHead(key string) [2]uint64 {
	var b [16]byte
	copy(b[:], key)
	return [2]uint64{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// topEntry is a counter's key and heap index. Its key is a string over
// buf, which an evicted entry reuses for the key that takes it over (after
// leaving the map), so that counting allocates nothing once the k counters
// exist.
type topEntry struct {
	key string
	buf []byte
	at  int // index in TopK.heap
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
		t.heap[e.at].count++
		t.down(e.at)
		return
	}
	if len(t.counts) < t.k {
		e := &topEntry{at: len(t.heap)}
		e.setKey(key)
		t.counts[e.key] = e
		t.heap = append(t.heap, topItem{count: 1, head: keyHead(e.key), key: e.key, e: e})
		t.up(e.at)
		return
	}
	// The smallest counter, ties to the smallest key, takes key over.
	min := &t.heap[0]
	delete(t.counts, min.key)
	min.e.setKey(key)
	min.key = min.e.key
	min.head = keyHead(min.key)
	min.count++
	t.counts[min.key] = min.e
	t.down(0)
}

// below: a comes before b in the heap, by (count, key).
func (a *topItem) below(b *topItem) bool {
	switch {
	case a.count != b.count:
		return a.count < b.count
	case a.head[0] != b.head[0]:
		return a.head[0] < b.head[0]
	case a.head[1] != b.head[1]:
		return a.head[1] < b.head[1]
	}
	return a.key < b.key
}

// up and down move the item at i to its place, shifting the others into
// the hole it leaves.
func (t *TopK) up(i int) {
	x := t.heap[i]
	for i > 0 {
		p := (i - 1) / 2
		if !x.below(&t.heap[p]) {
			break
		}
		t.place(i, t.heap[p])
		i = p
	}
	t.place(i, x)
}

func (t *TopK) down(i int) {
	x := t.heap[i]
	n := len(t.heap)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && t.heap[c+1].below(&t.heap[c]) {
			c++
		}
		if !t.heap[c].below(&x) {
			break
		}
		t.place(i, t.heap[c])
		i = c
	}
	t.place(i, x)
}

func (t *TopK) place(i int, x topItem) {
	t.heap[i] = x
	x.e.at = i
}

// Top returns up to n keys, most frequent first, and starts a new round.
func (t *TopK) Top(n int) []KeyCount {
	es := slices.Clone(t.heap)
	slices.SortFunc(es, func(a, b topItem) int {
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
