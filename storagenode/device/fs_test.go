package device

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// openPebble opens a Pebble DB with a small memtable and block cache on an
// in-memory FS behind a free device (I/O counted, never waited for).
func openPebble(t *testing.T) (*pebble.DB, *Device) {
	t.Helper()
	d := New(mustParse(t, "none"), nil)
	db, _ := openOn(t, d)
	return db, d
}

// openOn opens a Pebble DB on device d and returns its FS too.
func openOn(t *testing.T, d *Device) (*pebble.DB, *FS) {
	t.Helper()
	cache := pebble.NewCache(1 << 20)
	defer cache.Unref()
	opts := &pebble.Options{FS: vfs.NewMem(), Cache: cache, MemTableSize: 256 << 10, Logger: testLogger{t}}
	opts.DisableAutomaticCompactions = true // the test says when to compact
	fs := d.Configure(opts)
	db, err := pebble.Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, fs
}

type testLogger struct{ t *testing.T }

func (testLogger) Infof(string, ...any)             {}
func (l testLogger) Errorf(format string, a ...any) { l.t.Errorf(format, a...) }
func (l testLogger) Fatalf(format string, a ...any) { l.t.Fatalf(format, a...) }

// TestFSShares opens two DBs on one device, as a node's trees share its
// device: each FS counts its own I/O, and the device counts both.
func TestFSShares(t *testing.T) {
	d := New(mustParse(t, "none"), nil)
	dbA, fsA := openOn(t, d)
	_, fsB := openOn(t, d)
	a0, b0 := fsA.Stats(), fsB.Stats()
	for i := range 50 {
		if err := dbA.Set(key(i), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	a, b, dev := fsA.Stats(), fsB.Stats(), d.Stats()
	if got := a.Sub(a0).Class[WAL].IOs; got < 50 {
		t.Errorf("A's WAL: %d I/Os for 50 synced sets, want a synced write each", got)
	}
	if b.Class != b0.Class {
		t.Errorf("B did nothing but its FS counted%s", classes(b.Sub(b0)))
	}
	for c := range NumClasses {
		if sum := a.Class[c].IOs + b.Class[c].IOs; dev.Class[c].IOs != sum {
			t.Errorf("%v: device counted %d I/Os, its FSs %d", c, dev.Class[c].IOs, sum)
		}
	}
}

// TestPebbleOnTimedDevice runs Pebble on a device that makes it wait, on
// the real clock: writes, a flush, a compaction and reads complete, and
// every class that did I/O spent device time.
func TestPebbleOnTimedDevice(t *testing.T) {
	p := Profile{Name: "fast", ReadService: 50 * time.Microsecond, WriteService: 20 * time.Microsecond,
		ReadBandwidth: 200e6, WriteBandwidth: 100e6, QueueDepth: 2, ChunkBytes: 64 << 10}
	d := New(p, nil)
	db, _ := openOn(t, d)
	for v := range 2 {
		fill(t, db, 300, v)
	}
	compact(t, db, 300)
	for i := range 100 {
		get(t, db, i*3)
	}
	s := d.Stats()
	for c := range NumClasses {
		if s.Class[c].IOs == 0 || s.Class[c].Busy <= 0 {
			t.Errorf("%v: %d I/Os, busy %v: want device time spent", c, s.Class[c].IOs, s.Class[c].Busy)
		}
	}
}

func key(i int) []byte { return fmt.Appendf(nil, "key-%06d", i) }

// fill writes n keys of 100 bytes, synced, and flushes them to one L0 table.
func fill(t *testing.T, db *pebble.DB, n, version int) {
	t.Helper()
	for i := range n {
		if err := db.Set(key(i), fmt.Appendf(nil, "%0100d", version), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
}

func compact(t *testing.T, db *pebble.DB, n int) {
	t.Helper()
	if err := db.Compact(t.Context(), key(0), key(n), true); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, db *pebble.DB, i int) {
	t.Helper()
	v, closer, err := db.Get(key(i))
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 100 {
		t.Fatalf("value %q", v)
	}
	closer.Close()
}

func classes(s Stats) string {
	out := ""
	for c := range NumClasses {
		out += fmt.Sprintf(" %v: %d I/Os %d bytes;", c, s.Class[c].IOs, s.Class[c].Bytes)
	}
	return out
}

// TestPebbleClasses runs a real Pebble on the wrapped FS: synced writes
// are WAL I/O, a flush writes flush I/O, and a compaction reads and writes
// compaction I/O.
func TestPebbleClasses(t *testing.T) {
	db, d := openPebble(t)
	opened := d.Stats()

	for i := range 100 {
		if err := db.Set(key(i), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	s := d.Stats().Sub(opened)
	if s.Class[WAL].IOs < 100 || s.Class[WAL].Bytes < 100*10 {
		t.Errorf("100 synced sets: want at least a synced write each in the WAL;%s", classes(s))
	}
	if s.Class[Flush].IOs+s.Class[Compaction].IOs+s.Class[Read].IOs > 0 {
		t.Errorf("synced sets: want WAL I/O only;%s", classes(s))
	}

	before := d.Stats()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	s = d.Stats().Sub(before)
	if s.Class[Flush].IOs == 0 || s.Class[Flush].Bytes < 100*10 {
		t.Errorf("flush: want the table written as flush I/O;%s", classes(s))
	}
	if s.Class[Compaction].IOs > 0 {
		t.Errorf("flush: want no compaction I/O;%s", classes(s))
	}

	for v := range 3 { // overlapping L0 tables
		fill(t, db, 2000, v)
	}
	before = d.Stats()
	compact(t, db, 2000)
	s = d.Stats().Sub(before)
	m := db.Metrics()
	written := m.Levels[6].TableBytesCompacted // bytes the compactions wrote into L6
	if s.Class[Compaction].Bytes < written {
		t.Errorf("compaction wrote %d bytes into L6, the device saw %d compaction bytes;%s", written, s.Class[Compaction].Bytes, classes(s))
	}
	if s.Class[Flush].IOs > 0 {
		t.Errorf("compaction: want no flush I/O;%s", classes(s))
	}
	// The inputs are read through sequential handles: more compaction
	// bytes than it wrote (it read the three overlapping L0 tables too).
	if s.Class[Compaction].Bytes < 2*written {
		t.Errorf("compaction: want its input reads counted as compaction I/O (%d written);%s", written, classes(s))
	}
	// What it read through the tables' random handles (table opens, each
	// input's first index block) is counted as reads: a small part.
	if s.Class[Read].Bytes > s.Class[Compaction].Bytes/4 {
		t.Errorf("compaction: want most of its reads counted as compaction I/O;%s", classes(s))
	}
	t.Logf("compaction:%s", classes(s))
}

// TestCacheHitCostsNothing reads a key twice: the first read misses the
// block cache and pays a read I/O, the second hits it and never reaches
// the device.
func TestCacheHitCostsNothing(t *testing.T) {
	db, d := openPebble(t)
	fill(t, db, 2000, 0)
	compact(t, db, 2000)
	before := d.Stats()
	get(t, db, 1234)
	first := d.Stats()
	if first.Sub(before).Class[Read].IOs == 0 {
		t.Fatalf("first read of the key: want a block read that missed the cache;%s", classes(first.Sub(before)))
	}
	get(t, db, 1234)
	if s := d.Stats().Sub(first); s.Class[Read].IOs != 0 || s.Class[Read].Busy != 0 {
		t.Errorf("second read of the key: want no device I/O (a block cache hit);%s", classes(s))
	}
}

// BenchmarkWrapperReadAt is the wrapper's cost per 4 KiB ReadAt on a
// no-wait device, next to the bare in-memory file.
func BenchmarkWrapperReadAt(b *testing.B) {
	for _, wrapped := range []bool{false, true} {
		b.Run(fmt.Sprintf("wrapped=%v", wrapped), func(b *testing.B) {
			var fs vfs.FS = vfs.NewMem()
			if wrapped {
				fs = New(mustParse(b, "none"), nil).FS(fs)
			}
			f, err := fs.Create("t.sst", "pebble-compaction")
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 4<<10)
			for range 256 {
				f.Write(buf)
			}
			f.Close()
			if f, err = fs.Open("t.sst", vfs.RandomReadsOption); err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := f.ReadAt(buf, int64(i%256)<<12); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCompactionReadsAhead reads a file opened for sequential reads (a
// compaction input) in 4 KiB blocks: the device sees one read per
// ChunkBytes, and the blocks inside the window cost nothing; a file
// opened for random reads pays every block.
func TestCompactionReadsAhead(t *testing.T) {
	d := New(mustParse(t, "none"), nil)
	fs := d.FS(vfs.NewMem())
	const size = 1 << 20 // 4 chunks
	w, err := fs.Create("t.sst", "pebble-compaction")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	buf := make([]byte, 4<<10)
	readAll := func(opt vfs.OpenOption) Stats {
		f, err := fs.Open("t.sst", opt)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		before := d.Stats()
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := f.ReadAt(buf, off); err != nil {
				t.Fatal(err)
			}
		}
		return d.Stats().Sub(before)
	}
	seq := readAll(vfs.SequentialReadsOption)
	if c := seq.Class[Compaction]; c.IOs != size/defaultChunk || c.Bytes != size {
		t.Errorf("sequential: %d reads of %d bytes, want %d of %d (one per chunk);%s", c.IOs, c.Bytes, size/defaultChunk, size, classes(seq))
	}
	rnd := readAll(vfs.RandomReadsOption)
	if c := rnd.Class[Read]; c.IOs != size/uint64(len(buf)) || c.Bytes != size {
		t.Errorf("random: %d reads of %d bytes, want one per 4 KiB block;%s", c.IOs, c.Bytes, classes(rnd))
	}
}

// TestWritesWrittenBack writes a file in 4 KiB pieces and syncs it: the
// device sees one write per ChunkBytes dirtied and one for the rest with
// the sync, on a device that makes the writer wait on a fake clock.
func TestWritesWrittenBack(t *testing.T) {
	clk := NewFakeClock(time.Unix(0, 0))
	p := Profile{Name: "t", WriteService: time.Millisecond, WriteBandwidth: 64 << 20, QueueDepth: 1, ChunkBytes: 64 << 10}
	d := New(p, clk)
	fs := d.FS(vfs.NewMem())
	f, err := fs.Create("000001.log", "pebble-wal")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		buf := make([]byte, 4<<10)
		for range 40 { // 160 KiB: two chunks and 32 KiB dirty
			if _, err := f.Write(buf); err != nil {
				done <- err
				return
			}
		}
		done <- f.Sync()
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			s := d.Stats().Class[WAL]
			if s.IOs != 3 || s.Bytes != 160<<10 {
				t.Errorf("WAL: %d writes of %d bytes, want 3 (two chunks, the rest with the sync) of %d", s.IOs, s.Bytes, 160<<10)
			}
			xfer := func(n float64) time.Duration { return time.Duration(n / p.WriteBandwidth * float64(time.Second)) }
			// The first write pays the service time, the next ones continue
			// its stream; each pays its transfer.
			want := time.Millisecond + 2*xfer(64<<10) + xfer(32<<10)
			if s.Busy != want {
				t.Errorf("WAL busy %v, want %v", s.Busy, want)
			}
			if el := clk.Now().Sub(time.Unix(0, 0)); el < want {
				t.Errorf("the writer finished after %v of device time %v: faster than the device", el, want)
			}
			return
		default:
		}
		if _, ok := clk.AdvanceToNext(); !ok {
			time.Sleep(time.Millisecond)
		}
	}
}

// TestReadWaitsForReadahead reads a compaction input through the FS on
// the hdd profile (one slot) and a fake clock: its first 4 KiB block costs
// one readahead chunk, and a user read that arrives meanwhile waits for
// that chunk, then pays its own seek and transfer.
func TestReadWaitsForReadahead(t *testing.T) {
	p := mustParse(t, "hdd")
	clock := NewFakeClock(t0)
	d := New(p, clock)
	mem := vfs.NewMem()
	for _, name := range []string{"a.sst", "b.sst"} {
		w, err := mem.Create(name, "pebble-compaction")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, 4*p.ChunkBytes)); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	fs := d.FS(mem)
	start := clock.Now()
	seq, err := fs.Open("a.sst", vfs.SequentialReadsOption)
	if err != nil {
		t.Fatal(err)
	}
	rnd, err := fs.Open("b.sst", vfs.RandomReadsOption)
	if err != nil {
		t.Fatal(err)
	}
	buf, buf2 := make([]byte, 4<<10), make([]byte, 4<<10)
	// Each goroutine records when its read is done, then parks on the
	// clock, so that two sleepers always means both have booked or
	// finished.
	compactionDone, readDone := make(chan time.Time, 1), make(chan time.Time, 1)
	park := func(done chan<- time.Time) {
		done <- clock.Now()
		clock.Sleep(time.Hour)
	}
	go func() {
		seq.ReadAt(buf, 0)
		park(compactionDone)
	}()
	clock.WaitSleepers(1) // the readahead chunk is booked
	go func() {
		rnd.ReadAt(buf2, 8*p.ChunkBytes/4)
		park(readDone)
	}()
	clock.WaitSleepers(2)
	for len(readDone) == 0 || len(compactionDone) == 0 {
		clock.AdvanceToNext()
		clock.WaitSleepers(2)
	}
	defer clock.Advance(2 * time.Hour) // unpark
	chunkDone := start.Add(p.ReadService + transferTime(p.ChunkBytes, p.ReadBandwidth))
	wantRead := chunkDone.Add(p.ReadService + transferTime(4<<10, p.ReadBandwidth))
	if got := <-compactionDone; !got.Equal(chunkDone) {
		t.Errorf("compaction's first block done at %v, want %v (one readahead chunk)", got.Sub(start), chunkDone.Sub(start))
	}
	if got := <-readDone; !got.Equal(wantRead) {
		t.Errorf("user read done at %v, want %v (behind the chunk)", got.Sub(start), wantRead.Sub(start))
	}
}
