package directory

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"

	"github.com/netdir/netdir/wire"
)

// keyIndex maps key hashes to the indexes of the entries that hold them
// (a directory's slots, a spine's entries), as a Go map did, with fewer
// cache lines per lookup: open addressing with linear probing over a
// power-of-two table at most half full. A cell holds a 32-bit tag of the
// key and the entry's index, so a miss reads the table's cells and no
// entry, usually one cache line of them. The tag is the key mixed with a
// seed drawn per index (as a Go map's is): keys crafted to share hash
// bits cannot pile up in one run of cells, since where a key lands
// depends on the seed. The caller checks the entry's own hash: two keys
// may share a tag. Only where entries are found depends on the seed,
// never which entry is found: no decision does.
type keyIndex struct {
	cells  []uint64 // tag<<32 | entry index+1; 0: empty
	mask   uint32   // len(cells)-1
	n      int
	k0, k1 uint64
}

// minIndexCells is the smallest table.
const minIndexCells = 8

// newKeyIndex returns an index with room for n keys before it grows.
func newKeyIndex(n int) keyIndex {
	size := minIndexCells
	for size < 2*n {
		size *= 2
	}
	return keyIndex{cells: make([]uint64, size), mask: uint32(size - 1), k0: rand.Uint64(), k1: rand.Uint64()}
}

// tag is h's tag; tag&mask is the cell its probe starts at.
func (x *keyIndex) tag(h *wire.KeyHash) uint32 {
	hi, lo := bits.Mul64(binary.LittleEndian.Uint64(h[:8])^x.k0, binary.LittleEndian.Uint64(h[8:])^x.k1)
	return uint32((hi ^ lo) >> 32)
}

// indexProbe walks the cells of one key's probe.
type indexProbe struct {
	x        *keyIndex
	tag, pos uint32
}

// probe starts the probe for h.
func (x *keyIndex) probe(h *wire.KeyHash) indexProbe {
	t := x.tag(h)
	return indexProbe{x: x, tag: t, pos: t & x.mask}
}

// next returns the next entry index whose tag is the key's, and its cell;
// false when the probe reached an empty cell: the key is not indexed.
func (p *indexProbe) next() (entry, cell uint32, ok bool) {
	for {
		c := p.x.cells[p.pos]
		cell, p.pos = p.pos, (p.pos+1)&p.x.mask
		if c == 0 {
			return 0, 0, false
		}
		if uint32(c>>32) == p.tag {
			return uint32(c) - 1, cell, true
		}
	}
}

// insert indexes entry under h, which must not be indexed yet.
func (x *keyIndex) insert(h *wire.KeyHash, entry uint32) {
	if 2*(x.n+1) > len(x.cells) {
		x.grow()
	}
	x.place(uint64(x.tag(h))<<32 | uint64(entry) + 1)
	x.n++
}

// place puts cell c at the first empty cell of its probe.
func (x *keyIndex) place(c uint64) {
	p := uint32(c>>32) & x.mask
	for x.cells[p] != 0 {
		p = (p + 1) & x.mask
	}
	x.cells[p] = c
}

// grow doubles the table: a cell's tag is all that places it.
func (x *keyIndex) grow() {
	old := x.cells
	x.cells = make([]uint64, 2*len(old))
	x.mask = uint32(len(x.cells) - 1)
	for _, c := range old {
		if c != 0 {
			x.place(c)
		}
	}
}

// remove empties cell i (from next), moving back the cells after it that
// its emptiness would cut off from their probes' starts.
func (x *keyIndex) remove(i uint32) {
	x.n--
	for j := i; ; {
		x.cells[i] = 0
		for {
			j = (j + 1) & x.mask
			c := x.cells[j]
			if c == 0 {
				return
			}
			// c may move to i unless its start lies cyclically in (i, j].
			if start := uint32(c>>32) & x.mask; (j-start)&x.mask >= (j-i)&x.mask {
				x.cells[i] = c
				i = j
				break
			}
		}
	}
}
