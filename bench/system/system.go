// Package system runs netdir's routing policies side by side for `netdir
// demo`, `netdir bench` and tests, on the in-process system that package
// cluster assembles over loopback:
//
//   - N storage nodes (cluster.StartNode), each with Pebble trees in a
//     temporary directory on an emulated storage device (Config.Device,
//     storagenode/device), whose time is the node's capacity: block reads
//     that miss the cache, WAL writes, flushes and compactions share its
//     queue, so that a skewed workload overloads the nodes that hold the hot
//     keys long before the machine runs out of CPU, and a compacting node is
//     slow for its reads. Config.Capacity adds a token bucket on requests
//     (storagenode.Options.MaxOps), the capacity model before the device.
//     Each node reports its hot keys and tree stats to the controller's gRPC
//     API every round and gossips its stats with memberlist, as in a
//     deployment;
//   - per policy run, a fresh plane (cluster.StartPlane): the software data
//     plane with the routing policy of the run (directory.Config.Policy) on
//     one fixed loopback address, and a controller on fixed API and gossip
//     addresses that programs it over real P4Runtime with the P4Info
//     embedded in package p4, or through the model's Go control API if
//     asked (Config.P4Info); its hot-key loop promotes keys at chain heads
//     over UDP (controller.UDPStorage);
//   - clients (package client) with the switch as their service address, or,
//     for the client-side policy c3, reading straight from the chain member
//     that C3's ranking picks.
//
// Measurements: per-node load is the delta of each node's own request counters
// (GET+PUT+DEL admitted, storagenode.Stats); per-node latency is the mean
// response time of reads as the clients see it, by serving node; the directory
// hit rate is the switch's hits over hits plus misses.
package system

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	p4config "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/p4"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/storagenode/device"
	"github.com/netdir/netdir/wire"
)

// Defaults of Config.
const (
	DefaultNodes = 8
	// DefaultBlockCache is the block cache a node keeps for its trees' data
	// on a device, beside its memtables (Config.BlockCache). The data a
	// node holds must be at least ten times it for most GETs to miss it
	// (BENCHMARKS.md).
	DefaultBlockCache = 256 << 10
	// DefaultMemTable is each tree's memtable on a device: small, so that
	// the workloads' own writes flush and compact within a run.
	DefaultMemTable = 256 << 10
	DefaultReplicas = layout.DefaultReplicas
	// DefaultPartitionBits gives 1024 partitions, as in a deployment.
	DefaultPartitionBits = layout.DefaultPartitionBits
	DefaultRound         = 500 * time.Millisecond
	DefaultClients       = 4
	// DefaultFailureTimeout is Config.FailureTimeout's default.
	DefaultFailureTimeout = 10 * time.Second
	// hotShare is the share of the cluster's capacity per round that makes
	// a key hot (Config.PromoteMin).
	hotShare = 0.005
)

