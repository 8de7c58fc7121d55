//go:build !amd64

package sim

// prefetch is a no-op where no prefetch instruction is wired.
func prefetch(uintptr) {}
