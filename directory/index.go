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
// power-of-two table at most half full, grown with the keys it holds. A
// 4-byte cell holds the entry's index and, in its other bits, a tag of
// the key, so a miss reads cells and no entry, usually one cache line of
// them, and a table for a thousand keys is 8 KiB. Where a key's probe
// starts, and its tag, come from the key mixed with a seed drawn per
// index (as a Go map's is): keys crafted to share hash bits cannot pile
// up in one run of cells. The caller checks the entry's own hash, as two
// keys may share a tag. Only where entries are found depends on the
// seed, never which entry is found: no decision does.
type keyIndex struct {
	cells     []uint32 // tag<<valueBits | entry index+1; 0: empty
	mask      uint32   // len(cells)-1
	valueBits uint     // entry indexes+1 fit in the low valueBits bits
	n         int
	k0, k1    uint64
	// key returns entry i's key: moving cells (growth, removal) must
	// find where each one's probe starts.
	key func(entry uint32) *wire.KeyHash
}

// minIndexCells is the smallest table.
const minIndexCells = 16

// newKeyIndex returns an empty index whose entries are below entries
// (growing past that as they do), and key their keys.
func newKeyIndex(entries int, key func(entry uint32) *wire.KeyHash) keyIndex {
	return keyIndex{cells: make([]uint32, minIndexCells), mask: minIndexCells - 1,
		valueBits: uint(bits.Len(uint(entries))), k0: rand.Uint64(), k1: rand.Uint64(), key: key}
}

// mix is h mixed with the index's seed: its low bits place h's probe, its
// high bits are the tag.
func (x *keyIndex) mix(h *wire.KeyHash) uint64 {
	hi, lo := bits.Mul64(binary.LittleEndian.Uint64(h[:8])^x.k0, binary.LittleEndian.Uint64(h[8:])^x.k1)
	return hi ^ lo
}

// tagBits is h's tag, in place in a cell.
func (x *keyIndex) tagBits(m uint64) uint32 { return uint32(m>>32) >> x.valueBits << x.valueBits }

// indexProbe walks the cells of one key's probe.
type indexProbe struct {
	x         *keyIndex
	tag, pos  uint32
	valueMask uint32
}

// probe starts the probe for h.
func (x *keyIndex) probe(h *wire.KeyHash) indexProbe {
	m := x.mix(h)
	return indexProbe{x: x, tag: x.tagBits(m), pos: uint32(m) & x.mask, valueMask: 1<<x.valueBits - 1}
}

// firstCell is the cell where h's probe starts.
func (x *keyIndex) firstCell(h *wire.KeyHash) *uint32 { return &x.cells[uint32(x.mix(h))&x.mask] }

// next returns the next entry index whose tag is the key's, and its cell;
// false when the probe reached an empty cell: the key is not indexed.
func (p *indexProbe) next() (entry, cell uint32, ok bool) {
	for {
		c := p.x.cells[p.pos]
		cell, p.pos = p.pos, (p.pos+1)&p.x.mask
		if c == 0 {
			return 0, 0, false
		}
		if c&^p.valueMask == p.tag {
			return c&p.valueMask - 1, cell, true
		}
	}
}

// insert indexes entry under h, which must not be indexed yet.
func (x *keyIndex) insert(h *wire.KeyHash, entry uint32) {
	x.n++
	if 2*x.n > len(x.cells) || uint64(entry)+1 >= 1<<x.valueBits {
		size := len(x.cells)
		for 2*x.n > size {
			size *= 2
		}
		vb := x.valueBits
		for uint64(entry)+1 >= 1<<vb {
			vb++
		}
		x.rebuild(size, vb)
	}
	x.place(x.mix(h), entry)
}

// place puts entry, whose key mixes to m, at the first empty cell of its
// probe.
func (x *keyIndex) place(m uint64, entry uint32) {
	p := uint32(m) & x.mask
	for x.cells[p] != 0 {
		p = (p + 1) & x.mask
	}
	x.cells[p] = x.tagBits(m) | (entry + 1)
}

// rebuild places every entry again in a table of size cells whose
// entry indexes take valueBits bits.
func (x *keyIndex) rebuild(size int, valueBits uint) {
	old, oldMask := x.cells, uint32(1)<<x.valueBits-1
	x.cells, x.mask, x.valueBits = make([]uint32, size), uint32(size-1), valueBits
	for _, c := range old {
		if c != 0 {
			e := c&oldMask - 1
			x.place(x.mix(x.key(e)), e)
		}
	}
}

// remove empties cell i (from next), moving back the cells after it that
// its emptiness would cut off from their probes' starts.
func (x *keyIndex) remove(i uint32) {
	x.n--
	valueMask := uint32(1)<<x.valueBits - 1
	for j := i; ; {
		x.cells[i] = 0
		for {
			j = (j + 1) & x.mask
			c := x.cells[j]
			if c == 0 {
				return
			}
			// c may move to i unless its start lies cyclically in (i, j].
			if start := uint32(x.mix(x.key(c&valueMask-1))) & x.mask; (j-start)&x.mask >= (j-i)&x.mask {
				x.cells[i] = c
				i = j
				break
			}
		}
	}
}
