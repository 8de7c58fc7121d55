// Package prefetch asks the CPU for a cache line ahead of its use, so
// that a miss known in advance overlaps other work instead of stalling
// the load that needs it (the simulator's event loop, the zipf table).
package prefetch

// Line asks the CPU to bring the cache line at addr in, without waiting
// for it (PREFETCHT0): a hint, so any address will do.
//
//go:noescape
func Line(addr uintptr)

// Pair is Line for the two cache lines from addr: a 128-byte record in
// one call.
//
//go:noescape
func Pair(addr uintptr)
