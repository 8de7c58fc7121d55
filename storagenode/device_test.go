package storagenode

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/storagenode/device"
)

var t0 = time.Unix(1_000_000, 0)

// autoAdvance moves c to the earliest sleeper's deadline whenever one
// sleeps: the device's waits take no wall time, and its bookings keep
// virtual time. Register it before the node, so that it stops after. While
// a test holds the mutex it returns, the clock stands still.
func autoAdvance(t *testing.T, c *device.FakeClock) *sync.Mutex {
	stop, done := make(chan struct{}), make(chan struct{})
	hold := new(sync.Mutex)
	go func() {
		defer close(done)
		for {
			c.WaitSleepers(1)
			select {
			case <-stop:
				return
			default:
			}
			hold.Lock()
			c.AdvanceToNext()
			hold.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		go c.Sleep(time.Nanosecond) // wake the advancer
		<-done
		c.Advance(time.Hour)
	})
	return hold
}

// startOnDevice starts a one-node, one-tree node on device profile p and
// clock c, with a small block cache, and a client talking to it directly.
func startOnDevice(t *testing.T, p device.Profile, c device.Clock, tweaks ...func(*Options)) (*Node, *client.Client) {
	t.Helper()
	l, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := l.LocalAddr().String()
	l.Close()
	m, err := layout.New(layout.Config{PartitionBits: 2, Replicas: 1, Nodes: []layout.Node{{ID: 1, Addr: addr}}})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{ID: 1, Dir: filepath.Join(t.TempDir(), "n"), Layout: m, Workers: 1,
		CacheBytes: 2 << 20, MemTableBytes: 256 << 10, Device: p, clock: c}
	for _, tweak := range tweaks {
		tweak(&o)
	}
	n := startReady(t, o)
	cl, err := client.New(client.Options{Layout: m, Timeout: 2 * time.Second}) // no resends: the tests count reads
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return n, cl
}

func deviceKey(i int) []byte { return fmt.Appendf(nil, "key-%05d", i) }

