// Package device emulates a node's storage device beneath Pebble, so that
// compaction I/O takes device time from reads as on a real disk (issue 14).
//
// # Use
//
// A node makes one Device (New(profile, nil)) and puts each of its Pebble
// trees on it with Configure before pebble.Open; the FS that Configure
// returns counts that tree's part. Device.Stats and FS.Stats give I/Os,
// bytes, busy time and queue wait per class; Stats.Sub turns two snapshots
// into an interval's figures.
//
// # The model
//
// A Device is one FIFO queue in front of QueueDepth slots and one bandwidth
// channel. An arriving I/O takes the first free slot, but never
// starts before an I/O that arrived earlier did (FIFO). It then pays its
// service time (positioning, command latency) in the slot, in parallel with
// the other slots, and its transfer, Bytes/Bandwidth, on the channel, which
// carries one transfer at a time (a transfer takes the channel's first gap
// long enough for it). The slot frees when the transfer ends. So an I/O's
// device time is its service time plus bytes/bandwidth; the device never
// starts more than QueueDepth I/Os at once and never moves bytes faster
// than its bandwidth. Reads and writes have their own service time and
// bandwidth, as real devices do; a sync is a write of no bytes, and a
// SyncTo that only starts writeback is free.
//
// An I/O that continues the previous streamed I/O (same file handle, next
// offset, nothing else dispatched in between) pays no service time: a
// compaction streaming alone runs at the device's bandwidth, and a read
// that cuts in makes the next chunk pay again, as a seek does on a disk.
//
// I/Os larger than ChunkBytes are served chunk by chunk, each chunk
// arriving when the previous one is done. A read that arrives during a
// compaction's chunk waits for that chunk, and the compaction's next chunk
// queues behind the read: a read waits for one chunk, never for the whole
// compaction.
//
// # The page cache
//
// Pebble's own I/O is small (4 KiB blocks, bufio's 4 KiB writes), but a
// disk beneath the kernel sees larger I/Os, and the model follows the
// kernel (fs.go's file): a compaction input, opened for sequential reads
// (POSIX_FADV_SEQUENTIAL, which doubles Linux's 128 KiB readahead), reads
// ahead one ChunkBytes at a time and its reads inside the window cost
// nothing; and writes are written back, one device write per ChunkBytes
// dirtied (the writer waits for it, as the kernel throttles a writer that
// outruns its disk), the rest at the next sync: a synced WAL commit is one
// device write, not a write and a sync; a sync with nothing dirty is a
// write of no bytes. User
// reads are random (POSIX_FADV_RANDOM: no readahead) and pay per block.
// Without this, a compaction read paid a read service time per 4 KiB
// block whenever a user read cut in, so compaction crawled at 4 KiB per
// service time in one slot and never took the device from reads.
//
// The pages themselves (pagecache.go): each device keeps an LRU
// (hashicorp/golang-lru's simplelru) of 4 KiB pages keyed by the file's
// identity, as the kernel's are by inode, Profile.PageCacheBytes in all (256 KiB for ssd and hdd), filled
// by every write and by every read that went to the device, and freed
// with the file (Remove; Rename keeps them). A read, or a readahead, pays
// only for the bytes of the pages it misses and costs nothing when it
// misses none: counted as a page hit (ClassStats.PageHits), not an I/O.
// This is what serves the burst of small reads with which Pebble opens a
// table (footer, metaindex, properties: a few pages at the table's tail)
// after the first of them, and a just-written table read soon after. It
// is small (issue 14: memory at most a tenth of the data), so GETs of
// data written long ago still miss it. A free device (SetFree) fills
// nothing: its writes are as if made long before.
//
// Time is virtual: Book places an I/O in the device's future under a
// mutex, and Do sleeps on the Clock until the booking ends. Waiting costs
// no CPU, and a goroutine that wakes late does not delay the device's
// schedule. Tests run on a FakeClock.
//
// # The processor
//
// A node's capacity on a device comes from two resources, as on a real
// node: the device serves the reads that miss the block cache, and the
// node's processor every client request, hits included. Profile's
// RequestService and Cores describe the processor (a real server's time
// per request, scaled in time like the device; profile.go cites the
// figure), and CPU emulates it: Cores slots in front of one FIFO queue,
// virtual time as on the Device. The node books each client request on it
// before handling it (storagenode's admission), so a node whose hot keys
// all hit the cache still saturates, at Cores/RequestService requests/s,
// and a node whose reads miss saturates its device first. Node-to-node
// traffic (chain writes, acks, version answers, copies) is not charged.
//
// # Classes
//
// Stats counts per class (read, WAL, flush, compaction) the I/Os, bytes,
// device time (Busy) and queue wait. Pebble tells the classes apart as
// follows; each signal is set by Pebble v2.1.7 itself, not guessed:
//
//   - Writes: Pebble names the purpose of every file it creates, as the
//     vfs.DiskWriteCategory of FS.Create and ReuseForWrite: "pebble-wal"
//     (wal.StandaloneManager, also for recycled logs),
//     "pebble-memtable-flush" and "pebble-compaction" (compaction.go's
//     getDiskWriteCategoryForCompaction, by compaction kind), and
//     "pebble-manifest". A file's writes and syncs take its creation
//     category's class; MANIFEST, OPTIONS, marker files and directory syncs
//     are counted with the WAL, being small synced metadata logs.
//   - Compaction reads: a compaction's input iterators call
//     ReadHandle.SetupForCompaction, which with informed readahead set to
//     FadviseSequential (the default) reopens the table through FS.Open
//     with vfs.SequentialReadsOption and reads every block of the input
//     through that file (objstorageprovider/vfs_readable.go). The only other
//     callers of that option are speculative readahead, which Configure
//     turns off, and checkpoints and sstable copies, which are
//     compaction-like. So reads of files opened with SequentialReadsOption
//     are compaction reads.
//   - User reads: the other table reads (.sst, .blob), opened with
//     vfs.RandomReadsOption for the table cache. They reach the FS only on a
//     block-cache miss: sstable block reads look up the block cache first
//     and call ReadHandle.ReadAt only when the block is absent. Opening a
//     table (footer, properties, index, filter) and a compaction input's
//     first index block, read before SetupForCompaction, also go through
//     the random handle and are counted here: a few small reads per table
//     (under a tenth of a compaction's bytes with the tests' tiny tables).
//   - Log reads (WAL replay, MANIFEST) at open are counted with the WAL.
//
// Other signals were rejected: EventListener's TableCreated and
// CompactionBegin come after or beside the I/O, per job and not per file
// handle, and a compaction's inputs are read concurrently with user reads
// of the same tables, so file numbers cannot tell them apart.
//
// # Profiles
//
// Parse("ssd") and Parse("hdd") scale real devices in time (profile.go
// cites the figures): each serves about 250 random 4 KiB reads/s, so 16
// nodes on 2 cores are device-bound well before CPU-bound (about 1,250
// ops/s per node at 10k ops per CPU-second). Every ratio stays the real
// device's, the compaction budget included (Profile.CompactionBudget).
//
//	profile  read service  write service  read bw    write bw   QD  budget      per request  cores
//	ssd      16.1 ms       2.8 ms         22.9 MB/s  12.9 MB/s  4   0.46 MiB/s  1.75 ms      1
//	hdd      4.12 ms       4.12 ms        525 MB/s   525 MB/s   1   192 MiB/s   4.2 µs       1
//
// So an ssd node serves about 571 requests/s from memory and 250 random
// reads/s from its device; an hdd node's processor never binds (its
// device's 81 real reads/s are 3,000 times slower than a request's
// processing, which the scaling keeps).
//
// Parse("none") is no device: I/O is counted and costs nothing, and
// requests cost no processor time.
package device
