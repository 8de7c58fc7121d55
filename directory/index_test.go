package directory

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/netdir/netdir/wire"
)

// indexFind is find over a keyIndex whose entries' keys are keys.
func indexFind(x *keyIndex, keys []wire.KeyHash, h wire.KeyHash) (entry, cell uint32, ok bool) {
	for p := x.probe(&h); ; {
		if entry, cell, ok = p.next(); !ok || keys[entry] == h {
			return entry, cell, ok
		}
	}
}

// TestKeyIndexAgainstMap runs random inserts and removals on a key index
// that starts small (so it grows, and its runs of cells wrap) and on a Go
// map, and checks after each that every key the map has is found at its
// entry and every other key is not. Half the keys share all but one bit,
// as crafted keys might.
func TestKeyIndexAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]wire.KeyHash, 400)
	for i := range keys {
		if i%2 == 0 {
			keys[i] = wire.HashKey([]byte{byte(i), byte(i >> 8)})
		} else {
			keys[i][15] = byte(i >> 1)
			keys[i][0] = byte(i >> 9)
		}
	}
	for _, seeded := range []bool{true, false} {
		x := newKeyIndex(0, func(i uint32) *wire.KeyHash { return &keys[i] })
		if !seeded { // every key in as few runs as its tags allow
			x.k0, x.k1 = 0, 0
		}
		want := map[wire.KeyHash]uint32{}
		for step := 0; step < 20000; step++ {
			k := rng.IntN(len(keys))
			h := keys[k]
			_, cell, ok := indexFind(&x, keys, h)
			if _, in := want[h]; in != ok {
				t.Fatalf("step %d: key %d found %v, in map %v", step, k, ok, in)
			}
			if ok {
				x.remove(cell)
				delete(want, h)
			} else {
				x.insert(&h, uint32(k))
				want[h] = uint32(k)
			}
			if x.n != len(want) || 2*x.n > len(x.cells) {
				t.Fatalf("step %d: %d keys in %d cells, map has %d", step, x.n, len(x.cells), len(want))
			}
			if step%97 != 0 {
				continue
			}
			for i, h := range keys {
				e, _, ok := indexFind(&x, keys, h)
				if w, in := want[h]; in != ok || (ok && e != w) {
					t.Fatalf("step %d: key %d at %d (%v), map %d (%v)", step, i, e, ok, w, in)
				}
			}
		}
	}
}

// TestDirectoryIndexAgainstMap inserts, evicts and looks up random keys in
// a small directory and a spine and checks them against Go maps.
func TestDirectoryIndexAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	d, err := New(Config{PartitionBits: 2, Slots: 50})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := NewSpine(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	dirKeys, spineKeys := map[wire.KeyHash]uint32{}, map[wire.KeyHash]int{}
	for step := 0; step < 20000; step++ {
		k := rng.IntN(120)
		h := wire.HashKey([]byte{byte(k)})
		if _, in := dirKeys[h]; in {
			if err := d.Evict(h); err != nil {
				t.Fatalf("step %d: evict: %v", step, err)
			}
			delete(dirKeys, h)
		} else {
			i, err := d.Insert(h, []wire.NodeID{wire.NodeID(k)}, 1, 0, nil)
			switch {
			case err == ErrFull && len(dirKeys) == 50:
			case err != nil:
				t.Fatalf("step %d: insert: %v", step, err)
			default:
				dirKeys[h] = i
			}
		}
		if _, in := spineKeys[h]; in {
			if err := sp.Evict(h); err != nil {
				t.Fatalf("step %d: spine evict: %v", step, err)
			}
			delete(spineKeys, h)
		} else {
			if err := sp.Insert(h, []int{sp.Home(h)}, uint64(k)); err != nil {
				t.Fatalf("step %d: spine insert: %v", step, err)
			}
			spineKeys[h] = k
		}
		if d.Len() != len(dirKeys) || sp.Len() != len(spineKeys) {
			t.Fatalf("step %d: lengths %d %d, want %d %d", step, d.Len(), sp.Len(), len(dirKeys), len(spineKeys))
		}
		for j := 0; j < 120; j++ {
			h := wire.HashKey([]byte{byte(j)})
			s, ok := d.Lookup(h)
			if _, in := dirKeys[h]; in != ok || (ok && (s.Hash != h || s.Locs[0] != wire.NodeID(j))) {
				t.Fatalf("step %d: key %d: lookup %v %+v, in map %v", step, j, ok, s, in)
			}
			e, ok := sp.Lookup(h)
			if v, in := spineKeys[h]; in != ok || (ok && e.VerDone != uint64(v)) {
				t.Fatalf("step %d: key %d: spine lookup %v %+v, in map %v", step, j, ok, e, in)
			}
		}
	}
}

// TestCacheLines holds a partition to one cache line and a slot's parts to
// theirs: the hash and what every request reads in the first, the
// LocationList the second, the versions the third.
func TestCacheLines(t *testing.T) {
	var s Slot
	if n := unsafe.Sizeof(Partition{}); n != cacheLine {
		t.Errorf("partition: %d bytes, want %d", n, cacheLine)
	}
	for _, f := range []struct {
		name            string
		off, size, line uintptr
	}{
		{"Hash", unsafe.Offsetof(s.Hash), unsafe.Sizeof(s.Hash), 0},
		{"Buckets", unsafe.Offsetof(s.Buckets), unsafe.Sizeof(s.Buckets), 0},
		{"Fresh", unsafe.Offsetof(s.Fresh), unsafe.Sizeof(s.Fresh), 0},
		{"N", unsafe.Offsetof(s.N), 1, 0},
		{"R", unsafe.Offsetof(s.R), 1, 0},
		{"Hits", unsafe.Offsetof(s.Hits), unsafe.Sizeof(s.Hits), 0},
		{"Locs", unsafe.Offsetof(s.Locs), unsafe.Sizeof(s.Locs), 1},
		{"VerNext", unsafe.Offsetof(s.VerNext), unsafe.Sizeof(s.VerNext), 2},
		{"VerDone", unsafe.Offsetof(s.VerDone), unsafe.Sizeof(s.VerDone), 2},
	} {
		if f.off/cacheLine != f.line || (f.off+f.size-1)/cacheLine != f.line {
			t.Errorf("slot field %s at bytes %d..%d, want in line %d", f.name, f.off, f.off+f.size-1, f.line)
		}
	}
	if n := unsafe.Sizeof(s); n%cacheLine != 0 {
		t.Errorf("slot: %d bytes, not whole cache lines", n)
	}
}
