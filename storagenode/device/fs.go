package device

import (
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Configure puts Pebble on the device: o.FS (vfs.Default if nil) is
// wrapped so that its I/O pays device time, and speculative readahead is
// turned off so that only compactions open tables for sequential reads,
// which is how the wrapper tells compaction reads from user reads (see the
// package doc). Call it before pebble.Open; the FS it returns counts this
// DB's part of the device's figures.
func (d *Device) Configure(o *pebble.Options) *FS {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	fs := d.FS(o.FS)
	o.FS = fs
	rc := objstorageprovider.NewReadaheadConfig()
	rc.Set(objstorageprovider.FadviseSequential, objstorageprovider.NoReadahead)
	o.Local.ReadaheadConfig = rc
	return fs
}

// FS wraps inner so that every read, write and sync of its files pays
// device time, classed as the package doc says. Several FSs (a node's
// trees) may share a device; each counts its own part.
func (d *Device) FS(inner vfs.FS) *FS { return &FS{FS: inner, dev: d} }

// FS is a vfs.FS on a device.
type FS struct {
	vfs.FS
	dev   *Device
	stats [NumClasses]ClassStats // guarded by dev.mu
}

// Stats returns this FS's part of its device's figures: what the files
// it opened cost.
func (f *FS) Stats() Stats { return f.dev.snapshot(&f.stats) }

// writeClass maps Pebble's write categories (vfs.DiskWriteCategory) to
// classes; anything else (MANIFEST, OPTIONS, markers) is metadata, counted
// with the WAL.
func writeClass(category vfs.DiskWriteCategory) Class {
	switch category {
	case "pebble-memtable-flush":
		return Flush
	case "pebble-compaction", "pebble-blob-file-rewrite":
		return Compaction
	}
	return WAL
}

// readClass classes a file opened for reading: tables opened for
// sequential reads are compaction inputs, other tables serve user reads,
// and the rest (WAL replay, MANIFEST) is log.
func readClass(name string, opts []vfs.OpenOption) Class {
	switch {
	case slices.Contains(opts, vfs.SequentialReadsOption):
		return Compaction
	case strings.HasSuffix(name, ".sst"), strings.HasSuffix(name, ".blob"):
		return Read
	}
	return WAL
}

func (f *FS) wrap(inner vfs.File, err error, name string, c Class) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &file{File: inner, fs: f, name: name, class: c, stream: f.dev.NewStream(), size: -1}, nil
}

// Create truncates: the name's cached pages go.
func (f *FS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	inner, err := f.FS.Create(name, category)
	if err == nil {
		f.dev.pages.drop(name)
	}
	return f.wrap(inner, err, name, writeClass(category))
}

func (f *FS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	inner, err := f.FS.Open(name, opts...)
	h, err := f.wrap(inner, err, name, readClass(name, opts))
	if err == nil && slices.Contains(opts, vfs.SequentialReadsOption) {
		fl := h.(*file)
		fl.ahead = true
		if st, err := inner.Stat(); err == nil {
			fl.size = st.Size()
		}
	}
	return h, err
}

func (f *FS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	inner, err := f.FS.OpenReadWrite(name, category, opts...)
	return f.wrap(inner, err, name, writeClass(category))
}

// OpenDir's files are only synced: metadata, counted with the WAL.
func (f *FS) OpenDir(name string) (vfs.File, error) {
	inner, err := f.FS.OpenDir(name)
	return f.wrap(inner, err, name, WAL)
}

func (f *FS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	inner, err := f.FS.ReuseForWrite(oldname, newname, category)
	if err == nil {
		f.dev.pages.rename(oldname, newname)
	}
	return f.wrap(inner, err, newname, writeClass(category))
}

// Remove frees the file's cached pages, as the kernel does with its inode.
func (f *FS) Remove(name string) error {
	err := f.FS.Remove(name)
	if err == nil {
		f.dev.pages.drop(name)
	}
	return err
}

// RemoveAll frees the cached pages of the files under dir.
func (f *FS) RemoveAll(dir string) error {
	err := f.FS.RemoveAll(dir)
	if err == nil {
		f.dev.pages.dropUnder(dir)
	}
	return err
}

// Rename keeps the file's cached pages under its new name.
func (f *FS) Rename(oldname, newname string) error {
	err := f.FS.Rename(oldname, newname)
	if err == nil {
		f.dev.pages.rename(oldname, newname)
	}
	return err
}

func (f *FS) Unwrap() vfs.FS { return f.FS }

