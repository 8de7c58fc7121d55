package sched

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
)

// TopK counts the most frequent keys of a stream in bounded memory with the
// Space-Saving algorithm (Metwally et al.): k counters; a key not counted
// takes over the smallest counter and inherits its count. Any key with more
// than N/k occurrences is among the counters, and a count overestimates a
// key by at most the count it inherited. Storage nodes use it to name their
// hot keys to the controller, which sees only hashes in the data plane.
//
// The simulator keeps one per node, a thousand of them, each cold in cache
// when next used, and most keys it counts are new to the counters: so a
// key is found through a small open-addressing index of its hash (one
// cache line, where a Go map of strings reads the key's bytes too), keys
// of up to 16 bytes live inline in the heap, and a key taking a counter
// over moves one index entry, with no allocation.
type TopK struct {
	k     int
	seed  maphash.Seed
	index []topCell    // linear probing; its length a power of two, at least 2k
	heap  []topItem    // the counters, a min-heap by (count, key)
	ctrs  []topCounter // by counter id
	long  [][]byte     // by counter id: its key if longer than 16 bytes (the buffer is reused)
}

// topCell is an index entry: a key's hash and its counter's id + 1 (0: an
// empty cell).
type topCell struct {
	hash uint32
	ctr  uint32
}

// topItem is a counter's place in the heap: its count, its key's first 16
// bytes as two big-endian numbers (zero-padded) and its key's length, so
// that ordering and matching keys of up to 16 bytes (YCSB's are) read
// nothing else.
type topItem struct {
	count uint64
	head  [2]uint64
	n     uint32 // key length
	id    uint32 // its counter
}

// topCounter is where counter id is: its heap index and its index cell.
type topCounter struct{ at, cell int32 }

// headLen is the key bytes a topItem holds inline.
const headLen = 16

