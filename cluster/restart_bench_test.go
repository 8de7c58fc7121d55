package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
)

// BenchmarkSwitchRestart measures a switch restart (issue 15, item 4)
// with the model switch over P4Runtime: a controller programs it with
// -entries directory entries (default 4096), the switch stops and a fresh
// one starts on the same addresses, and the benchmark reports the time from
// the new switch's start until the controller's session is back
// (reconnect-ms), until it has pushed the pipeline and re-synced every
// partition and entry (resync-ms), and until a write to a promoted key is
// acknowledged again (write-ms). Run:
//
//	go test -run '^$' -bench SwitchRestart -benchtime 5x ./cluster/
func BenchmarkSwitchRestart(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dp, err := freePort()
	if err != nil {
		b.Fatal(err)
	}
	c, err := Start(Options{N: 3, Dir: b.TempDir(), DataPlane: dp.String(), PartitionBits: 10})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p4addr, err := ReserveAddr()
	if err != nil {
		b.Fatal(err)
	}
	sc := SwitchConfig{Listen: dp.String(), Layout: c.Layout, P4Runtime: p4addr,
		Directory: directory.Config{Policy: directory.PolicyNetdir, Mode: directory.ModeToR}}
	sw, err := StartSwitch(sc)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { sw.Close() }()
	_, file, _, _ := runtime.Caller(0)
	schema, err := p4rt.LoadSchema(filepath.Join(filepath.Dir(file), "..", "p4", "build", "netdir.p4info.txtpb"))
	if err != nil {
		b.Fatal(err)
	}
	api, err := ReserveAddr()
	if err != nil {
		b.Fatal(err)
	}
	ctl, err := StartController(ctx, ControllerConfig{API: api, Schema: schema, Layout: c.Layout.Config(),
		Capacity: restartEntries, Round: time.Hour, CoarseEpoch: 120 * time.Second, PromoteMin: 1 << 30,
		Switches: []SwitchEndpoint{{Name: "model", Addr: p4addr, DeviceID: 1, ElectionID: 1}}, Auth: c.NewAuth()})
	if err != nil {
		b.Fatal(err)
	}
	defer ctl.Close()
	cl, err := c.Client(client.Options{Service: dp.String(), Timeout: 5 * time.Millisecond, MaxTimeout: 20 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	hot := []byte("hot")
	if _, err := cl.Put(ctx, hot, []byte("v")); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if _, err := ctl.Pin(ctx, hot); err != nil {
		b.Fatal(err)
	}
	for i := 1; i < restartEntries; i++ {
		if _, err := ctl.Pin(ctx, fmt.Appendf(nil, "key-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d entries pinned in %v", restartEntries, time.Since(t0))
	sess := ctl.clients[0]
	var reconnect, resync, write time.Duration
	b.ResetTimer()
	for range b.N {
		sw.Close()
		time.Sleep(500 * time.Millisecond) // down for a while: the controller's retries back off
		for try := 0; ; try++ {
			if sw, err = StartSwitch(sc); err == nil || try == 100 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		var back, synced, wrote time.Duration
		for back == 0 || synced == 0 || wrote == 0 {
			if time.Since(start) > time.Minute {
				b.Fatalf("after a minute: session %v, re-synced %v, written %v", back, synced, wrote)
			}
			if back == 0 && sess.Primary() {
				back = time.Since(start)
			}
			if synced == 0 && ctl.Serving() {
				synced = time.Since(start)
			}
			if wrote == 0 {
				wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				if _, err := cl.Put(wctx, hot, []byte("v")); err == nil {
					wrote = time.Since(start)
				}
				cancel()
			} else {
				time.Sleep(time.Millisecond)
			}
		}
		reconnect += back
		resync += synced
		write += wrote
	}
	n := float64(b.N)
	b.ReportMetric(float64(reconnect.Milliseconds())/n, "reconnect-ms")
	b.ReportMetric(float64(resync.Milliseconds())/n, "resync-ms")
	b.ReportMetric(float64(write.Milliseconds())/n, "write-ms")
}

// restartEntries is the directory BenchmarkSwitchRestart re-syncs.
const restartEntries = 4096
