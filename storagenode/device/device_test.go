package device

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustParse(t testing.TB, name string) Profile {
	t.Helper()
	p, err := Parse(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func transferTime(bytes int64, bandwidth float64) time.Duration {
	if bandwidth <= 0 || bytes <= 0 {
		return 0
	}
	return time.Duration(float64(bytes) / bandwidth * float64(time.Second))
}

func TestParse(t *testing.T) {
	for _, name := range []string{"ssd", "hdd"} {
		p := mustParse(t, name)
		// the figure the profiles are scaled to: 100-300 random reads/s
		reads := float64(p.QueueDepth) / (p.ReadService + transferTime(4<<10, p.ReadBandwidth)).Seconds()
		if reads < 200 || reads > 300 {
			t.Errorf("%s serves %.0f random 4 KiB reads/s, want 200-300", name, reads)
		}
		// the budget keeps its real ratio to the write bandwidth
		real := map[string]realDevice{"ssd": p4500, "hdd": hdd7200}[name]
		if got, want := float64(p.CompactionBudget)/p.WriteBandwidth, RealCompactionBudget/real.writeBandwidth; math.Abs(got/want-1) > 0.001 {
			t.Errorf("%s budget/bandwidth %.4f, want %.4f", name, got, want)
		}
	}
	if p := mustParse(t, "none"); p.ReadService != 0 || p.ReadBandwidth != 0 || p.CompactionBudget != RealCompactionBudget {
		t.Errorf("none = %+v, want a free device and the real budget", p)
	}
	if _, err := Parse("nvme"); err == nil || !strings.Contains(err.Error(), "ssd, hdd or none") {
		t.Errorf("Parse(nvme) = %v, want an error naming the choices", err)
	}
}

// TestNeverFasterThanBounds books random mixes and checks every booking
// against what the profile allows: no I/O done before its arrival plus its
// own device time, FIFO starts, at most QueueDepth I/Os in service at once,
// transfers that never overlap (so never more than the bandwidth), and
// busy time equal to the sum of the costs.
func TestNeverFasterThanBounds(t *testing.T) {
	profiles := []Profile{
		mustParse(t, "ssd"), mustParse(t, "hdd"),
		{Name: "qd3", ReadService: 3 * time.Millisecond, WriteService: time.Millisecond,
			ReadBandwidth: 50e6, WriteBandwidth: 20e6, QueueDepth: 3, ChunkBytes: 256 << 10},
	}
	for _, p := range profiles {
		t.Run(p.Name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			d := New(p, NewFakeClock(t0))
			type io struct {
				Request
				arrival time.Time
				Booking
			}
			var ios []io
			var busy [NumClasses]time.Duration
			now := t0
			for range 2000 {
				now = now.Add(time.Duration(rng.ExpFloat64() * float64(p.ReadService) / float64(p.QueueDepth)))
				r := Request{Class: Class(rng.IntN(int(NumClasses))), Write: rng.IntN(2) == 0}
				switch rng.IntN(3) {
				case 0: // a block
					r.Bytes = 4 << 10
				case 1: // a chunk
					r.Bytes = p.ChunkBytes
				case 2: // a sync
					r.Write = true
				}
				if rng.IntN(2) == 0 {
					r.Stream = d.NewStream()
				}
				b := d.Book(now, r)
				ios = append(ios, io{r, now, b})
				busy[r.Class] += b.Cost
			}
			var transfers []span
			for i, x := range ios {
				service, bw := p.ReadService, p.ReadBandwidth
				if x.Write {
					service, bw = p.WriteService, p.WriteBandwidth
				}
				xfer := transferTime(x.Bytes, bw)
				if x.Cost != service+xfer { // every stream is new: none is sequential
					t.Fatalf("io %d costs %v, want service %v + transfer %v", i, x.Cost, service, xfer)
				}
				if x.Start.Before(x.arrival) || x.Done.Sub(x.Start) < x.Cost {
					t.Fatalf("io %d: arrived %v, served %v-%v, faster than its cost %v", i, x.arrival, x.Start, x.Done, x.Cost)
				}
				if i > 0 && x.Start.Before(ios[i-1].Start) {
					t.Fatalf("io %d started before io %d, which arrived earlier", i, i-1)
				}
				if xfer > 0 {
					transfers = append(transfers, span{x.Done.Add(-xfer), x.Done})
				}
			}
			slices.SortFunc(transfers, func(a, b span) int { return a.from.Compare(b.from) })
			for i := 1; i < len(transfers); i++ {
				if transfers[i].from.Before(transfers[i-1].to) {
					t.Fatalf("transfers %v and %v overlap: faster than the bandwidth", transfers[i-1], transfers[i])
				}
			}
			// I/Os in service at once: count at every start
			for _, x := range ios {
				inService := 0
				for _, y := range ios {
					if !y.Start.After(x.Start) && y.Done.After(x.Start) {
						inService++
					}
				}
				if inService > p.QueueDepth {
					t.Fatalf("%d I/Os in service at %v, queue depth %d", inService, x.Start, p.QueueDepth)
				}
			}
			st := d.Stats()
			for c := range NumClasses {
				if st.Class[c].Busy != busy[c] {
					t.Errorf("%v busy %v, want the sum of its costs %v", c, st.Class[c].Busy, busy[c])
				}
			}
		})
	}
}

func TestQueueDepth(t *testing.T) {
	p := Profile{Name: "qd3", ReadService: 10 * time.Millisecond, QueueDepth: 3}
	d := New(p, NewFakeClock(t0))
	var done []time.Duration
	for range 7 {
		done = append(done, d.Book(t0, Request{Class: Read, Bytes: 4 << 10}).Done.Sub(t0))
	}
	want := []time.Duration{10, 10, 10, 20, 20, 20, 30}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(done, want) {
		t.Errorf("7 reads at once on queue depth 3 done at %v, want %v", done, want)
	}
	st := d.Stats()
	// waits 0, 0, 0, 10, 10, 10 and 20 ms
	if got, want := st.Class[Read].Wait, (3*10+20)*time.Millisecond; got != want {
		t.Errorf("read wait %v, want %v", got, want)
	}
}

// A stream that nothing interrupts pays its service time once.
func TestSequentialStream(t *testing.T) {
	p := mustParse(t, "hdd")
	d := New(p, NewFakeClock(t0))
	s := d.NewStream()
	now := t0
	for i := range int64(4) {
		now = d.Book(now, Request{Class: Compaction, Write: true, Bytes: p.ChunkBytes, Stream: s, Offset: i * p.ChunkBytes}).Done
	}
	if want := t0.Add(p.WriteService + 4*transferTime(p.ChunkBytes, p.WriteBandwidth)); !now.Equal(want) {
		t.Errorf("4 sequential chunks done after %v, want %v", now.Sub(t0), want.Sub(t0))
	}
}

// TestReadWaitsForOneChunk runs a compaction write of 4 chunks and a read
// that arrives during the first chunk, on a fake clock: the read waits for
// that chunk, not for the compaction, and the compaction's next chunk waits
// for the read.
func TestReadWaitsForOneChunk(t *testing.T) {
	for _, name := range []string{"hdd", "ssd"} {
		t.Run(name, func(t *testing.T) {
			p := mustParse(t, name)
			clock := NewFakeClock(t0)
			d := New(p, clock)
			chunk := transferTime(p.ChunkBytes, p.WriteBandwidth)
			read := transferTime(4<<10, p.ReadBandwidth)

			// Each goroutine records when its I/O is done, then parks on
			// the clock, so that two sleepers always means both have
			// booked their next step or finished.
			compactionDone, readDone := make(chan time.Time, 1), make(chan time.Time, 1)
			park := func(done chan<- time.Time) {
				done <- clock.Now()
				clock.Sleep(time.Hour)
			}
			go func() {
				d.Do(Request{Class: Compaction, Write: true, Bytes: 4 * p.ChunkBytes, Stream: d.NewStream()})
				park(compactionDone)
			}()
			clock.WaitSleepers(1) // the first chunk is booked: the compaction sleeps
			go func() {
				d.Do(Request{Class: Read, Bytes: 4 << 10, Stream: d.NewStream(), Offset: 1 << 30})
				park(readDone)
			}()
			clock.WaitSleepers(2)

			chunk1 := t0.Add(p.WriteService + chunk)
			wantRead := chunk1.Add(read) // the read's service overlaps the chunk (QD > 1)
			chunk2 := chunk1.Add(p.WriteService + chunk)
			if p.QueueDepth == 1 {
				wantRead = chunk1.Add(p.ReadService + read)
				chunk2 = wantRead.Add(p.WriteService + chunk) // the read moved the head
			}
			wantCompaction := chunk2.Add(2 * chunk) // chunks 3 and 4 stream on

			for len(readDone) == 0 || len(compactionDone) == 0 {
				clock.AdvanceToNext()
				clock.WaitSleepers(2)
			}
			gotRead, gotCompaction := <-readDone, <-compactionDone
			clock.Advance(2 * time.Hour) // unpark
			if !gotRead.Equal(wantRead) {
				t.Errorf("read done at %v, want %v (behind one chunk)", gotRead.Sub(t0), wantRead.Sub(t0))
			}
			if !gotRead.Before(chunk2) {
				t.Errorf("read done at %v, after the compaction's second chunk (%v)", gotRead.Sub(t0), chunk2.Sub(t0))
			}
			if !gotCompaction.Equal(wantCompaction) {
				t.Errorf("compaction done at %v, want %v", gotCompaction.Sub(t0), wantCompaction.Sub(t0))
			}
			st := d.Stats()
			if st.Class[Read].Wait != wantRead.Sub(t0)-(p.ReadService+read) {
				t.Errorf("read wait %v, want %v", st.Class[Read].Wait, wantRead.Sub(t0)-(p.ReadService+read))
			}
			if st.Class[Compaction].IOs != 4 || st.Class[Compaction].Bytes != uint64(4*p.ChunkBytes) {
				t.Errorf("compaction %d I/Os, %d bytes, want 4 chunks", st.Class[Compaction].IOs, st.Class[Compaction].Bytes)
			}
		})
	}
}

func TestStatsShares(t *testing.T) {
	p := Profile{Name: "qd1", ReadService: 10 * time.Millisecond, WriteService: 10 * time.Millisecond, QueueDepth: 1}
	clock := NewFakeClock(t0)
	d := New(p, clock)
	before := d.Stats()
	for i := range 4 {
		c := Read
		if i == 0 {
			c = Compaction
		}
		d.Book(t0, Request{Class: c})
	}
	clock.Advance(80 * time.Millisecond)
	s := d.Stats().Sub(before)
	if s.Elapsed != 80*time.Millisecond || s.Class[Read].IOs != 3 {
		t.Fatalf("interval %+v", s)
	}
	if got := s.Share(Compaction); got != 0.25 {
		t.Errorf("compaction share %v, want 0.25", got)
	}
	if got := s.Utilisation(Read); got != 30.0/80 {
		t.Errorf("read utilisation %v, want %v", got, 30.0/80)
	}
	if got := s.MeanWait(Read); got != 20*time.Millisecond { // waits 10, 20, 30 ms
		t.Errorf("mean read wait %v, want 20ms", got)
	}
}

// Callers read the clock before they book, so bookings may come in out of
// arrival order by a little: the late one starts no earlier than the one
// booked before it, and its transfer does not overlap.
func TestBookingRace(t *testing.T) {
	p := Profile{Name: "qd2", ReadService: 10 * time.Millisecond, ReadBandwidth: 1e6, QueueDepth: 2}
	d := New(p, NewFakeClock(t0))
	first := d.Book(t0.Add(5*time.Millisecond), Request{Class: Read, Bytes: 4000})
	late := d.Book(t0, Request{Class: Read, Bytes: 4000})
	if late.Start.Before(first.Start) {
		t.Errorf("late booking starts at %v, before the first (%v)", late.Start.Sub(t0), first.Start.Sub(t0))
	}
	if late.Done.Before(first.Done.Add(4 * time.Millisecond)) { // its transfer follows the first's
		t.Errorf("late booking done at %v, its transfer overlaps the first's (done %v)", late.Done.Sub(t0), first.Done.Sub(t0))
	}
	if w := d.Stats().Class[Read].Wait; w < 0 {
		t.Errorf("negative wait %v", w)
	}
}

// TestSetFree: a free device counts I/Os and charges no time; turned back
// on, it charges again.
func TestSetFree(t *testing.T) {
	p := mustParse(t, "ssd")
	d := New(p, NewFakeClock(t0))
	d.SetFree(true)
	for range 10 {
		if b := d.Book(t0, Request{Class: Compaction, Write: true, Bytes: p.ChunkBytes}); !b.Done.Equal(t0) || b.Cost != 0 {
			t.Fatalf("free device booked %+v, want done at arrival", b)
		}
	}
	if st := d.Stats().Class[Compaction]; st.IOs != 10 || st.Busy != 0 {
		t.Fatalf("free device stats %+v, want 10 I/Os and no busy time", st)
	}
	d.SetFree(false)
	if b := d.Book(t0, Request{Class: Read, Bytes: 4096}); b.Done.Sub(t0) < p.ReadService {
		t.Fatalf("device back on served a read in %v, want at least %v", b.Done.Sub(t0), p.ReadService)
	}
}