// keyHead is key's first 16 bytes, big-endian, zero-padded: a smaller
// head means a smaller key, and equal heads leave the order to the keys.
func keyHead(key []byte) [2]uint64 {
	var b [headLen]byte
	copy(b[:], key)
	return [2]uint64{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// KeyCount is a key and its (over)estimated count.
type KeyCount struct {
	Key   []byte
	Count uint64
}

// NewTopK keeps k counters.
func NewTopK(k int) *TopK {
	k = max(k, 1)
	return &TopK{k: k, seed: maphash.MakeSeed(), index: make([]topCell, 1<<bits.Len(uint(2*k-1)))}
}

// Add counts one occurrence of key, in O(log k).
func (t *TopK) Add(key []byte) {
	hash := uint32(maphash.Bytes(t.seed, key))
	head := keyHead(key)
	mask := len(t.index) - 1
	c := int(hash) & mask
	for ; t.index[c].ctr != 0; c = (c + 1) & mask {
		if x := t.index[c]; x.hash == hash {
			at := t.ctrs[x.ctr-1].at
			if it := &t.heap[at]; it.n == uint32(len(key)) && it.head == head && (len(key) <= headLen || bytes.Equal(t.long[it.id], key)) {
				counted := *it
				counted.count++
				t.down(int(at), counted)
				return
			}
		}
	}
	if len(t.heap) < t.k {
		id := uint32(len(t.heap))
		t.ctrs = append(t.ctrs, topCounter{at: int32(id), cell: int32(c)})
		if int(id) == len(t.long) {
			t.long = append(t.long, nil)
		}
		t.index[c] = topCell{hash: hash, ctr: id + 1}
		t.heap = append(t.heap, topItem{count: 1, head: head, n: uint32(len(key)), id: id})
		t.setLong(id, key)
		t.up(int(id))
		return
	}
	// The smallest counter, ties to the smallest key, takes key over. Its
	// old key leaves the index first, which may free a cell on key's way.
	min := t.heap[0]
	t.unindex(int(t.ctrs[min.id].cell))
	c = int(hash) & mask
	for t.index[c].ctr != 0 {
		c = (c + 1) & mask
	}
	t.index[c] = topCell{hash: hash, ctr: min.id + 1}
	t.ctrs[min.id].cell = int32(c)
	t.setLong(min.id, key)
	t.down(0, topItem{count: min.count + 1, head: head, n: uint32(len(key)), id: min.id})
}

func (t *TopK) setLong(id uint32, key []byte) {
	if len(key) > headLen {
		t.long[id] = append(t.long[id][:0], key...)
	}
}

// unindex empties cell c, moving back the entries after it that may take
// it (backward-shift deletion), so that no lookup stops short of its key.
func (t *TopK) unindex(c int) {
	mask := len(t.index) - 1
	for {
		t.index[c] = topCell{}
		j := c
		for {
			j = (j + 1) & mask
			x := t.index[j]
			if x.ctr == 0 {
				return
			}
			// x may fill c if c is on its way from its home to j.
			if home := int(x.hash) & mask; (j-home)&mask >= (j-c)&mask {
				t.index[c] = x
				t.ctrs[x.ctr-1].cell = int32(c)
				c = j
				break
			}
		}
	}
}

// below: a comes before b in the heap, by (count, key).
func (t *TopK) below(a, b *topItem) bool {
	if below, tie := a.belowHead(b); tie {
		return t.compareKeys(a, b) < 0
	} else {
		return below
	}
}

// belowHead: a comes before b by (count, head), or they tie. It compares
// (count, head) as one 192-bit number, without a branch: a sift compares
// tied counts and random heads, on which branches mispredict.
func (a *topItem) belowHead(b *topItem) (below, tie bool) {
	_, borrow := bits.Sub64(a.head[1], b.head[1], 0)
	_, borrow = bits.Sub64(a.head[0], b.head[0], borrow)
	_, borrow = bits.Sub64(a.count, b.count, borrow)
	return borrow != 0, (a.count^b.count)|(a.head[0]^b.head[0])|(a.head[1]^b.head[1]) == 0
}

// compareKeys orders a's key and b's. Equal heads make the shorter key,
// if one has at most 16 bytes, a prefix of the other (the rest of the
// longer key's head is zeros).
func (t *TopK) compareKeys(a, b *topItem) int {
	switch {
	case a.head[0] != b.head[0]:
		return cmp.Compare(a.head[0], b.head[0])
	case a.head[1] != b.head[1]:
		return cmp.Compare(a.head[1], b.head[1])
	case a.n <= headLen || b.n <= headLen:
		return cmp.Compare(a.n, b.n)
	}
	return bytes.Compare(t.long[a.id], t.long[b.id])
}

// appendKey appends the counter's key to dst.
func (t *TopK) appendKey(dst []byte, it *topItem) []byte {
	if it.n > headLen {
		return append(dst, t.long[it.id]...)
	}
	var b [headLen]byte
	binary.BigEndian.PutUint64(b[:8], it.head[0])
	binary.BigEndian.PutUint64(b[8:], it.head[1])
	return append(dst, b[:it.n]...)
}

// topArity is the heap's children per item: four halve its depth, and
// an item's children share two cache lines.
const topArity = 4

// up moves the item at i to its place, and down puts x, the item at i
// changed, in its place (x in registers: no wide load of the fields just
// stored), shifting the others into the hole it leaves.
func (t *TopK) up(i int) {
	x := t.heap[i]
	for i > 0 {
		p := (i - 1) / topArity
		if !t.below(&x, &t.heap[p]) {
			break
		}
		t.place(i, t.heap[p])
		i = p
	}
	t.place(i, x)
}

func (t *TopK) down(i int, x topItem) {
	n := len(t.heap)
	for {
		c := topArity*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < min(c+topArity, n); j++ {
			// t.below, inlined (it is over the inliner's budget)
			below, tie := t.heap[j].belowHead(&t.heap[m])
			if tie {
				below = t.compareKeys(&t.heap[j], &t.heap[m]) < 0
			}
			if below {
				m = j
			}
		}
		if !t.below(&t.heap[m], &x) {
			break
		}
		t.place(i, t.heap[m])
		i = m
	}
	t.place(i, x)
}

func (t *TopK) place(i int, x topItem) {
	t.heap[i] = x
	t.ctrs[x.id].at = int32(i)
}

// Top returns up to n keys, most frequent first, and starts a new round.
// The counters are sorted in place, as the round resets them.
func (t *TopK) Top(n int) []KeyCount {
	slices.SortFunc(t.heap, func(a, b topItem) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return t.compareKeys(&a, &b)
	})
	return t.take(n)
}

// All returns every counter, in no particular order, and starts a new
// round: Top(k) without its sort, for a caller that uses the counts as a
// set (the simulator's controller merges a rack's reports by key).
func (t *TopK) All() []KeyCount { return t.take(len(t.heap)) }

// take returns the first n counters, their keys sharing one allocation
// (each capped at its end), and resets the counters.
func (t *TopK) take(n int) []KeyCount {
	es := t.heap[:min(n, len(t.heap))]
	size := 0
	for i := range es {
		size += int(es[i].n)
	}
	keys := make([]byte, 0, size)
	out := make([]KeyCount, 0, len(es))
	for i := range es {
		at := len(keys)
		keys = t.appendKey(keys, &es[i])
		out = append(out, KeyCount{Key: keys[at:len(keys):len(keys)], Count: es[i].count})
	}
	clear(t.index)
	t.heap = t.heap[:0]
	t.ctrs = t.ctrs[:0]
	return out
}
