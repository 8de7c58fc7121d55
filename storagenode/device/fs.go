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
// package doc). Call it before pebble.Open.
func (d *Device) Configure(o *pebble.Options) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	o.FS = d.FS(o.FS)
	rc := objstorageprovider.NewReadaheadConfig()
	rc.Set(objstorageprovider.FadviseSequential, objstorageprovider.NoReadahead)
	o.Local.ReadaheadConfig = rc
}

// FS wraps inner so that every read, write and sync of its files pays
// device time, classed as the package doc says.
func (d *Device) FS(inner vfs.FS) vfs.FS { return &fs{FS: inner, dev: d} }

type fs struct {
	vfs.FS
	dev *Device
}

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

func (f *fs) wrap(inner vfs.File, err error, c Class) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &file{File: inner, dev: f.dev, class: c, stream: f.dev.NewStream()}, nil
}

func (f *fs) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	inner, err := f.FS.Create(name, category)
	return f.wrap(inner, err, writeClass(category))
}

func (f *fs) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	inner, err := f.FS.Open(name, opts...)
	return f.wrap(inner, err, readClass(name, opts))
}

func (f *fs) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	inner, err := f.FS.OpenReadWrite(name, category, opts...)
	return f.wrap(inner, err, writeClass(category))
}

// OpenDir's files are only synced: metadata, counted with the WAL.
func (f *fs) OpenDir(name string) (vfs.File, error) {
	inner, err := f.FS.OpenDir(name)
	return f.wrap(inner, err, WAL)
}

func (f *fs) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	inner, err := f.FS.ReuseForWrite(oldname, newname, category)
	return f.wrap(inner, err, writeClass(category))
}

func (f *fs) Unwrap() vfs.FS { return f.FS }

// file pays device time for each read, write and sync after the inner
// file has done it. Its stream makes its consecutive I/Os sequential.
// Prefetch is a hint and costs nothing: the reads it announces pay when
// they come.
type file struct {
	vfs.File
	dev    *Device
	class  Class
	stream uint64
	rOff   int64 // Read's position
	wOff   int64 // Write's position (writes are sequential: vfs.File)
}

func (f *file) pay(write bool, n int, off int64) {
	if n > 0 {
		f.dev.Do(Request{Class: f.class, Write: write, Bytes: int64(n), Stream: f.stream, Offset: off})
	}
}

func (f *file) sync() { f.dev.Do(Request{Class: f.class, Write: true}) }

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

func (f *file) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	f.sync()
	return full, err
}
