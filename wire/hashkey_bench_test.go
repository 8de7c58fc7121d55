package wire

import "testing"

// BenchmarkHashKey is the data planes' and the simulator's per-key hash: a
// SHAKE128 permutation, no heap allocation.
func BenchmarkHashKey(b *testing.B) {
	key := []byte("user6284781860667377211")
	b.ReportAllocs()
	for b.Loop() {
		_ = HashKey(key)
	}
}
