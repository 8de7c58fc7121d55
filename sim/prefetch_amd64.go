package sim

// prefetch asks the CPU to bring the cache line at addr in, without
// waiting for it (PREFETCHT0): a hint, so any address will do.
//
//go:noescape
func prefetch(addr uintptr)
