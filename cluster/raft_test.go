package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	ctrl "github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
)

// haCluster is three storage nodes, a model switch over P4Runtime, and
// three raft-replicated controllers that program it.
type haCluster struct {
	c      *cluster.Cluster
	sw     *cluster.Switch
	schema *p4rt.Schema
	cfgs   []cluster.ControllerConfig
	ctls   []*cluster.Controller // nil while stopped
}

func startHA(t testing.TB, ctx context.Context) *haCluster {
	t.Helper()
	dp, err := cluster.ReserveAddr()
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Start(cluster.Options{N: 3, Dir: t.TempDir(), DataPlane: dp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sw, err := cluster.StartSwitch(cluster.SwitchConfig{Listen: dp, Layout: c.Layout, P4Runtime: "127.0.0.1:0",
		Directory: directory.Config{Policy: directory.PolicyNetdir, Mode: directory.ModeToR}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	_, file, _, _ := runtime.Caller(0)
	schema, err := p4rt.LoadSchema(filepath.Join(filepath.Dir(file), "..", "p4", "build", "netdir.p4info.txtpb"))
	if err != nil {
		t.Fatal(err)
	}
	h := &haCluster{c: c, sw: sw, schema: schema}
	var peers []ctrl.RaftPeer
	for i := range 3 {
		raftAddr, err := cluster.ReserveAddr()
		if err != nil {
			t.Fatal(err)
		}
		apiAddr, err := cluster.ReserveAddr()
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, ctrl.RaftPeer{ID: fmt.Sprintf("c%d", i+1), Raft: raftAddr, API: apiAddr})
	}
	for i, p := range peers {
		h.cfgs = append(h.cfgs, cluster.ControllerConfig{
			API: p.API, Schema: schema, Layout: c.Layout.Config(), Round: 100 * time.Millisecond, PromoteMin: 1 << 30,
			Switches: []cluster.SwitchEndpoint{{Name: "model", Addr: sw.P4RuntimeAddr(), DeviceID: 1, ElectionID: 1}},
			Raft:     &ctrl.RaftConfig{ID: p.ID, Bind: p.Raft, Dir: t.TempDir(), Peers: peers},
			Auth:     c.NewAuth(),
		})
		h.start(t, ctx, i)
	}
	t.Cleanup(func() {
		for i := range h.ctls {
			h.stop(i)
		}
	})
	return h
}

func (h *haCluster) start(t testing.TB, ctx context.Context, i int) {
	t.Helper()
	for len(h.ctls) <= i {
		h.ctls = append(h.ctls, nil)
	}
	var err error
	for try := 0; ; try++ { // a stopped controller's ports may linger
		if h.ctls[i], err = cluster.StartController(ctx, h.cfgs[i]); err == nil || try == 50 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("controller %d: %v", i+1, err)
	}
}

// stop stops controller i at once: no leadership transfer, its sessions
// and raft server gone, as a killed process's.
func (h *haCluster) stop(i int) {
	if h.ctls[i] != nil {
		h.ctls[i].Close()
		h.ctls[i] = nil
	}
}

// leader waits for one of the running controllers to lead and to have
// programmed the switch, and returns its index.
func (h *haCluster) leader(t testing.TB, ctx context.Context) int {
	t.Helper()
	for ctx.Err() == nil {
		for i, c := range h.ctls {
			if c != nil && c.Serving() {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no leader")
	return -1
}

func (h *haCluster) apis() []string {
	var out []string
	for _, cfg := range h.cfgs {
		out = append(out, cfg.API)
	}
	return out
}

// entryKey is what every replica and the switch must agree on for an
// entry.
func entryKey(e ctrl.Entry) string {
	return fmt.Sprintf("%s slot=%d gen=%d locs=%v r=%d pinned=%v", e.Key, e.Slot, e.Gen, e.Locs, e.R, e.Pinned)
}

func entryKeys(es []ctrl.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = entryKey(e)
	}
	return out
}

// waitSame waits until controller i holds the entries want.
func waitSame(t *testing.T, ctx context.Context, c *cluster.Controller, want []string, who string) {
	t.Helper()
	for !slices.Equal(entryKeys(c.Entries()), want) {
		if ctx.Err() != nil {
			t.Fatalf("%s holds\n%v\nwant\n%v", who, entryKeys(c.Entries()), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSwitch waits until the switch's directory holds exactly the entries,
// each in its slot with its LocationList.
func waitSwitch(t *testing.T, ctx context.Context, sw *cluster.Switch, es []ctrl.Entry) {
	t.Helper()
	matches := func() error {
		snap := sw.Snapshot()
		if len(snap.Slots) != len(es) {
			return fmt.Errorf("%d slots, want %d", len(snap.Slots), len(es))
		}
		for _, e := range es {
			sl, ok := sw.Lookup(e.Hash)
			if !ok {
				return fmt.Errorf("%q is not in the switch", e.Key)
			}
			if got := sl.Locs[:sl.N]; !slices.Equal(got, e.Locs) || int(sl.R) != e.R {
				return fmt.Errorf("%q: switch has %v (r=%d), want %v (r=%d)", e.Key, got, sl.R, e.Locs, e.R)
			}
		}
		return nil
	}
	for err := matches(); err != nil; err = matches() {
		if ctx.Err() != nil {
			t.Fatalf("switch: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestControllerFailover: three raft-replicated controllers; the leader
// promotes (pins) keys, which every replica holds; the leader is stopped
// at once; a new one is elected, holds the same directory and pins,
// becomes the switch's P4Runtime primary with a higher election id (the
// old one's is refused), and re-programs the switch to agree with the
// state, so writes to the promoted keys go on; a client given every
// controller's address finds the new leader. A stopped controller
// restarted from its data directory (snapshot and log) holds the same
// state again. Time bounds only catch hangs.
func TestControllerFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := startHA(t, ctx)
	first := h.leader(t, ctx)
	term := h.ctls[first].Leadership().Term()

	cs, err := ctrl.DialControllers(h.apis(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	cl, err := h.c.Client(client.Options{Service: h.sw.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	keys := make([][]byte, 8)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "hot-%d", i)
		if _, err := cl.Put(ctx, keys[i], []byte("v0")); err != nil {
			t.Fatal(err)
		}
		err := cs.Call(ctx, func(ctx context.Context, c api.ControllerClient) error {
			_, err := c.Pin(ctx, &api.PinRequest{Key: keys[i]})
			return err
		})
		if err != nil {
			t.Fatalf("pin %s: %v", keys[i], err)
		}
	}
	if got := cs.Current(); got != h.cfgs[first].API {
		t.Fatalf("the client calls %s, want the leader at %s", got, h.cfgs[first].API)
	}
	want := h.ctls[first].Entries()
	if len(want) != len(keys) {
		t.Fatalf("%d entries, want %d", len(want), len(keys))
	}
	for i, c := range h.ctls {
		waitSame(t, ctx, c, entryKeys(want), fmt.Sprintf("controller %d", i+1))
	}
	waitSwitch(t, ctx, h.sw, want)
	// A follower takes a snapshot, so its restart below restores from one.
	follower := (first + 1) % 3
	if err := h.ctls[follower].Leadership().Snapshot(); err != nil {
		t.Fatal(err)
	}

	h.stop(first)
	next := h.leader(t, ctx)
	if got := h.ctls[next].Leadership().Term(); got <= term {
		t.Fatalf("new leader in term %d, not above %d", got, term)
	}
	waitSame(t, ctx, h.ctls[next], entryKeys(want), "the new leader")
	waitSwitch(t, ctx, h.sw, want)
	// The old leader's election id no longer rules the switch.
	old, err := p4rt.Dial(ctx, p4rt.Config{Addr: h.sw.P4RuntimeAddr(), DeviceID: 1, Election: ctrl.ElectionID(term, 1)})
	if !errors.Is(err, p4rt.ErrNotPrimary) {
		t.Fatalf("the old leader's election id: %v, want %v", err, p4rt.ErrNotPrimary)
	}
	old.Close()
	for _, k := range keys {
		if _, err := cl.Put(ctx, k, []byte("v1")); err != nil {
			t.Fatalf("write %s after the failover: %v", k, err)
		}
		if v, _, err := cl.Get(ctx, k); err != nil || string(v) != "v1" {
			t.Fatalf("read %s after the failover: %q, %v", k, v, err)
		}
	}
	err = cs.Call(ctx, func(ctx context.Context, c api.ControllerClient) error {
		_, err := c.Unpin(ctx, &api.PinRequest{Key: keys[0]})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.Current(); got != h.cfgs[next].API {
		t.Fatalf("the client calls %s, want the new leader at %s", got, h.cfgs[next].API)
	}
	want = h.ctls[next].Entries()
	waitSwitch(t, ctx, h.sw, want)

	// Restarted from its data directory, the old leader catches up.
	h.start(t, ctx, first)
	waitSame(t, ctx, h.ctls[first], entryKeys(want), "the restarted controller")
	h.stop(follower)
	h.start(t, ctx, follower)
	waitSame(t, ctx, h.ctls[follower], entryKeys(want), "the follower restarted from its snapshot")
}

// BenchmarkControllerFailover measures a failover of three raft-replicated
// controllers: from stopping the leader until another one leads and has
// re-programmed the model switch (failover-ms), with 64 pinned keys. Run:
//
//	go test -run '^$' -bench ControllerFailover -benchtime 5x ./cluster/
func BenchmarkControllerFailover(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := startHA(b, ctx)
	lead := h.leader(b, ctx)
	for i := range 64 {
		if _, err := h.ctls[lead].Pin(ctx, fmt.Appendf(nil, "key-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		h.stop(lead)
		next := h.leader(b, ctx)
		total += time.Since(start)
		h.start(b, ctx, lead)
		lead = next
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "failover-ms")
}