// incompressible returns n random bytes, so that tables take their data's
// size on the device.
func incompressible(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// loadCold writes keys 0..n-1 with 1000-byte values through the node, then
// flushes and compacts its tree, so that the records are in tables whose
// blocks are in neither the block cache nor the page cache yet.
func loadCold(t *testing.T, n *Node, cl *client.Client, keys int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// as if written long before: nothing of it in the page cache
	n.dev.SetFree(true)
	defer n.dev.SetFree(false)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range keys {
		if _, err := cl.Put(ctx, deviceKey(i), incompressible(rng, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	db := n.trees[0].db
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(ctx, []byte{kindRecord}, []byte{kindRecord + 1}, true); err != nil {
		t.Fatal(err)
	}
}

// TestGetCacheHitCostsNoDeviceTime: a GET that misses the block cache pays
// device read time; the same GET again hits the cache and adds no read I/O.
func TestGetCacheHitCostsNoDeviceTime(t *testing.T) {
	clock := device.NewFakeClock(t0)
	autoAdvance(t, clock)
	hdd, _ := device.Parse("hdd")
	n, cl := startOnDevice(t, hdd, clock)
	loadCold(t, n, cl, 2000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	get := func() device.ClassStats {
		before := n.dev.Stats()
		if v, _, err := cl.Get(ctx, deviceKey(1234)); err != nil || len(v) != 1000 {
			t.Fatalf("get: %d bytes, %v", len(v), err)
		}
		return n.dev.Stats().Sub(before).Class[device.Read]
	}
	if first := get(); first.IOs == 0 || first.Busy < hdd.ReadService {
		t.Fatalf("first GET: %d read I/Os, %v busy: want a block read that missed the cache", first.IOs, first.Busy)
	}
	if second := get(); second.IOs != 0 || second.Busy != 0 {
		t.Fatalf("second GET: %d read I/Os, %v busy: want a cache hit, no device time", second.IOs, second.Busy)
	}

	// The node's stats and metrics show the device per class.
	st := n.Stats()
	if st.DeviceProfile != "hdd" || len(st.Device) != int(device.NumClasses) || st.Device[device.Read].Busy < hdd.ReadService ||
		st.Device[device.WAL].IOs == 0 || st.Trees[0].Device[device.Read].Busy != st.Device[device.Read].Busy {
		t.Fatalf("stats: %s %+v, tree %+v", st.DeviceProfile, st.Device, st.Trees[0].Device)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	busy, hits := map[string]float64{}, map[string]float64{}
	for _, mf := range mfs {
		into := map[string]map[string]float64{"netdir_node_device_busy_seconds_total": busy, "netdir_node_device_page_hits_total": hits}[mf.GetName()]
		for _, m := range mf.GetMetric() {
			if into != nil {
				into[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if busy["read"] != st.Device[device.Read].Busy.Seconds() {
		t.Fatalf("netdir_node_device_busy_seconds_total by class: %v", busy)
	}
	// The first GET opened the table: its later reads of the tail pages
	// its first read brought in were page hits.
	if len(hits) != int(device.NumClasses) || st.Device[device.Read].PageHits == 0 || hits["read"] != float64(st.Device[device.Read].PageHits) {
		t.Fatalf("netdir_node_device_page_hits_total by class %v, stats %+v: want the read class's page hits", hits, st.Device[device.Read])
	}
}

// TestReadLatencyIncludesDeviceTime: HATS's T, the mean read latency a node
// gossips, includes the device time of the reads that miss the cache. On
// the fake clock only device waits take time: T is zero on the free
// device, and on the HDD at least the device time its reads spent.
func TestReadLatencyIncludesDeviceTime(t *testing.T) {
	hdd, _ := device.Parse("hdd")
	none, _ := device.Parse("none")
	meanT := func(p device.Profile) time.Duration {
		clock := device.NewFakeClock(t0)
		autoAdvance(t, clock)
		n, cl := startOnDevice(t, p, clock)
		loadCold(t, n, cl, 2000)
		prev := n.GossipStats(gossip.NodeStats{})
		dev := n.dev.Stats()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 50 {
			if _, _, err := cl.Get(ctx, deviceKey(i*37)); err != nil {
				t.Fatal(err)
			}
		}
		s := n.GossipStats(prev)
		reads := n.dev.Stats().Sub(dev).Class[device.Read]
		tr := s.Trees[0]
		if tr.WindowReads != 50 {
			t.Fatalf("%s: %d reads in the window, want the 50 GETs", p, tr.WindowReads)
		}
		readTime := time.Duration(tr.ReadNanos - prev.Trees[0].ReadNanos)
		if p.ReadService > 0 && (reads.IOs < 50 || readTime < reads.Busy+reads.Wait) {
			t.Fatalf("%s: 50 GETs took %v, less than the device time of their %d read I/Os (%v busy, %v queued)",
				p, readTime, reads.IOs, reads.Busy, reads.Wait)
		}
		return tr.MeanReadLatency
	}
	free, slow := meanT(none), meanT(hdd)
	if free != 0 || slow < hdd.ReadService {
		t.Fatalf("T %v on no device, %v on the HDD: want 0 and at least its read service time %v", free, slow, hdd.ReadService)
	}
}

// TestGossipDeviceWindow: the gossiped device figures give utilisation and
// mean wait over the window since the previous version, and since start
// after a restart.
func TestGossipDeviceWindow(t *testing.T) {
	at := func(sec int, busyMs, waitMs, ios int) device.Stats {
		s := device.Stats{Elapsed: time.Duration(sec) * time.Second, QueueDepth: 2}
		s.Class[device.Compaction] = device.ClassStats{IOs: uint64(ios), Busy: time.Duration(busyMs) * time.Millisecond, Wait: time.Duration(waitMs) * time.Millisecond}
		return s
	}
	prev := deviceClasses(at(10, 1000, 100, 10), device.Stats{})
	cur := at(12, 2000, 400, 20)
	got := deviceClasses(cur, devicePrev(cur, prev, 2*time.Second))[device.Compaction]
	if got.Utilisation != 0.25 || got.MeanWait != 30*time.Millisecond || got.Busy != 2*time.Second || got.Class != "compaction" {
		t.Fatalf("window: %+v, want utilisation 1 s of 2×2 s, mean wait 300 ms over 10 I/Os", got)
	}
	restarted := at(2, 500, 0, 5)
	got = deviceClasses(restarted, devicePrev(restarted, prev, 2*time.Second))[device.Compaction]
	if got.Utilisation != 0.125 {
		t.Fatalf("after a restart: utilisation %v, want since start (0.5 s of 2×2 s)", got.Utilisation)
	}
}

// TestPacedCompactionFollowsReadShare runs two trees on one device, read
// 3:1, with pacing on (ReadShare, on the observed reads). Each tree gets the
// same backlog below L0 (a bottom level, and an overfull level above it
// from ingested tables), so every compaction of the window is paced: each
// tree's share of the compaction device time follows its read share within
// 0.1.
func TestPacedCompactionFollowsReadShare(t *testing.T) {
	// A device fast enough that pacing, not the device, bounds compaction.
	p := device.Profile{Name: "test", ReadService: 50 * time.Microsecond, WriteService: 50 * time.Microsecond,
		ReadBandwidth: 200e6, WriteBandwidth: 100e6, QueueDepth: 4}
	dev := device.New(p, nil)
	s := NewScheduler(1<<20, 16<<10, ReadShare{})
	cache := pebble.NewCache(4 << 20)
	defer cache.Unref()
	o := Options{MemTableBytes: 1 << 20, LBaseMaxBytes: 256 << 10, clock: device.RealClock{}}
	dir := t.TempDir()
	var trees []*tree
	for pos := range 2 {
		tr, err := openTree(dir, pos, cache, &o, s, dev, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.db.Close()
		trees = append(trees, tr)
	}
	defer s.Close() // first: the trees' compactions end unpaced

	const keys = 4000
	rng := rand.New(rand.NewPCG(3, 4))
	value := func() []byte { return (&record{Clean: version{Ver: 1, Val: incompressible(rng, 1000)}}).encode() }
	for _, tr := range trees {
		b := tr.db.NewBatch()
		for i := range keys {
			b.Set(recordKey(0, deviceKey(i)), value(), nil)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		b.Close()
		if err := tr.db.Compact(t.Context(), []byte{kindRecord}, []byte{kindRecord + 1}, true); err != nil {
			t.Fatal(err)
		}
	}

	stopReads, readsDone := make(chan struct{}), make(chan struct{})
	go func() { // tree 0 serves three reads for each of tree 1's
		defer close(readsDone)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; ; i++ {
			select {
			case <-stopReads:
				return
			case <-time.After(time.Millisecond):
			}
			trees[i%4/3].getRecord(0, deviceKey(rng.IntN(keys)))
		}
	}()
	defer func() { close(stopReads); <-readsDone }()

	// Four tables over the key space, every other key, land above the
	// bottom level: 2 MB in a level whose target is a tenth of the 4 MB
	// below it.
	for pos, tr := range trees {
		var paths []string
		for q := range 4 {
			path := filepath.Join(dir, fmt.Sprintf("ingest-%d-%d.sst", pos, q))
			f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: tr.db.FormatMajorVersion().MaxTableFormat()})
			for i := q * keys / 4; i < (q+1)*keys/4; i += 2 {
				if err := w.Set(recordKey(0, deviceKey(i)), value()); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, path)
		}
		if err := tr.db.Ingest(t.Context(), paths); err != nil {
			t.Fatal(err)
		}
	}

	snap := func() (busy, reads [2]float64) {
		for i, tr := range trees {
			busy[i] = float64(tr.fs.Stats().Class[device.Compaction].Busy)
			reads[i] = float64(tr.reads.Load())
		}
		return
	}
	time.Sleep(500 * time.Millisecond) // the rates follow the reads
	busy0, reads0 := snap()
	time.Sleep(3 * time.Second)
	busy1, reads1 := snap()
	for i, tr := range trees {
		if tr.l0Compactions.Load() != 0 || tr.deepL0Bytes.Load() != 0 {
			t.Errorf("tree %d ran compactions above its share (deep L0): %+v", i, tr.db.Metrics().Levels[0])
		}
		if debt := tr.db.Metrics().Compact.EstimatedDebt; debt == 0 {
			t.Errorf("tree %d ran out of compaction debt within the window", i)
		}
	}
	readShare := (reads1[0] - reads0[0]) / (reads1[0] - reads0[0] + reads1[1] - reads0[1])
	busyShare := (busy1[0] - busy0[0]) / (busy1[0] - busy0[0] + busy1[1] - busy0[1])
	t.Logf("read share %.3f, compaction device time share %.3f (%v and %v), rates %v",
		readShare, busyShare, time.Duration(busy1[0]-busy0[0]), time.Duration(busy1[1]-busy0[1]), s.Rates())
	if math.IsNaN(busyShare) || math.Abs(busyShare-readShare) > 0.1 {
		t.Fatalf("tree 0's share of compaction device time %.3f, read share %.3f: want within 0.1", busyShare, readShare)
	}
}

// TestProcessorBoundsCacheHits: on a profile with a processor, GETs that
// hit the memtable cost no device time but each pays the processor's
// time, so the node serves them no faster than Cores per RequestService;
// with no processor they take no virtual time.
func TestProcessorBoundsCacheHits(t *testing.T) {
	const gets, service, cores = 40, time.Millisecond, 2
	cpu := device.Profile{Name: "cpu", QueueDepth: 1, RequestService: service, Cores: cores}
	none, _ := device.Parse("none")
	for _, p := range []device.Profile{cpu, none} {
		clock := device.NewFakeClock(t0)
		autoAdvance(t, clock)
		n, cl := startOnDevice(t, p, clock)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cl.Put(ctx, []byte("hot"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		start, dev := clock.Now(), n.dev.Stats()
		errs := make(chan error, gets)
		for range gets {
			go func() {
				_, _, err := cl.Get(ctx, []byte("hot"))
				errs <- err
			}()
		}
		for range gets {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		elapsed := clock.Now().Sub(start)
		if reads := n.dev.Stats().Sub(dev).Class[device.Read]; reads.IOs != 0 {
			t.Fatalf("%s: %d device reads for memtable hits", p, reads.IOs)
		}
		st := n.Stats().CPU
		if p.RequestService == 0 {
			if elapsed != 0 || st != (device.CPUStats{}) {
				t.Fatalf("no processor: %d GETs took %v of virtual time, stats %+v; want none", gets, elapsed, st)
			}
			continue
		}
		if min := gets / cores * service; elapsed < min {
			t.Fatalf("%d GETs on %d cores of %v each took %v, want at least %v", gets, cores, service, elapsed, min)
		}
		if st.Requests != gets+1 || st.Busy != (gets+1)*service {
			t.Fatalf("processor stats %+v, want %d requests and %v busy", st, gets+1, (gets+1)*service)
		}
	}
}

// TestUncachedGetReadsTheDeviceOnce: a GET whose block is not cached costs
// about one device read, also while L0 holds many files whose key ranges
// span the key (a flush of a few writes spread over the key space): the
// bloom filters keep a point read from reading a data block of every
// overlapping table. Sizes are the experiments': 1000-byte values, a
// 256 KiB block cache, 256 KiB memtables, data 30× the cache.
func TestUncachedGetReadsTheDeviceOnce(t *testing.T) {
	clock := device.NewFakeClock(t0)
	autoAdvance(t, clock)
	ssd, _ := device.Parse("ssd")
	m, err := layout.New(layout.Config{PartitionBits: 2, Replicas: 1, Nodes: []layout.Node{{ID: 1, Addr: "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	const memtable = 256 << 10
	n, err := Start(Options{ID: 1, Dir: filepath.Join(t.TempDir(), "n"), Layout: m, Workers: 1,
		CacheBytes: 256<<10 + 2*memtable, MemTableBytes: memtable, LBaseMaxBytes: 2 << 20, Device: ssd, clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	tr := n.trees[0]
	rng := rand.New(rand.NewPCG(1, 2))
	const keys = 8000
	put := func(b *pebble.Batch, i int, ver uint64) {
		r := record{Clean: version{Ver: ver, Val: incompressible(rng, 1000)}}
		b.Set(recordKey(0, deviceKey(i)), r.encode(), nil)
	}
	b := tr.db.NewBatch()
	for i := range keys {
		put(b, i, 1)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := tr.db.Compact(ctx, []byte{kindRecord}, []byte{kindRecord + 1}, true); err != nil {
		t.Fatal(err)
	}
	// L0 files that each span the whole key range.
	const l0Files = 12
	for f := range l0Files {
		b := tr.db.NewBatch()
		for i := 0; i < keys; i += keys / 20 {
			put(b, i+f, 2)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := tr.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if l0 := tr.db.Metrics().Levels[0].TablesCount; l0 < l0Files/2 {
		t.Fatalf("%d L0 files, want at least %d spanning the keys", l0, l0Files/2)
	}

	before := n.dev.Stats()
	const gets = 1000
	for range gets {
		if _, err := tr.getRecord(0, deviceKey(rng.IntN(keys))); err != nil {
			t.Fatal(err)
		}
	}
	reads := n.dev.Stats().Sub(before).Class[device.Read].IOs
	// The cache holds about 4 % of the data blocks; the first GET that
	// reaches each new L0 table also reads its filter and index blocks.
	if perGet := float64(reads) / gets; perGet < 0.8 || perGet > 1.2 {
		t.Fatalf("%.2f device reads per uncached GET over %d L0 files, want about 1", perGet, tr.db.Metrics().Levels[0].TablesCount)
	}
}
