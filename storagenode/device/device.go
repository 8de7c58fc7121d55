package device

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Class is what an I/O is for.
type Class uint8

// The I/O classes.
const (
	Read       Class = iota // block reads that missed the block cache
	WAL                     // WAL writes and syncs, and Pebble's metadata (MANIFEST, OPTIONS, directories)
	Flush                   // memtable flush outputs
	Compaction              // compaction inputs and outputs
	NumClasses
)

var classNames = [NumClasses]string{"read", "wal", "flush", "compaction"}

func (c Class) String() string { return classNames[c] }

// Request is one I/O as it reaches the device.
type Request struct {
	Class Class
	Write bool  // a write or a sync (pays WriteService and WriteBandwidth)
	Bytes int64 // 0 for a sync
	// Stream and Offset place the I/O: an I/O of the stream that the
	// device's previous streamed I/O belonged to, starting where that one
	// ended, is sequential and pays no service time (the head, or the
	// SSD's open block, is already there). Stream 0 is no stream: it always
	// pays, and leaves the device's position alone (syncs).
	Stream uint64
	Offset int64

	fs *FS // also counted in this FS's stats
}

// Booking is where the device put one I/O in time.
type Booking struct {
	Start time.Time     // it took a slot
	Done  time.Time     // its transfer ended
	Cost  time.Duration // its own device time: service plus transfer
}

// Device is one node's emulated storage device: a FIFO queue in front of
// QueueDepth slots and one bandwidth channel. Time is virtual: an I/O books
// its slot and its transfer when it arrives, and its caller sleeps until
// the booking's end, so waiting costs no CPU. See the package doc.
type Device struct {
	p     Profile
	clock Clock
	born  time.Time

	mu        sync.Mutex
	slots     []time.Time // when each slot frees
	lastStart time.Time   // FIFO: no I/O starts before one that arrived earlier
	transfers []span      // booked transfers on the channel, by start; ended ones dropped
	posStream uint64      // where the last streamed I/O left the device
	posEnd    int64
	stats     [NumClasses]ClassStats

	pages *pageCache  // what the node just wrote; nil: none
	free  atomic.Bool // SetFree: I/Os are counted and cost no time

	streams atomic.Uint64
}

type span struct{ from, to time.Time }

// New makes a device with profile p on clock c (nil: the real clock).
func New(p Profile, c Clock) *Device {
	if c == nil {
		c = RealClock{}
	}
	if p.QueueDepth < 1 {
		p.QueueDepth = 1
	}
	if p.ChunkBytes <= 0 {
		p.ChunkBytes = defaultChunk
	}
	return &Device{p: p, clock: c, born: c.Now(), slots: make([]time.Time, p.QueueDepth), pages: newPageCache(p.PageCacheBytes)}
}

// Profile is the device's profile.
func (d *Device) Profile() Profile { return d.p }

// NewStream returns a stream id for Request.Stream, never 0.
func (d *Device) NewStream() uint64 { return d.streams.Add(1) }

// Do serves r, chunk by chunk, and returns when the last chunk is done.
// Each chunk arrives when the previous one is done, so an I/O that arrives
// meanwhile is served between two chunks, as on a disk.
func (d *Device) Do(r Request) {
	for {
		chunk := r
		chunk.Bytes = min(r.Bytes, d.p.ChunkBytes)
		now := d.clock.Now()
		b := d.Book(now, chunk)
		if wait := b.Done.Sub(now); wait > 0 {
			d.clock.Sleep(wait)
		}
		r.Bytes -= chunk.Bytes
		r.Offset += chunk.Bytes
		if r.Bytes <= 0 {
			return
		}
	}
}

// Book places one I/O of at most ChunkBytes that arrives at now and counts
// it in the stats; it does not wait. Callers race between reading the
// clock and booking, so arrivals may come a little out of order: FIFO is
// booking order, and a late booking still starts no earlier than the
// previous one. Do is Book and a sleep, chunk by chunk.
func (d *Device) Book(now time.Time, r Request) Booking {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.free.Load() {
		d.stats[r.Class].add(r.Bytes, 0, 0)
		if r.fs != nil {
			r.fs.stats[r.Class].add(r.Bytes, 0, 0)
		}
		return Booking{Start: now, Done: now}
	}

	slot, start := fifoSlot(d.slots, now, d.lastStart)
	d.lastStart = start

	service, bandwidth := d.p.ReadService, d.p.ReadBandwidth
	if r.Write {
		service, bandwidth = d.p.WriteService, d.p.WriteBandwidth
	}
	if r.Stream != 0 {
		if r.Stream == d.posStream && r.Offset == d.posEnd {
			service = 0
		}
		d.posStream, d.posEnd = r.Stream, r.Offset+r.Bytes
	}
	var transfer time.Duration
	if bandwidth > 0 && r.Bytes > 0 {
		transfer = time.Duration(float64(r.Bytes) / bandwidth * float64(time.Second))
	}
	done := start.Add(service)
	if transfer > 0 {
		done = d.bookTransfer(now, done, transfer)
	}
	d.slots[slot] = done

	cost := service + transfer
	d.stats[r.Class].add(r.Bytes, cost, done.Sub(now)-cost)
	if r.fs != nil {
		r.fs.stats[r.Class].add(r.Bytes, cost, done.Sub(now)-cost)
	}
	return Booking{Start: start, Done: done, Cost: cost}
}

