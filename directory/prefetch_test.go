package directory_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// TestPrefetchChangesNothing: Prefetch is a hint. The same packets through
// two directories, one asked to prefetch every key (of packets and of keys
// never seen) before each, get the same verdicts and rewrites and leave the
// same counters and entries; Prefetch allocates nothing, also with no
// partition bits and for partitions without a chain.
func TestPrefetchChangesNothing(t *testing.T) {
	plain, warmed := fuzzDir(t), fuzzDir(t)
	keys := []string{"apple", "cherry", "kiwi", "plum"}
	for i := range 200 {
		k := keys[i%len(keys)]
		op := []wire.Op{wire.OpGet, wire.OpPut, wire.OpGetReply, wire.OpPutReply, wire.OpVSB}[i/len(keys)%5]
		a, b := pkt(t, op, k, uint64(i)*0x9e3779b97f4a7c15, uint64(i%9), wire.NodeID(3+i%4)), []byte(nil)
		b = append(b, a...)
		warmed.Prefetch(new(key(k)))
		warmed.Prefetch(new(key(fmt.Sprint("never", i))))
		va, vb := plain.Process(a, uint32(i%6), uint64(i)), warmed.Process(b, uint32(i%6), uint64(i))
		if va != vb || !bytes.Equal(a, b) {
			t.Fatalf("packet %d (%v %s): %v and %x, prefetched %v and %x", i, op, k, va, a, vb, b)
		}
	}
	if plain.Counters() != warmed.Counters() {
		t.Errorf("counters %+v, prefetched %+v", plain.Counters(), warmed.Counters())
	}
	for _, k := range keys {
		sa, oka := plain.Lookup(key(k))
		sb, okb := warmed.Lookup(key(k))
		if sa != sb || oka != okb {
			t.Errorf("key %s: %+v, prefetched %+v", k, sa, sb)
		}
	}
	for _, bits := range []uint{0, 4} {
		d := newDir(t, directory.Config{PartitionBits: bits})
		h := key("apple")
		if n := testing.AllocsPerRun(10, func() { d.Prefetch(&h) }); n != 0 {
			t.Errorf("%d partition bits: %.1f allocations per Prefetch", bits, n)
		}
	}
}