// file pays device time for its reads, writes and syncs after the inner
// file has done them, as the kernel beneath Pebble would present them to
// a disk (see the package doc, "The page cache"):
//
//   - A file opened for sequential reads (a compaction's input) reads
//     ahead: a read outside the readahead window costs one device read of
//     ChunkBytes (or to the end of the file) from its offset, and reads
//     inside the window are page-cache hits that cost nothing.
//   - What the node just wrote is in the device's page cache
//     (Profile.PageCacheBytes): a read, or a readahead, pays only for the
//     bytes of its pages that the cache does not hold, and nothing when it
//     holds them all (a page hit, counted in ClassStats.PageHits).
//   - Writes are written back: they collect in the file's dirty bytes and
//     cost a device write each time ChunkBytes have collected (the writer
//     waits, as the kernel throttles a writer that dirties pages faster
//     than the disk takes them); a sync writes the rest and pays one write
//     service time, which is the sync itself.
//
// Its stream makes its consecutive I/Os sequential. Prefetch is a hint and
// costs nothing: the reads it announces pay when they come.
type file struct {
	vfs.File
	fs     *FS
	name   string // the page cache's key
	class  Class
	stream uint64
	ahead  bool  // reads ahead (opened for sequential reads)
	size   int64 // the file's size when opened for reading ahead (-1: unknown)

	mu      sync.Mutex // the window and the dirty bytes: Pebble reads a file from several goroutines
	raFrom  int64      // readahead window [raFrom, raTo)
	raTo    int64
	rOff    int64 // Read's position
	wOff    int64 // Write's position (writes are sequential: vfs.File)
	dirty   int64 // written, not yet paid
	dirtyAt int64 // offset of the first dirty byte
}

func (f *file) pay(write bool, n, off int64) {
	if n > 0 {
		f.fs.dev.Do(Request{Class: f.class, Write: write, Bytes: n, Stream: f.stream, Offset: off, fs: f.fs})
	}
}

// fetch pays for reading bytes [off, off+n) from the device, less what
// the page cache holds.
func (f *file) fetch(n, off int64) {
	miss := f.fs.dev.pages.missing(f.name, off, n)
	if miss == 0 {
		f.fs.dev.pageHit(f.class, f.fs, n)
		return
	}
	f.pay(false, miss, off)
	if !f.fs.dev.free.Load() {
		f.fs.dev.pages.add(f.name, off, n)
	}
}

// read pays for n bytes read at off: directly, or through the readahead
// window.
func (f *file) read(n int, off int64) {
	if n <= 0 {
		return
	}
	if !f.ahead {
		f.fetch(int64(n), off)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	end := off + int64(n)
	if off >= f.raFrom && end <= f.raTo {
		return // in the page cache
	}
	from := off
	if off >= f.raFrom && off < f.raTo {
		from = f.raTo // the part already read ahead is cached
	}
	to := max(end, from+f.fs.dev.p.ChunkBytes)
	if f.size >= 0 {
		to = max(end, min(to, f.size))
	}
	f.fetch(to-from, from)
	f.raFrom, f.raTo = off, to
}

// write collects n written bytes and pays for each ChunkBytes of them.
func (f *file) write(n int) {
	if n <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dirty == 0 {
		f.dirtyAt = f.wOff
	}
	if !f.fs.dev.free.Load() {
		f.fs.dev.pages.add(f.name, f.wOff, int64(n))
	}
	f.wOff += int64(n)
	f.dirty += int64(n)
	for chunk := f.fs.dev.p.ChunkBytes; f.dirty >= chunk; {
		f.pay(true, chunk, f.dirtyAt)
		f.dirty -= chunk
		f.dirtyAt += chunk
	}
}

// writeback pays for the dirty bytes; with sync, the write that carries
// them is the sync (one write service time), or a sync of no bytes if
// nothing is dirty.
func (f *file) writeback(sync bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.dirty > 0:
		f.pay(true, f.dirty, f.dirtyAt)
		f.dirtyAt += f.dirty
		f.dirty = 0
	case sync:
		f.fs.dev.Do(Request{Class: f.class, Write: true, fs: f.fs})
	}
}

func (f *file) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.mu.Lock()
	off := f.rOff
	f.rOff += int64(n)
	f.mu.Unlock()
	f.read(n, off)
	return n, err
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.read(n, off)
	return n, err
}

func (f *file) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.write(n)
	return n, err
}

// WriteAt pays at once, beside the written-back stream: Pebble writes at
// offsets only in tests and tools.
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	if !f.fs.dev.free.Load() {
		f.fs.dev.pages.add(f.name, off, int64(n))
	}
	f.pay(true, int64(n), off)
	return n, err
}

func (f *file) Sync() error {
	err := f.File.Sync()
	f.writeback(true)
	return err
}

func (f *file) SyncData() error {
	err := f.File.SyncData()
	f.writeback(true)
	return err
}

// SyncTo pays only when it synced: starting writeback (sync_file_range,
// fullSync false) leaves the dirty bytes to the chunks and the next sync.
func (f *file) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	if full {
		f.writeback(true)
	}
	return full, err
}

// Close writes back what is still dirty (the kernel would, later; paying
// it now keeps the bytes on this file's class and stream).
func (f *file) Close() error {
	f.writeback(false)
	return f.File.Close()
}