// Config sizes the system.
type Config struct {
	Nodes         int  // storage nodes (default 8)
	Replicas      int  // chain length R (default min(3, Nodes))
	PartitionBits uint // log2 partitions (default 10)
	// Device is every node's emulated storage device (device.Parse; the
	// zero value is "none": I/O is counted and free).
	Device device.Profile
	// BlockCache and MemTable size each node's Pebble memory on a device
	// (defaults DefaultBlockCache and DefaultMemTable): the node's cache is
	// BlockCache plus the R × 2 memtables that Pebble reserves out of it.
	// Without a device the nodes keep storagenode's defaults.
	BlockCache, MemTable int64
	// Capacity is a token bucket on each node's client requests/s
	// (storagenode.Options.MaxOps); 0 or negative: none, the device alone.
	Capacity float64
	// Dir is the data root; empty makes a temporary directory that Close
	// removes, in /dev/shm (tmpfs) where there is one: N nodes × R trees all
	// syncing their WALs to one shared disk would make the disk, not the
	// emulated capacity, the bottleneck of a one-machine run (and a different
	// one on every machine).
	Dir string
	// P4Info is the path of a P4Info text proto for the controller to program
	// the switch with over P4Runtime. Empty: the P4Info embedded in package p4
	// (p4/build/netdir.p4info.txtpb). "none": drive the switch through the
	// model's Go control API instead (no P4Runtime).
	P4Info string
	// Round is the controller's hot-key round (default 500 ms); the nodes
	// report hot keys at the same period.
	Round time.Duration
	// PromoteMin is the requests per round that make a key hot. Default:
	// 0.5% of the cluster's nominal capacity per round (at least 2; a
	// node's is its token bucket, else its device's random reads/s), the
	// controller's default of 16 requests per round scaled down to the
	// emulated rates (16 would be 4–10% of all requests here, and only one
	// or two keys would ever be promoted); the controller's default when the
	// capacity is unlimited.
	PromoteMin uint64
	Clients    int // client sockets shared by the workers (default 4)
	// Log receives the components' logs (default: discarded).
	Log *slog.Logger
	// Progress, if set, receives one human-readable line per setup step.
	Progress func(string)
	// NodeOptions, if set, adjusts every node's options last (experiments:
	// compaction budget, LSM level sizes).
	NodeOptions func(*storagenode.Options)
	// Template, if set, is a data root that PreloadTemplate filled for a
	// system of this shape: Start copies it into its (empty) data root, so
	// that the nodes start with the template's keys (Fresh).
	Template string
	// FailureTimeout is the gossip failure timeout after which the
	// controller splices a silent node out of its chains (default
	// DefaultFailureTimeout). No node fails in a policy run, but on a
	// loaded machine gossip probes between the in-process members can go
	// unanswered for a second: at gossip's own 1 s, runs on the device
	// lost a node to a false suspicion (a new epoch, stale-epoch replies,
	// throughput near zero) whenever the load average passed about 5.
	FailureTimeout time.Duration
	// FreePreload turns the devices' time off during Preload (setup, as if
	// the data had been written long before): on the ssd each preload
	// write syncs three WALs queued behind the preload's own flushes and
	// compactions, about 150 keys/s for 8 nodes; free, seconds for 10,000
	// keys. The runs after it always pay the device.
	FreePreload bool
}

// System is a running in-process netdir.
type System struct {
	cfg    Config
	dir    string
	ownDir bool
	cl     *cluster.Cluster
	schema *p4rt.Schema
	p4path string
	p4err  error
	direct *client.Client // to the nodes, for preload and cleanup
	log    *slog.Logger

	// discard: the system is dropped after one run (Fresh), so a plane's
	// Close leaves the promotions and copies to it: demoting every key
	// through nodes still busy with the run's compactions can outlast the
	// clean-up's 30 s, and it would measure nothing.
	discard bool

	mu   sync.Mutex
	keys map[wire.KeyHash][]byte // every key ever promoted, for cleanup
}