// pageHit counts a read of class c that the page cache served whole: it
// took no device time.
func (d *Device) pageHit(c Class, fs *FS, bytes int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats[c].hit(bytes)
	if fs != nil {
		fs.stats[c].hit(bytes)
	}
}

// SetFree turns the device's time off (true) or back on. While off, I/Os
// are counted but cost no time and take no slot: for setup that is not
// measured, such as a bench's preload, as if the data had been written
// long before: what is written meanwhile does not enter the page cache.
// I/Os booked before keep their bookings.
func (d *Device) SetFree(free bool) { d.free.Store(free) }

// bookTransfer puts a transfer of length n in the channel's first gap at
// or after ready, and returns its end. Transfers never overlap, so the
// device never moves bytes faster than its bandwidth.
func (d *Device) bookTransfer(now, ready time.Time, n time.Duration) time.Time {
	d.transfers = slices.DeleteFunc(d.transfers, func(s span) bool { return !s.to.After(now) })
	from, at := ready, len(d.transfers)
	for i, s := range d.transfers {
		if !s.to.After(from) {
			continue
		}
		if !s.from.Before(from.Add(n)) {
			at = i
			break
		}
		from = s.to
	}
	d.transfers = slices.Insert(d.transfers, at, span{from, from.Add(n)})
	return from.Add(n)
}

// fifoSlot picks the slot that frees first for an arrival at now, and when
// it starts there: not before the slot frees, nor before lastStart (FIFO).
func fifoSlot(slots []time.Time, now, lastStart time.Time) (int, time.Time) {
	slot := 0
	for i, free := range slots {
		if free.Before(slots[slot]) {
			slot = i
		}
	}
	return slot, latest(now, slots[slot], lastStart)
}

func latest(t time.Time, ts ...time.Time) time.Time {
	for _, u := range ts {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// ClassStats are one class's figures since the device was made.
type ClassStats struct {
	IOs   uint64
	Bytes uint64
	// Busy is the device time the class's I/Os took: service plus transfer.
	Busy time.Duration
	// Wait is the time they spent queued: from arrival to completion, less
	// Busy.
	Wait time.Duration
	// PageHits are reads the page cache served whole (Profile.PageCacheBytes):
	// not I/Os, no device time; PageHitBytes their bytes.
	PageHits, PageHitBytes uint64
}

func (s *ClassStats) add(bytes int64, busy, wait time.Duration) {
	s.IOs++
	s.Bytes += uint64(bytes)
	s.Busy += busy
	s.Wait += wait
}

func (s *ClassStats) hit(bytes int64) {
	s.PageHits++
	s.PageHitBytes += uint64(bytes)
}

// Stats is a snapshot of a device's figures. I/Os count when they are
// booked, so Busy may run up to one booking ahead of Elapsed.
type Stats struct {
	Elapsed    time.Duration // since the device was made
	QueueDepth int
	Class      [NumClasses]ClassStats
}

// Stats returns the device's figures now.
func (d *Device) Stats() Stats { return d.snapshot(&d.stats) }

func (d *Device) snapshot(classes *[NumClasses]ClassStats) Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Stats{Elapsed: d.clock.Now().Sub(d.born), QueueDepth: d.p.QueueDepth, Class: *classes}
}

// Sub returns the figures of the interval from prev to s.
func (s Stats) Sub(prev Stats) Stats {
	out := Stats{Elapsed: s.Elapsed - prev.Elapsed, QueueDepth: s.QueueDepth}
	for c := range out.Class {
		a, b := s.Class[c], prev.Class[c]
		out.Class[c] = ClassStats{IOs: a.IOs - b.IOs, Bytes: a.Bytes - b.Bytes, Busy: a.Busy - b.Busy, Wait: a.Wait - b.Wait,
			PageHits: a.PageHits - b.PageHits, PageHitBytes: a.PageHitBytes - b.PageHitBytes}
	}
	return out
}

// Utilisation is the share of the device's service capacity (QueueDepth
// slots over Elapsed) that class c's device time took. A transfer-bound
// mix on a device with QueueDepth > 1 saturates at less than 1.
func (s Stats) Utilisation(c Class) float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Class[c].Busy) / (float64(s.Elapsed) * float64(s.QueueDepth))
}

// Share is class c's part of all the device time spent: what paced
// compaction's share is compared with read share.
func (s Stats) Share(c Class) float64 {
	var all time.Duration
	for _, cs := range s.Class {
		all += cs.Busy
	}
	if all <= 0 {
		return 0
	}
	return float64(s.Class[c].Busy) / float64(all)
}

// MeanWait is class c's mean queue wait per I/O.
func (s Stats) MeanWait(c Class) time.Duration {
	if s.Class[c].IOs == 0 {
		return 0
	}
	return s.Class[c].Wait / time.Duration(s.Class[c].IOs)
}
