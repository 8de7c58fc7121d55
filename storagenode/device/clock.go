package device

import (
	"sync"
	"time"
)

// Clock is the device's time: Now to book I/Os, Sleep to wait for them.
type Clock interface {
	Now() time.Time
	Sleep(d time.Duration)
}

// RealClock is the wall clock; Sleep parks the goroutine on a timer.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep implements Clock.
func (RealClock) Sleep(d time.Duration) { time.Sleep(d) }

// FakeClock is a Clock that moves only when told to, for deterministic
// tests: sleepers wake when Advance passes their deadline.
type FakeClock struct {
	mu       sync.Mutex
	changed  *sync.Cond // a sleeper came or left
	now      time.Time
	sleepers []fakeSleeper
}

type fakeSleeper struct {
	until time.Time
	wake  chan struct{}
}

// NewFakeClock returns a fake clock reading start.
func NewFakeClock(start time.Time) *FakeClock {
	c := &FakeClock{now: start}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// Now implements Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep implements Clock: it blocks until the clock reaches now+d.
func (c *FakeClock) Sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	s := fakeSleeper{until: c.now.Add(d), wake: make(chan struct{})}
	c.sleepers = append(c.sleepers, s)
	c.changed.Broadcast()
	c.mu.Unlock()
	<-s.wake
}

// WaitSleepers blocks until at least n goroutines sleep on the clock.
func (c *FakeClock) WaitSleepers(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.sleepers) < n {
		c.changed.Wait()
	}
}

// AdvanceToNext moves the clock to the earliest sleeper's deadline, wakes
// every sleeper due then, and returns the new time; with no sleepers it
// returns false.
func (c *FakeClock) AdvanceToNext() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sleepers) == 0 {
		return time.Time{}, false
	}
	next := c.sleepers[0].until
	for _, s := range c.sleepers {
		if s.until.Before(next) {
			next = s.until
		}
	}
	c.advanceTo(next)
	return next, true
}

// Advance moves the clock d forward and wakes the sleepers due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceTo(c.now.Add(d))
}

func (c *FakeClock) advanceTo(t time.Time) {
	c.now = t
	kept := c.sleepers[:0]
	for _, s := range c.sleepers {
		if s.until.After(t) {
			kept = append(kept, s)
			continue
		}
		close(s.wake)
	}
	c.sleepers = kept
	c.changed.Broadcast()
}
