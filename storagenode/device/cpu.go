package device

import (
	"sync"
	"time"
)

// CPU is a node's emulated processor: Cores slots in front of one FIFO
// queue, each client request holding a slot for the profile's
// RequestService. It is the other half of a node's capacity on a device:
// a GET served from the block cache or memtable costs processor time and
// no device time, a GET that misses the cache costs both, and a write
// costs processor time plus its WAL syncs. Time is virtual as on the
// Device: Book places a request in the processor's future, and the caller
// sleeps until its end, so the wait costs no real CPU and a goroutine that
// wakes late does not delay the schedule.
type CPU struct {
	service time.Duration

	mu        sync.Mutex
	slots     []time.Time // when each core frees
	lastStart time.Time   // FIFO: no request starts before an earlier one
	stats     CPUStats
}

// CPUStats are a processor's figures since it was made.
type CPUStats struct {
	Requests uint64
	// Busy is the processor time the requests took, Wait their time queued
	// before a core took them.
	Busy, Wait time.Duration
}

// NewCPU returns p's processor, or nil if p has none (RequestService 0:
// requests cost no emulated time, only the real CPU they use).
func NewCPU(p Profile) *CPU {
	if p.RequestService <= 0 {
		return nil
	}
	return &CPU{service: p.RequestService, slots: make([]time.Time, max(1, p.Cores))}
}

// Book places one request that arrived at arrival and returns when its
// processing ends. Requests are served in booking order (FIFO), each on
// the core that frees first.
func (c *CPU) Book(arrival time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	slot, start := fifoSlot(c.slots, arrival, c.lastStart)
	c.lastStart = start
	done := start.Add(c.service)
	c.slots[slot] = done
	c.stats.Requests++
	c.stats.Busy += c.service
	c.stats.Wait += start.Sub(arrival)
	return done
}

// Stats returns the processor's figures now.
func (c *CPU) Stats() CPUStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Rate is the most requests/s the processor serves: Cores/RequestService.
func (c *CPU) Rate() float64 { return float64(len(c.slots)) / c.service.Seconds() }
