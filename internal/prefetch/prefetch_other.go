//go:build !amd64

// Package prefetch asks the CPU for a cache line ahead of its use, so
// that a miss known in advance overlaps other work instead of stalling
// the load that needs it (the simulator's event loop, the zipf table).
package prefetch

// Line is a no-op where no prefetch instruction is wired.
func Line(uintptr) {}

// Pair is a no-op where no prefetch instruction is wired.
func Pair(uintptr) {}
