package storagenode_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// loadgen sends requests in batches (sendmmsg) keeping up to window in
// flight, reads replies in batches (recvmmsg), and counts OK replies. A
// stalled window (lost packets) is refilled after 50 ms.
func loadgen(b *testing.B, to netip.AddrPort, total, window int, mk func(i int, reqid uint64) []byte) (ok, errs int64) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadBuffer(8 << 20)
	conn.SetWriteBuffer(8 << 20)
	pc := ipv4.NewPacketConn(conn)
	var inflight, done, okN, errN atomic.Int64
	seen := make([]atomic.Bool, total+1)
	stop := make(chan struct{})
	go func() {
		msgs := make([]ipv4.Message, 64)
		for i := range msgs {
			msgs[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		for {
			conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			k, err := pc.ReadBatch(msgs, 0)
			if err != nil {
				select {
				case <-stop:
					return
				default:
				}
				inflight.Store(0) // no reply for 50 ms: refill the window
				continue
			}
			for i := 0; i < k; i++ {
				m := msgs[i].Buffers[0][:msgs[i].N]
				if len(m) < wire.HeaderLen {
					continue
				}
				seq := wire.Frame(m).ReqID() & 0xffffffff
				if seq == 0 || seq > uint64(total) || seen[seq].Swap(true) {
					continue // a duplicate reply (e.g. to a retransmitted write)
				}
				if wire.Frame(m).Op() != wire.OpErr {
					okN.Add(1)
				} else {
					errN.Add(1)
					codes[wire.Frame(m).Code()%16].Add(1)
				}
				inflight.Add(-1)
				done.Add(1)
			}
		}
	}()
	dst := net.UDPAddrFromAddrPort(to)
	out := make([]ipv4.Message, 32)
	sent := 0
	deadline := time.Now().Add(60 * time.Second)
	last, lastDone := time.Now(), int64(0)
	for done.Load() < int64(total) && time.Now().Before(deadline) {
		if d := done.Load(); d != lastDone {
			last, lastDone = time.Now(), d
		}
		if sent >= total || inflight.Load() >= int64(window) {
			time.Sleep(20 * time.Microsecond)
			if sent >= total && time.Since(last) > 2*time.Second {
				break // the rest is lost
			}
			continue
		}
		n := min(len(out), total-sent, window-int(inflight.Load()))
		for i := 0; i < n; i++ {
			out[i] = ipv4.Message{Buffers: [][]byte{mk(sent+i, rand.Uint64()<<32|uint64(sent+i+1))}, Addr: dst}
		}
		inflight.Add(int64(n))
		for off := 0; off < n; {
			k, err := pc.WriteBatch(out[off:n], 0)
			if err != nil {
				b.Fatal(err)
			}
			off += k
		}
		sent += n
	}
	close(stop)
	return okN.Load(), errN.Load()
}

// codes counts ERR codes seen by load generators.
var codes [16]atomic.Int64

func reportCodes(b *testing.B) {
	for c := range codes {
		if n := codes[c].Swap(0); n > 0 {
			b.ReportMetric(float64(n), "err-"+wire.Code(c).String())
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func benchCluster(b *testing.B, n, r int) *cluster.Cluster {
	c, err := cluster.Start(cluster.Options{N: n, R: r, Dir: b.TempDir(), PartitionBits: 6, Node: func(o *storagenode.Options) {
		o.Workers = storagenode.DefaultWorkers
		if w, err := strconv.Atoi(os.Getenv("NETDIR_BENCH_WORKERS")); err == nil && w > 0 {
			o.Workers = w
		}
		o.CacheBytes = storagenode.DefaultCacheBytes
		o.MemTableBytes = storagenode.DefaultMemTableBytes
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

const benchKeys = 10000

func preload(b *testing.B, c *cluster.Cluster) [][]byte {
	cl, err := c.Client(client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	keys := make([][]byte, benchKeys)
	val := make([]byte, 100)
	ctx := context.Background()
	done := make(chan error, 16)
	for w := range 16 {
		go func() {
			for i := w; i < benchKeys; i += 16 {
				keys[i] = []byte(fmt.Sprintf("bench-key-%08d", i))
				if _, err := cl.Put(ctx, keys[i], val); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 16 {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	return keys
}

// BenchmarkNodeGet: GETs of 100-byte values over 10k keys at one node
// (R=1), pipelined with batched send and receive. ops/cpu-s counts the CPU
// of the whole process: node and load generator together.
func BenchmarkNodeGet(b *testing.B) {
	c := benchCluster(b, 1, 1)
	keys := preload(b, c)
	pkts := make([][]byte, len(keys))
	for i, k := range keys {
		p := wire.Packet{Header: wire.Header{Op: wire.OpGet, KeyHash: wire.HashKey(k)}, Key: k}
		pkts[i], _ = p.AppendEncode(nil)
	}
	to := addrOf(c, 1)
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	ok, errs := loadgen(b, to, b.N, 512, func(i int, id uint64) []byte {
		p := append([]byte(nil), pkts[i%len(pkts)]...)
		wire.Frame(p).SetStamp(0)
		wire.Frame(p).SetReqID(id)
		return p
	})
	el, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	st := c.Node(0).Stats()
	b.ReportMetric(float64(ok)/el.Seconds(), "ops/s")
	b.ReportMetric(float64(ok)/cpu.Seconds(), "ops/cpu-s")
	b.ReportMetric(float64(errs), "errs")
	b.ReportMetric(float64(st.Trees[0].P99ReadLatency.Microseconds()), "pebble-p99-µs")
	b.ReportMetric(float64(st.Trees[0].MeanReadLatency.Nanoseconds())/1000, "pebble-mean-µs")
	b.ReportMetric(rssMiB(), "rss-MiB")
	reportCodes(b)
}

// BenchmarkNodePut: PUTs of 100-byte values, each acknowledged only after
// every member's synced WAL. R=1 is one node; R=3 a three-node chain. The
// load generator keeps 256 writes in flight per chain head, or, with
// writers=64, 64 in all (split over the heads).
func BenchmarkNodePut(b *testing.B) {
	for _, bc := range []struct {
		r, writers int
	}{{1, 0}, {3, 0}, {3, 64}} {
		r := bc.r
		name := fmt.Sprintf("R=%d", r)
		if bc.writers > 0 {
			name += fmt.Sprintf("/writers=%d", bc.writers)
		}
		b.Run(name, func(b *testing.B) {
			c := benchCluster(b, r, r)
			val := make([]byte, 100)
			keys := make([][]byte, benchKeys)
			for i := range keys {
				keys[i] = []byte(fmt.Sprintf("bench-key-%08d", i))
			}
			b.ResetTimer()
			cpu0, t0 := cpuTime(), time.Now()
			var okN int64
			var errN int64
			// Writes go to each key's head; split the load per head.
			type target struct {
				to   netip.AddrPort
				pkts [][]byte
			}
			heads := map[wire.NodeID]*target{}
			for _, k := range keys {
				h := wire.HashKey(k)
				id := c.Layout.ChainOf(h)[0]
				t := heads[id]
				if t == nil {
					t = &target{to: addrOf(c, id)}
					heads[id] = t
				}
				p := wire.Packet{Header: wire.Header{Op: wire.OpPut, KeyHash: h}, Key: k, Value: val}
				pk, _ := p.AppendEncode(nil)
				t.pkts = append(t.pkts, pk)
			}
			window := 256
			if bc.writers > 0 {
				window = max(1, bc.writers/len(heads))
			}
			res := make(chan [2]int64, len(heads))
			for _, t := range heads {
				go func() {
					share := b.N * len(t.pkts) / len(keys)
					o, e := loadgen(b, t.to, max(share, 1), window, func(i int, id uint64) []byte {
						p := append([]byte(nil), t.pkts[i%len(t.pkts)]...)
						wire.Frame(p).SetReqID(id)
						return p
					})
					res <- [2]int64{o, e}
				}()
			}
			for range heads {
				x := <-res
				okN += x[0]
				errN += x[1]
			}
			el, cpu := time.Since(t0), cpuTime()-cpu0
			b.StopTimer()
			b.ReportMetric(float64(okN)/el.Seconds(), "ops/s")
			b.ReportMetric(float64(okN)/cpu.Seconds(), "ops/cpu-s")
			b.ReportMetric(float64(errN), "errs")
			b.ReportMetric(rssMiB(), "rss-MiB")
			reportCodes(b)
			if os.Getenv("NETDIR_BENCH_DEBUG") != "" {
				for i := range c.N() {
					st := c.Node(i).Stats()
					st.Trees = nil
					b.Logf("%+v", st)
				}
			}
		})
	}
}

// procCPU is a process's user+system CPU time from /proc/<pid>/stat.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

func procRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkNodeGetProcess: the same GET load against a `netdir node`
// process (R=1, default options, a cluster key as in a deployment), so that the node's own CPU is measured
// apart from the load generator's: ops/node-cpu-s is GETs per CPU-second of
// the node alone. The keys are loaded by 64 concurrent writers first.
func BenchmarkNodeGetProcess(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "netdir")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/netdir/netdir/cmd/netdir").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	l, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	addr := l.LocalAddr().String()
	l.Close()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("replicas: 1\npartition_bits: 6\nnodes:\n  - {id: 1, addr: "+addr+"}\n"), 0o644)
	keyFile := filepath.Join(dir, "cluster.key")
	os.WriteFile(keyFile, nodeauth.FormatKeys(nodeauth.GenerateSecret(), nil), 0o600)
	args := []string{"node", "--id", "1", "--data", filepath.Join(dir, "data"), "--config", cfg, "--cluster-key-file", keyFile}
	if w := os.Getenv("NETDIR_BENCH_WORKERS"); w != "" {
		args = append(args, "--workers", w)
	}
	cmd := exec.Command(bin, args...)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	buf := make([]byte, 256)
	out.Read(buf) // "listening"
	m, err := layout.Parse([]byte("replicas: 1\npartition_bits: 6\nnodes:\n  - {id: 1, addr: " + addr + "}\n"))
	if err != nil {
		b.Fatal(err)
	}
	cl, err := client.New(client.Options{Layout: m})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	// NETDIR_BENCH_KEYS sizes the data set (default 10,000 keys): the
	// node's RSS at 1M keys of 100 B is issue 16's memory figure.
	nkeys := benchKeys
	if k, err := strconv.Atoi(os.Getenv("NETDIR_BENCH_KEYS")); err == nil && k > 0 {
		nkeys = k
	}
	pkts := make([][]byte, nkeys)
	val := make([]byte, 100)
	const loaders = 64
	loaded := make(chan error, loaders)
	for w := range loaders {
		go func() {
			for i := w; i < nkeys; i += loaders {
				k := []byte(fmt.Sprintf("bench-key-%08d", i))
				if _, err := cl.Put(context.Background(), k, val); err != nil {
					loaded <- err
					return
				}
				p := wire.Packet{Header: wire.Header{Op: wire.OpGet, KeyHash: wire.HashKey(k)}, Key: k}
				pkts[i], _ = p.AppendEncode(nil)
			}
			loaded <- nil
		}()
	}
	for range loaders {
		if err := <-loaded; err != nil {
			b.Fatal(err)
		}
	}
	to := netip.MustParseAddrPort(addr)
	pid := cmd.Process.Pid
	b.ResetTimer()
	cpu0, t0 := procCPU(pid), time.Now()
	ok, errs := loadgen(b, to, b.N, 512, func(i int, id uint64) []byte {
		p := append([]byte(nil), pkts[i%len(pkts)]...)
		wire.Frame(p).SetReqID(id)
		return p
	})
	el, cpu := time.Since(t0), procCPU(pid)-cpu0
	b.StopTimer()
	b.ReportMetric(float64(ok)/el.Seconds(), "ops/s")
	if cpu > 0 {
		b.ReportMetric(float64(ok)/cpu.Seconds(), "ops/node-cpu-s")
	}
	b.ReportMetric(float64(errs), "errs")
	b.ReportMetric(procRSS(pid), "node-rss-MiB")
	reportCodes(b)
}
