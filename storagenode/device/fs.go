package device

import (
	"slices"
	"strings"

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

func (f *FS) wrap(inner vfs.File, err error, c Class) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &file{File: inner, fs: f, class: c, stream: f.dev.NewStream()}, nil
}

func (f *FS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	inner, err := f.FS.Create(name, category)
	return f.wrap(inner, err, writeClass(category))
}

func (f *FS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	inner, err := f.FS.Open(name, opts...)
	return f.wrap(inner, err, readClass(name, opts))
}

func (f *FS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	inner, err := f.FS.OpenReadWrite(name, category, opts...)
	return f.wrap(inner, err, writeClass(category))
}

// OpenDir's files are only synced: metadata, counted with the WAL.
func (f *FS) OpenDir(name string) (vfs.File, error) {
	inner, err := f.FS.OpenDir(name)
	return f.wrap(inner, err, WAL)
}

func (f *FS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	inner, err := f.FS.ReuseForWrite(oldname, newname, category)
	return f.wrap(inner, err, writeClass(category))
}

func (f *FS) Unwrap() vfs.FS { return f.FS }

// file pays device time for each read, write and sync after the inner
// file has done it. Its stream makes its consecutive I/Os sequential.
// Prefetch is a hint and costs nothing: the reads it announces pay when
// they come.
type file struct {
	vfs.File
	fs     *FS
	class  Class
	stream uint64
	rOff   int64 // Read's position
	wOff   int64 // Write's position (writes are sequential: vfs.File)
}

func (f *file) pay(write bool, n int, off int64) {
	if n > 0 {
		f.fs.dev.Do(Request{Class: f.class, Write: write, Bytes: int64(n), Stream: f.stream, Offset: off, fs: f.fs})
	}
}

func (f *file) sync() { f.fs.dev.Do(Request{Class: f.class, Write: true, fs: f.fs}) }

func (f *file) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.pay(false, n, f.rOff)
	f.rOff += int64(n)
	return n, err
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.pay(false, n, off)
	return n, err
}

func (f *file) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.pay(true, n, f.wOff)
	f.wOff += int64(n)
	return n, err
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	f.pay(true, n, off)
	return n, err
}

func (f *file) Sync() error {
	err := f.File.Sync()
	f.sync()
	return err
}

func (f *file) SyncData() error {
	err := f.File.SyncData()
	f.sync()
	return err
}

// SyncTo pays only when it synced: starting writeback (sync_file_range,
// fullSync false) moves no bytes the writes have not paid for.
func (f *file) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	if full {
		f.sync()
	}
	return full, err
}
