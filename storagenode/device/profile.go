package device

import (
	"fmt"
	"time"
)

// Profile is a device's parameters. Zero service times and bandwidths mean
// free: the None profile counts I/O but never waits.
type Profile struct {
	Name string
	// ReadService and WriteService are the per-I/O service times: positioning
	// on a disk, command latency on an SSD. Syncs pay WriteService.
	ReadService, WriteService time.Duration
	// ReadBandwidth and WriteBandwidth are the channel's rates in bytes/s
	// (0: unlimited). Every transfer goes through the one channel.
	ReadBandwidth, WriteBandwidth float64
	// QueueDepth is how many I/Os the device serves at once.
	QueueDepth int
	// ChunkBytes is the largest I/O the device serves in one piece; larger
	// ones are split and each piece queues on its own.
	ChunkBytes int64
	// PageCacheBytes is the node's page cache (0: none): the pages it last
	// wrote or read from the device, whose reads cost no device time.
	PageCacheBytes int64
	// CompactionBudget is HATS's per-node compaction budget (64 MiB/s on the
	// real device) scaled in time like the device, in bytes/s.
	CompactionBudget int64
	// RequestService is the node's processor time per client request (GET,
	// PUT, DEL) and Cores how many requests it serves at once (CPU): what
	// a GET costs when it hits the block cache or memtable, scaled in time
	// like the device. 0: requests cost only the real CPU they use.
	RequestService time.Duration
	Cores          int
}

func (p Profile) String() string { return p.Name }

// ChunkBytes of every profile: Pebble's own largest readahead
// (objstorageprovider.fileMaxReadaheadSize), so a compaction's read never
// spans more than one chunk of readahead.
const defaultChunk = 256 << 10

// The page cache of every profile (Profile.PageCacheBytes). Pebble's I/O
// is buffered, so on Linux every page a node writes or reads stays in
// memory until reclaimed, and a node's memory beyond its block cache is
// mostly page cache. Issue 14 sizes a node's memory a tenth of its data at
// most, so that most GETs miss: 256 KiB beside the experiments' 256 KiB
// block cache keeps both under a tenth of the 5.9-7.6 MiB of data per node
// of BENCHMARKS.md's HATS runs. Pages are not scaled: the device's time
// is, its sizes are not (4 KiB blocks, 256 KiB chunks).
const pageCacheBytes = 256 << 10

// RealCompactionBudget is HATS's compaction budget on a real device.
const RealCompactionBudget = 64 << 20 // bytes/s

// real devices' figures, before scaling.
type realDevice struct {
	readService, writeService     time.Duration
	readBandwidth, writeBandwidth float64 // bytes/s
	queueDepth                    int
}

// Intel SSD DC P4500 4.0 TB, datacenter NVMe (PCIe 3.0 x4), from Lenovo's
// product guide for the drive: random 4 KB read latency 115 µs, random write
// latency 20 µs, sequential read 3.2 GB/s, sequential write 1.8 GB/s,
// 645,000 random-read IOPS. Those IOPS need about 74 reads in flight
// (645,000 × 115 µs); the model keeps 4, because at 74 a scaled read would
// take 74/250 s = 0.3 s, six times the client's first timeout (50 ms), while
// at 4 it takes 16 ms and the device still serves reads in parallel.
var p4500 = realDevice{
	readService: 115 * time.Microsecond, writeService: 20 * time.Microsecond,
	readBandwidth: 3.2e9, writeBandwidth: 1.8e9,
	queueDepth: 4,
}

// A 7200 rpm datacenter HDD: average seek 8.2 ms (HGST Ultrastar 7K4000
// specification, reads and writes alike) plus half a rotation, 4.16 ms
// (Seagate Constellation ES.3 manual), so 12.36 ms per random I/O; sustained
// transfer 175 MB/s (the ES.3's outer zones). One actuator: queue depth 1
// (NCQ's reordering is not modelled).
var hdd7200 = realDevice{
	readService: 12360 * time.Microsecond, writeService: 12360 * time.Microsecond,
	readBandwidth: 175e6, writeBandwidth: 175e6,
	queueDepth: 1,
}

// Time scales. The whole system serves about 10k ops per CPU-second, so 16
// nodes on 2 cores get about 1,250 ops/s each; a node's device must saturate
// well below that for the device, not the CPU, to be the node's capacity.
// Each profile is scaled so that it serves about 250 random 4 KiB reads/s
// (QueueDepth / ReadService): the P4500 at queue depth 4 serves 34,800, so
// its times are stretched 140×; the HDD serves 81, so its times shrink 3×.
// Bandwidths divide by the same factor, so every ratio (service time to
// chunk transfer, read to write, budget to bandwidth) stays the real one.
const (
	ssdScale = 140
	hddScale = 1.0 / 3
)

// A storage node's processor time per client request, before scaling:
// 12.5 µs, that is 80,000 requests per core-second, within what this
// machine measured side by side for the two servers that answer GETs from
// memory (issue 16, BENCHMARKS.md "storage node"): a netdir node 55–105k
// GETs per node CPU-second (kernel UDP included), redis-server unpipelined
// 56–82k. One core per device: the model's devices serve 4 reads at once
// (QueueDepth), not the drives' 74, so the processor beside them is cut
// down alike. On the ssd a node then serves about 2.3 cache hits for one
// miss of device capacity (571 against 250 per second, scaled), so a
// skewed workload's hot keys, which stay in the block cache, load the hot
// nodes' processors, and its cold keys their devices, as on real nodes.
const (
	realRequestService = 12500 * time.Nanosecond
	realCores          = 1
)

func (r realDevice) scaled(name string, scale float64) Profile {
	return Profile{
		RequestService:   time.Duration(float64(realRequestService) * scale),
		Cores:            realCores,
		Name:             name,
		ReadService:      time.Duration(float64(r.readService) * scale),
		WriteService:     time.Duration(float64(r.writeService) * scale),
		ReadBandwidth:    r.readBandwidth / scale,
		WriteBandwidth:   r.writeBandwidth / scale,
		QueueDepth:       r.queueDepth,
		ChunkBytes:       defaultChunk,
		CompactionBudget: int64(RealCompactionBudget / scale),
		PageCacheBytes:   pageCacheBytes,
	}
}

// Parse returns the profile named by --device: "ssd", "hdd" or "none" (no
// device: I/O is counted and costs nothing, requests cost no processor
// time; the budget stays 64 MiB/s).
func Parse(name string) (Profile, error) {
	switch name {
	case "ssd":
		return p4500.scaled(name, ssdScale), nil
	case "hdd":
		return hdd7200.scaled(name, hddScale), nil
	case "none":
		return Profile{Name: name, QueueDepth: 1, ChunkBytes: defaultChunk, CompactionBudget: RealCompactionBudget}, nil
	}
	return Profile{}, fmt.Errorf("device %q: want ssd, hdd or none", name)
}
