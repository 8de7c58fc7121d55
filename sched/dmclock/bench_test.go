package dmclock

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkAddPull is the per-op cost on a node's admission path: one Pull
// and one Add, with every tenant backlogged (the scan's worst case), a
// mix of reservations and limits, and a server at 1 M ops/s.
func BenchmarkAddPull(b *testing.B) {
	for _, n := range []int{8, 64, 512} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			q, err := New[uint16](Policy{Weight: 1})
			if err != nil {
				b.Fatal(err)
			}
			perTenant := 1e6 / float64(n) // ops/s each would get by weight
			for id := range uint16(n) {
				p := Policy{Weight: float64(1 + id%4)}
				if id%4 == 0 {
					p.Reservation = perTenant / 2
				}
				if id%3 == 0 {
					p.Limit = perTenant
				}
				if err := q.SetPolicy(id, p, 0); err != nil {
					b.Fatal(err)
				}
				for range 8 {
					q.Add(id, 1, 0, 0, id, 0)
				}
			}
			now := time.Duration(0)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				now += time.Microsecond
				id, ph, until := q.Pull(now)
				if ph == None {
					now = until
					id, ph, _ = q.Pull(now)
				}
				q.Add(id, 1, 1, 0, id, now)
			}
		})
	}
}