func (c *Config) defaults() error {
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Nodes < 1 || c.Nodes > 32 {
		return fmt.Errorf("system: %d nodes: want 1..32 (one rack)", c.Nodes)
	}
	if c.Replicas == 0 {
		c.Replicas = min(DefaultReplicas, c.Nodes)
	}
	if c.Replicas < 1 || c.Replicas > c.Nodes || c.Replicas > layout.MaxReplicas {
		return fmt.Errorf("system: %d replicas for %d nodes", c.Replicas, c.Nodes)
	}
	if c.PartitionBits == 0 {
		c.PartitionBits = DefaultPartitionBits
	}
	if c.Capacity < 0 {
		c.Capacity = 0 // unlimited for storagenode
	}
	if c.Device == (device.Profile{}) {
		c.Device, _ = device.Parse("none")
	}
	if c.onDevice() {
		if c.BlockCache <= 0 {
			c.BlockCache = DefaultBlockCache
		}
		if c.MemTable <= 0 {
			c.MemTable = DefaultMemTable
		}
	}
	if c.Round <= 0 {
		c.Round = DefaultRound
	}
	if rate := c.nodeRate(); c.PromoteMin == 0 && rate > 0 {
		c.PromoteMin = uint64(max(2, math.Ceil(hotShare*float64(c.Nodes)*rate*c.Round.Seconds())))
	}
	if c.Clients <= 0 {
		c.Clients = DefaultClients
	}
	if c.FailureTimeout <= 0 {
		c.FailureTimeout = DefaultFailureTimeout
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// onDevice reports whether the nodes' device costs time (a profile other
// than none).
func (c *Config) onDevice() bool { return c.Device.ReadService > 0 }

// nodeRate is a node's nominal requests/s, for sizing PromoteMin: the
// token bucket's, else its processor's (device.CPU: what it serves from
// memory), else the device's random reads/s (QueueDepth / ReadService),
// else 0 (unknown).
func (c *Config) nodeRate() float64 {
	switch {
	case c.Capacity > 0:
		return c.Capacity
	case c.cpuRate() > 0:
		return c.cpuRate()
	case c.onDevice():
		return c.deviceReads()
	}
	return 0
}

// cpuRate is the requests/s a node's processor serves (Cores /
// RequestService), 0 without one.
func (c *Config) cpuRate() float64 {
	if cpu := device.NewCPU(c.Device); cpu != nil {
		return cpu.Rate()
	}
	return 0
}

// deviceReads is the random 4 KiB reads/s a node's device serves.
func (c *Config) deviceReads() float64 {
	d := c.Device
	per := d.ReadService
	if d.ReadBandwidth > 0 {
		per += time.Duration(4096 / d.ReadBandwidth * float64(time.Second))
	}
	if per <= 0 {
		return 0
	}
	return float64(d.QueueDepth) / per.Seconds()
}

// boundRate is what bounds a node's rate other than its reads' latency,
// for the controller's coarse loop (sched.NodeStats.Capacity): the token
// bucket and the processor, whichever is less; 0 if neither.
func (c *Config) boundRate() float64 {
	r := c.Capacity
	if cpu := c.cpuRate(); cpu > 0 && (r <= 0 || cpu < r) {
		r = cpu
	}
	return r
}

// NodeCapacity is a node's nominal requests/s for a workload whose GETs
// read the device readsPerGet times each (bench.Run.DeviceReadsPerGet):
// the least of its token bucket, its processor and its device's random
// reads at that miss rate; 0 if nothing bounds it. N times it is the ideal
// throughput of a balanced cluster (writes' device time not counted).
func (s *System) NodeCapacity(readsPerGet float64) float64 {
	c := &s.cfg
	r := c.boundRate()
	if dev := c.deviceReads(); dev > 0 && readsPerGet > 0 {
		if d := dev / readsPerGet; r <= 0 || d < r {
			r = d
		}
	}
	return r
}

func (s *System) progress(format string, args ...any) {
	if s.cfg.Progress != nil {
		s.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// Start starts the storage nodes and reserves the addresses of the switch
// and the controller. Planes start per policy run (StartPlane, Run).
// embeddedSchema is the P4Info embedded in package p4.
func embeddedSchema() (*p4rt.Schema, error) {
	info := &p4config.P4Info{}
	if err := prototext.Unmarshal(p4.P4Info, info); err != nil {
		return nil, fmt.Errorf("system: embedded P4Info: %w", err)
	}
	return p4rt.NewSchema(info), nil
}

func Start(ctx context.Context, cfg Config) (*System, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := &System{cfg: cfg, log: cfg.Log, keys: map[wire.KeyHash][]byte{}}
	switch cfg.P4Info {
	case "none":
		s.p4err = errors.New("disabled (P4Info \"none\")")
	case "":
		s.p4path = "embedded p4/build/netdir.p4info.txtpb"
		var err error
		if s.schema, err = embeddedSchema(); err != nil {
			return nil, err
		}
	default:
		s.p4path = cfg.P4Info
		if s.schema, s.p4err = p4rt.LoadSchema(cfg.P4Info); s.p4err != nil {
			return nil, s.p4err
		}
	}
	if s.schema != nil {
		s.progress("control path: the controller programs the switch over P4Runtime gRPC (P4Info: %s)", s.p4path)
	} else {
		s.progress("control path: the switch's Go control API (P4Runtime %v)", s.p4err)
	}
	s.dir = cfg.Dir
	if s.dir == "" {
		d, err := os.MkdirTemp(tempRoot(), "netdir-system-")
		if err != nil {
			return nil, err
		}
		s.dir, s.ownDir = d, true
	}
	if cfg.Template != "" {
		if err := os.CopyFS(s.dir, os.DirFS(cfg.Template)); err != nil {
			s.Close()
			return nil, fmt.Errorf("system: copy template %s: %w", cfg.Template, err)
		}
	}
	s.progress("starting %d storage nodes (R=%d, %d partitions, %s, Pebble under %s)",
		cfg.Nodes, cfg.Replicas, 1<<cfg.PartitionBits, cfg.capacityName(), s.dir)
	type res struct {
		cl  *cluster.Cluster
		err error
	}
	ch := make(chan res, 1)
	go func() {
		cl, err := cluster.Start(cluster.Options{
			N: cfg.Nodes, R: cfg.Replicas, PartitionBits: cfg.PartitionBits, Epoch: 1,
			Dir: s.dir, Controller: true, Round: cfg.Round, FailureTimeout: cfg.FailureTimeout,
			Node: func(o *storagenode.Options) {
				o.MaxOps = cfg.Capacity
				o.Device = cfg.Device
				if cfg.onDevice() {
					o.MemTableBytes = uint64(cfg.MemTable)
					o.CacheBytes = cfg.BlockCache + int64(cfg.Replicas)*2*cfg.MemTable
				}
				o.Logger = cfg.Log.With("component", "node")
				if cfg.NodeOptions != nil {
					cfg.NodeOptions(o)
				}
			},
		})
		ch <- res{cl, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			s.Close()
			return nil, r.err
		}
		s.cl = r.cl
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.cl != nil {
				r.cl.Close()
			}
		}()
		s.Close()
		return nil, ctx.Err()
	}
	var err error
	if s.direct, err = s.cl.Client(clientOptions("")); err != nil {
		s.Close()
		return nil, err
	}
	s.progress("storage nodes ready: %s", s.nodeList())
	if cfg.PromoteMin > 0 {
		s.progress("controller: hot-key rounds of %s; a key is hot at %d requests per round", cfg.Round, cfg.PromoteMin)
	}
	return s, nil
}

func (s *System) nodeList() string {
	var out string
	for i, id := range s.cl.Layout.Nodes() {
		a, _ := s.cl.Layout.Addr(id)
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%d@%s", id, a)
	}
	return out
}

// Close stops everything and removes a temporary data directory.
func (s *System) Close() error {
	if s.direct != nil {
		s.direct.Close()
	}
	if s.cl != nil {
		s.cl.Close()
	}
	if s.ownDir {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// Layout is the cluster's layout.
func (s *System) Layout() *layout.Map { return s.cl.Layout }

// N is the number of storage nodes.
func (s *System) N() int { return s.cl.N() }

// Capacity is each node's token bucket in requests/s (0: none).
func (s *System) Capacity() float64 { return s.cfg.Capacity }

// Device is the nodes' device profile.
func (s *System) Device() device.Profile { return s.cfg.Device }

// CapacityName says what limits a node: its device and cache, and the
// token bucket if there is one.
func (s *System) CapacityName() string { return s.cfg.capacityName() }

func (c *Config) capacityName() string {
	out := "device none (no I/O cost)"
	if c.onDevice() {
		d := c.Device
		out = fmt.Sprintf("device %s (%d slots, read %s, %.1f MB/s; ~%.0f random reads/s; compaction budget %.2f MiB/s), block cache %d KiB, memtables %d KiB",
			d.Name, d.QueueDepth, d.ReadService.Round(100*time.Microsecond), d.ReadBandwidth/1e6, c.deviceReads(),
			float64(d.CompactionBudget)/(1<<20), c.BlockCache>>10, c.MemTable>>10)
		if cpu := c.cpuRate(); cpu > 0 {
			out += fmt.Sprintf(", processor %s per request on %d core(s) (~%.0f requests/s)", d.RequestService.Round(10*time.Microsecond), d.Cores, cpu)
		}
	}
	if c.Capacity > 0 {
		out += fmt.Sprintf(", token bucket %.0f ops/s", c.Capacity)
	}
	return out
}

// P4Runtime reports whether the controller drives the switch over P4Runtime,
// and why not when it does not.
func (s *System) P4Runtime() (bool, error) { return s.schema != nil, s.p4err }

// Node is storage node i (0-based; id i+1).
func (s *System) Node(i int) *storagenode.Node { return s.cl.Node(i) }

// nodeCounts reads each node's cumulative client requests admitted, GETs
// among them, block reads from its device (reads that missed the block
// cache), and its processor's and device's time.
func (s *System) nodeCounts() (requests, gets, deviceReads []uint64, times []nodeTime) {
	requests = make([]uint64, s.cl.N())
	gets = make([]uint64, s.cl.N())
	deviceReads = make([]uint64, s.cl.N())
	times = make([]nodeTime, s.cl.N())
	for i := range requests {
		if n := s.cl.Node(i); n != nil {
			st := n.Stats()
			requests[i], gets[i] = st.Gets+st.Puts+st.Dels-st.GroupedWrites, st.Gets // a write group once (bench.NodeStat)
			times[i] = nodeTime{cpuRequests: st.CPU.Requests, cpuBusy: st.CPU.Busy, cpuWait: st.CPU.Wait,
				slots: max(1, s.cfg.Device.QueueDepth)}
			for _, c := range st.Device {
				if c.Class == device.Read.String() {
					deviceReads[i] = c.IOs
				}
				times[i].deviceBusy += c.Busy
			}
		}
	}
	return requests, gets, deviceReads, times
}

// nodeTime is a node's cumulative processor and device time.
type nodeTime struct {
	cpuRequests      uint64
	cpuBusy, cpuWait time.Duration
	deviceBusy       time.Duration
	slots            int // the device's I/Os at once
}

// stat fills n's processor and device figures over the dt from prev to t.
func (t nodeTime) stat(prev nodeTime, dt time.Duration, n *bench.NodeStat) {
	if dt <= 0 {
		return
	}
	n.CPUBusy = float64(t.cpuBusy-prev.cpuBusy) / float64(dt)
	if r := t.cpuRequests - prev.cpuRequests; r > 0 {
		n.CPUWait = (t.cpuWait - prev.cpuWait) / time.Duration(r)
	}
	n.DeviceBusy = float64(t.deviceBusy-prev.deviceBusy) / float64(dt) / float64(t.slots)
}

// Preload writes the workload's keys straight to their chain heads with
// workers goroutines, calling progress (if set) about once a second. Its
// compactions run unthrottled: on a device the paced budget is a small
// part of its bandwidth, and the preload is not measured. With
// Config.FreePreload the devices charge no time while it runs.
func (s *System) Preload(ctx context.Context, src *bench.Source, workers int, progress func(done, total int64)) error {
	s.SetCompactionBudget(storagenode.Unthrottled)
	defer s.SetCompactionBudget(0)
	if s.cfg.FreePreload {
		s.setDevicesFree(true)
		defer s.setDevicesFree(false)
	}
	return preload(ctx, s.direct, src, workers, progress)
}

func (s *System) setDevicesFree(free bool) {
	for i := range s.N() {
		if n := s.Node(i); n != nil {
			n.SetDeviceFree(free)
		}
	}
}

// preload writes the workload's keys through t with workers goroutines,
// calling progress (if set) about once a second.
func preload(ctx context.Context, t bench.Target, src *bench.Source, workers int, progress func(done, total int64)) error {
	total := src.Workload().Keys
	ct := &countingTarget{t: t}
	done := make(chan struct{})
	var wg sync.WaitGroup
	if progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					progress(ct.n.Load(), total)
				}
			}
		}()
	}
	failed, first, err := bench.Load(ctx, ct, src, workers, 10*time.Second)
	close(done)
	wg.Wait()
	if progress != nil {
		progress(ct.n.Load(), total)
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("system: preload: %d of %d puts failed; the first: %w", failed, total, first)
	}
	return nil
}

type countingTarget struct {
	t bench.Target
	n atomic.Int64
}

func (c *countingTarget) Get(ctx context.Context, key []byte) ([]byte, uint64, error) {
	return c.t.Get(ctx, key)
}

func (c *countingTarget) Put(ctx context.Context, key, val []byte) (uint64, error) {
	v, err := c.t.Put(ctx, key, val)
	if err == nil {
		c.n.Add(1)
	}
	return v, err
}

// Client timeouts. On loopback nothing is lost unless a socket buffer
// overflows, while an overloaded node (the point of the exercise) answers in
// hundreds of milliseconds; the client library's defaults (50 ms, doubling
// to 800 ms) would resend queued requests and add load to exactly the nodes
// that have too much. So the system's clients wait longer before a retry.
const (
	clientTimeout    = time.Second
	clientMaxTimeout = 4 * time.Second
)

func clientOptions(service string) client.Options {
	return client.Options{Service: service, Timeout: clientTimeout, MaxTimeout: clientMaxTimeout}
}

// tempRoot is where Start makes its temporary data directory: /dev/shm when
// it is a writable directory (Linux tmpfs), else the system's temp directory.
func tempRoot() string {
	const shm = "/dev/shm"
	if st, err := os.Stat(shm); err == nil && st.IsDir() {
		if f, err := os.CreateTemp(shm, ".netdir-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return shm
		}
	}
	return os.TempDir()
}
