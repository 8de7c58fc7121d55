package sim

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkEvents: take the earliest event and schedule one at a random
// one of six lanes' delays or, one time in 16, in the heap, 16k events
// queued: the event loop's queue work without the simulation.
func BenchmarkEvents(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	delays := []uint64{500, 1000, 1500, 2000, 100000, 2500}
	q := newEvents()
	for i := range 16384 {
		q.after(0, delays[i%len(delays)], event{a: int32(i)})
	}
	picks := make([]uint64, 4096)
	for i := range picks {
		picks[i] = delays[rng.IntN(len(delays))]
	}
	for i := 0; b.Loop(); i++ {
		src, _, _ := q.earliest()
		e := q.take(src)
		if d := picks[i&4095]; i%16 == 0 {
			q.rarely(e.t, d+7, e)
		} else {
			q.after(e.t, d, e)
		}
	}
}
