package cluster

import (
	"context"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// TestStampAcrossSwitchRestart replays flaw G of spec/README.md (Spin's
// trail, make spec-flaws G-stamp-across-switch-restart) with the model
// switch over P4Runtime, the controller and the fault proxies: the key is
// promoted with an extra that holds v0 and takes every read; a write is
// stamped by the switch and held on its way to the head; the switch
// restarts (slot and stamp floors lost); the controller's re-sync asks the
// head (latest v0), and only then does the held write reach the head; its
// commit is done before the slot is installed, seeded with v0; the copy of
// v1 to the extra is lost. Before the fix the head applied the old stamp as
// v1, the extra's VSB of v0 was accepted by the new slot, and reads
// returned v0 after v1 was acknowledged. With the fix the re-sync is a new
// incarnation, the head refuses the write stamped in the old one, and the
// client's retry is stamped in the new one.
func TestStampAcrossSwitchRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dp, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(Options{N: 4, R: 3, Dir: t.TempDir(), DataPlane: dp.String(), Proxy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p4addr, err := ReserveAddr()
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("flaw-g")
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	head := c.Proxy(int(ch[0]) - 1)
	// The switch and the controller reach the nodes' own sockets, where
	// their VSBs come from, but the head through its proxy; the nodes
	// reach each other through the proxies.
	var nodes []model.Node
	lay := c.Layout.Config()
	for i, a := range c.listen {
		id := wire.NodeID(i + 1)
		if id == ch[0] {
			a = head.Addr()
		}
		nodes = append(nodes, model.Node{ID: id, Addr: a})
		lay.Nodes[i].Addr = a.String()
	}
	sc := SwitchConfig{Listen: dp.String(), Layout: c.Layout, P4Runtime: p4addr, Nodes: nodes,
		Directory: directory.Config{Policy: directory.PolicyNetdir, Mode: directory.ModeToR}}
	sw, err := StartSwitch(sc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { sw.Close() }()
	_, file, _, _ := runtime.Caller(0)
	schema, err := p4rt.LoadSchema(filepath.Join(filepath.Dir(file), "..", "p4", "build", "netdir.p4info.txtpb"))
	if err != nil {
		t.Fatal(err)
	}
	api, err := ReserveAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := StartController(ctx, ControllerConfig{API: api, Schema: schema, Layout: lay,
		Round: time.Hour, CoarseEpoch: 120 * time.Second, PromoteMin: 1,
		Switches: []SwitchEndpoint{{Name: "model", Addr: p4addr, DeviceID: 1, ElectionID: 1}}, Auth: c.NewAuth()})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	cl, err := c.Client(client.Options{Service: dp.String(), Timeout: 20 * time.Millisecond, MaxTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	v0, err := cl.Put(ctx, key, []byte("v0"))
	if err != nil {
		t.Fatal(err)
	}
	// Promoted as the only hot key: it gets an extra, which takes every read.
	ctl.Report(controller.NodeReport{Node: ch[0], Version: 1, HotKeys: []sched.KeyCount{{Key: key, Count: 1000}}})
	if err := ctl.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ctl.Entries(), func(e controller.Entry) bool { return e.Hash == h })
	if i < 0 || len(ctl.Entries()[i].Locs) <= ctl.Entries()[i].R {
		t.Fatalf("key not promoted with an extra: %+v", ctl.Entries())
	}
	e := ctl.Entries()[i]
	extra := e.Locs[e.R]
	w := make([]uint32, len(e.Locs))
	w[e.R] = 1
	if err := ctl.SetKeyWeights(ctx, key, w); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; {
		r, err := cl.GetResult(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if r.Node == extra && r.Version == v0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			s, _ := sw.Lookup(h)
			dc, _ := sw.Counters()
			t.Fatalf("the extra %d never served v0 %d (last read: node %d v%d); slot fresh %b ver %d/%d; drops %v", extra, v0, r.Node, r.Version, s.Fresh, s.VerNext, s.VerDone, dc.Drops)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The next write is stamped by this switch and held before the head.
	var phase atomic.Int32 // 1: hold writes; 2: and the heads' answers to promotions; 0: nothing
	promoteHeld := make(chan struct{}, 1)
	phase.Store(1)
	head.SetFaults(Faults{Hold: func(f wire.Frame, up bool) bool {
		switch ph := phase.Load(); {
		case ph >= 1 && up && f.Op() == wire.OpPut:
			return true
		case ph == 2 && !up && f.Op() == wire.OpPromote:
			select {
			case promoteHeld <- struct{}{}:
			default:
			}
			return true
		}
		return false
	}})
	acked := make(chan uint64, 1)
	go func() {
		v, err := cl.Put(ctx, key, []byte("v1"))
		if err != nil {
			t.Error(err)
		}
		acked <- v
	}()
	for head.Held() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the write never reached the head's proxy")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The copies of what commits from now on never reach the extra.
	c.Proxy(int(extra) - 1).SetFaults(Faults{DropOps: []wire.Op{wire.OpCopy}})
	phase.Store(2)
	sw.Close()
	time.Sleep(100 * time.Millisecond)
	for try := 0; ; try++ {
		if sw, err = StartSwitch(sc); err == nil || try == 100 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The re-sync's promotion has been answered by the head; the answer is
	// held (and so are its retries'), so the slot is not installed yet.
	select {
	case <-promoteHeld:
	case <-ctx.Done():
		t.Fatal("no re-sync promotion at the head")
	}
	head.Release(func(f wire.Frame) bool { return f.Op() == wire.OpPut })
	phase.Store(1)
	time.Sleep(150 * time.Millisecond) // the write commits, or is refused
	phase.Store(0)
	head.Release(nil)
	var v1 uint64
	select {
	case v1 = <-acked:
	case <-ctx.Done():
		t.Fatal("the write was never acknowledged")
	}
	if v1 <= v0 {
		t.Fatalf("v1 %d not above v0 %d", v1, v0)
	}
	for !ctl.Serving() {
		if ctx.Err() != nil {
			t.Fatal("controller not serving after the restart")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The extra re-announces v0 every 500 ms: reads for a while longer.
	deadline := time.Now().Add(1500 * time.Millisecond)
	reads := map[wire.NodeID]int{}
	for time.Now().Before(deadline) {
		r, err := cl.GetResult(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if r.Version < v1 {
			t.Fatalf("read served by node %d returned version %d %q after version %d was acknowledged", r.Node, r.Version, r.Value, v1)
		}
		reads[r.Node]++
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("v0 %d, v1 %d; reads by node %v; stale-incarnation refusals at the head %d", v0, v1, reads,
		c.Node(int(ch[0])-1).Stats().StaleIncarnation)
}
