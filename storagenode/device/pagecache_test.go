package device

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// pageProfile times reads only (writes are free, so writers never wait)
// and keeps a page cache of 16 pages.
func pageProfile() Profile {
	return Profile{Name: "pages", ReadService: time.Millisecond, ReadBandwidth: 4 << 20,
		QueueDepth: 1, ChunkBytes: 64 << 10, PageCacheBytes: 16 * pageSize}
}

// writeFile writes n bytes to name through fs, 4 KiB at a time.
func writeFile(t *testing.T, fs vfs.FS, name string, n int) {
	t.Helper()
	w, err := fs.Create(name, "pebble-compaction")
	if err != nil {
		t.Fatal(err)
	}
	for range n / pageSize {
		if _, err := w.Write(make([]byte, pageSize)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// readTimed reads n bytes of name at off on the fake clock and returns the
// device figures of the read and how long it took.
func readTimed(t *testing.T, d *Device, clock *FakeClock, fs vfs.FS, name string, off, n int64, opt vfs.OpenOption) (Stats, time.Duration) {
	t.Helper()
	f, err := fs.Open(name, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before, start := d.Stats(), clock.Now()
	done := make(chan error, 1)
	go func() {
		_, err := f.ReadAt(make([]byte, n), off)
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return d.Stats().Sub(before), clock.Now().Sub(start)
		default:
		}
		if _, ok := clock.AdvanceToNext(); !ok {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// TestPageCacheServesJustWritten: reads of what the node just wrote, user
// reads and a compaction's readahead alike, cost no device time and count
// as page hits; a read of a file written before (not through the device)
// pays its service time and transfer.
func TestPageCacheServesJustWritten(t *testing.T) {
	p, clock := pageProfile(), NewFakeClock(t0)
	d := New(p, clock)
	mem := vfs.NewMem()
	fs := d.FS(mem)
	writeFile(t, mem, "old.sst", 64<<10) // beneath the device: cold
	writeFile(t, fs, "new.sst", 32<<10)

	for _, opt := range []vfs.OpenOption{vfs.RandomReadsOption, vfs.SequentialReadsOption} {
		s, took := readTimed(t, d, clock, fs, "new.sst", 8<<10, 4<<10, opt)
		var ios, hits uint64
		var busy time.Duration
		for _, c := range s.Class {
			ios, hits, busy = ios+c.IOs, hits+c.PageHits, busy+c.Busy
		}
		if ios != 0 || busy != 0 || took != 0 || hits != 1 {
			t.Errorf("just-written block (%T): %d I/Os, busy %v, took %v, %d page hits: want none, 0, 0, 1",
				opt, ios, busy, took, hits)
		}
	}
	s, took := readTimed(t, d, clock, fs, "old.sst", 8<<10, 4<<10, vfs.RandomReadsOption)
	want := p.ReadService + transferTime(4<<10, p.ReadBandwidth)
	if c := s.Class[Read]; c.IOs != 1 || c.PageHits != 0 || c.Busy != want || took != want {
		t.Errorf("cold block: %d I/Os, %d page hits, busy %v, took %v: want 1, 0, %v, %v", c.IOs, c.PageHits, c.Busy, took, want, want)
	}
	// The cold block's page is cached now: a smaller read inside it, as
	// a table's open reads its footer, then its properties, is a hit.
	if s, took := readTimed(t, d, clock, fs, "old.sst", 9<<10, 100, vfs.RandomReadsOption); s.Class[Read].IOs != 0 || took != 0 || s.Class[Read].PageHits != 1 {
		t.Errorf("re-read of the page read: %d I/Os, took %v, %d page hits: want a hit", s.Class[Read].IOs, took, s.Class[Read].PageHits)
	}
}

// TestPageCacheBounded: the cache holds at most PageCacheBytes, evicting
// the least recently used pages; a read pays for the bytes of the pages it
// lost; a removed file's pages go at once, and a renamed file keeps them.
func TestPageCacheBounded(t *testing.T) {
	p, clock := pageProfile(), NewFakeClock(t0)
	d := New(p, clock)
	fs := d.FS(vfs.NewMem())
	writeFile(t, fs, "big.sst", 64*pageSize) // four times the cache
	read := func(name string, off, n int64) ClassStats {
		s, _ := readTimed(t, d, clock, fs, name, off, n, vfs.RandomReadsOption)
		return s.Class[Read]
	}
	if c := read("big.sst", 0, pageSize); c.IOs != 1 || c.Bytes != pageSize {
		t.Errorf("evicted first page: %d I/Os of %d bytes, want 1 of %d", c.IOs, c.Bytes, pageSize)
	}
	if c := read("big.sst", 63*pageSize, pageSize); c.IOs != 0 || c.PageHits != 1 {
		t.Errorf("last page: %d I/Os, %d page hits, want a hit", c.IOs, c.PageHits)
	}
	// Pages 49-63 and 0 are cached (page 0's read evicted page 48): a read
	// of pages 48-49 pays page 48 only.
	if c := read("big.sst", 48*pageSize, 2*pageSize); c.IOs != 1 || c.Bytes != pageSize {
		t.Errorf("half-cached read: %d I/Os of %d bytes, want 1 of %d", c.IOs, c.Bytes, pageSize)
	}

	// B, then A over it in recency, then A removed: C fits beside B.
	writeFile(t, fs, "b.sst", 8*pageSize)
	writeFile(t, fs, "a.sst", 8*pageSize)
	if err := fs.Remove("a.sst"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, fs, "c.sst", 8*pageSize)
	if c := read("b.sst", 0, 8*pageSize); c.IOs != 0 || c.PageHits != 1 {
		t.Errorf("B after A's removal and C: %d I/Os, %d page hits, want a hit (A's pages freed)", c.IOs, c.PageHits)
	}
	if err := fs.Rename("c.sst", "d.sst"); err != nil {
		t.Fatal(err)
	}
	if c := read("d.sst", 0, 8*pageSize); c.IOs != 0 || c.PageHits != 1 {
		t.Errorf("renamed C: %d I/Os, %d page hits, want a hit", c.IOs, c.PageHits)
	}
	if c := read("big.sst", 63*pageSize, pageSize); c.IOs != 1 {
		t.Errorf("big's last page after 16 newer pages: %d I/Os, want 1 (evicted)", c.IOs)
	}
}

// TestPageCacheNotFilledWhileFree: a free device's writes (a preload, as if
// written long before) leave nothing in the page cache.
func TestPageCacheNotFilledWhileFree(t *testing.T) {
	p, clock := pageProfile(), NewFakeClock(t0)
	d := New(p, clock)
	fs := d.FS(vfs.NewMem())
	d.SetFree(true)
	writeFile(t, fs, "pre.sst", 4*pageSize)
	d.SetFree(false)
	if s, took := readTimed(t, d, clock, fs, "pre.sst", 0, pageSize, vfs.RandomReadsOption); s.Class[Read].IOs != 1 || took == 0 {
		t.Errorf("preloaded page: %d I/Os, took %v, want a device read", s.Class[Read].IOs, took)
	}
}

// TestSyncedWALWriteOnce: each synced Pebble write is one device write of
// the bytes it appended to the WAL, charged at its sync: the buffered
// Write reaches the device only then (no second charge).
func TestSyncedWALWriteOnce(t *testing.T) {
	mem := vfs.NewMem()
	d := New(mustParse(t, "none"), nil)
	cache := pebble.NewCache(1 << 20)
	defer cache.Unref()
	opts := &pebble.Options{FS: mem, Cache: cache, Logger: testLogger{t}}
	d.Configure(opts)
	db, err := pebble.Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	walBytes := func() int64 {
		names, err := mem.List("db")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, name := range names {
			if st, err := mem.Stat(mem.PathJoin("db", name)); err == nil && len(name) > 4 && name[len(name)-4:] == ".log" {
				n += st.Size()
			}
		}
		return n
	}
	set := func(i int) {
		if err := db.Set(key(i), make([]byte, 100), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	set(0)
	before, logBefore := d.Stats().Class[WAL], walBytes()
	const sets = 50
	for i := 1; i <= sets; i++ {
		set(i)
	}
	after, logAfter := d.Stats().Class[WAL], walBytes()
	if ios := after.IOs - before.IOs; ios != sets {
		t.Errorf("%d synced sets: %d WAL device writes, want one each", sets, ios)
	}
	if got, want := after.Bytes-before.Bytes, uint64(logAfter-logBefore); got != want {
		t.Errorf("WAL device bytes %d, want the %d bytes the log grew by (each once)", got, want)
	}
}
