package nicagent

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// scriptedController serves WatchDirectory from a script: subscription i
// sends script[i]'s updates, then ends with an error (or, for the last,
// stays open).
type scriptedController struct {
	api.UnimplementedControllerServer
	mu     sync.Mutex
	script [][]*api.DirectoryUpdate
	subs   int
	gate   chan struct{} // subscriptions after the first wait for it
}

func (s *scriptedController) WatchDirectory(_ *api.WatchDirectoryRequest, st api.Controller_WatchDirectoryServer) error {
	s.mu.Lock()
	i := s.subs
	s.subs++
	s.mu.Unlock()
	if i > 0 {
		select {
		case <-s.gate:
		case <-st.Context().Done():
			return nil
		}
	}
	if i >= len(s.script) {
		<-st.Context().Done()
		return nil
	}
	for _, u := range s.script[i] {
		if err := st.Send(u); err != nil {
			return err
		}
	}
	if i == len(s.script)-1 {
		<-st.Context().Done()
		return nil
	}
	return status.Error(codes.Unavailable, "scripted end of stream")
}

func (s *scriptedController) subscriptions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subs
}

func syncEntry(key string, locs ...uint32) *api.DirectoryEntry {
	h := wire.HashKey([]byte(key))
	return &api.DirectoryEntry{KeyHash: h[:], Key: []byte(key), Locations: locs, ChainLength: 3}
}

// TestSyncResubscribes drives the agent's subscription through a snapshot,
// deltas, a sequence gap (resubscribe), a stream error (resubscribe) and
// reconciling snapshots, on a bridge interface in a namespace of its own
// (so XDP falls back to generic mode).
func TestSyncResubscribes(t *testing.T) {
	needBPF(t)
	tb := newTestbed(t)
	ns := tb.prefix + "-sync"
	tb.ip("netns", "add", ns)
	tb.hosts["sync"] = ns
	tb.ip("-n", ns, "link", "add", "d0", "type", "bridge") // no native XDP
	tb.ip("-n", ns, "addr", "add", "10.78.0.1/24", "dev", "d0")
	tb.ip("-n", ns, "link", "set", "d0", "up")

	parts := []*api.Partition{{Index: 0, Chain: []uint32{1, 2, 3}}, {Index: 1, Chain: []uint32{2, 3, 1}}}
	nodes := []*api.Node{{Id: 1, Addr: "10.78.0.11:7420"}, {Id: 2, Addr: "10.78.0.12:7420"}, {Id: 3, Addr: "10.78.0.13:7420"}, {Id: 4, Addr: "10.78.0.14:7420"}}
	sc := &scriptedController{gate: make(chan struct{}), script: [][]*api.DirectoryUpdate{
		{ // a snapshot and a delta, then a gap: 9 after 6
			{Kind: api.DirectoryUpdate_SNAPSHOT, Sequence: 5, PartitionBits: 1, Partitions: parts, Nodes: nodes,
				Entries: []*api.DirectoryEntry{syncEntry("a", 1, 2, 3)}},
			{Kind: api.DirectoryUpdate_UPSERT, Sequence: 6, Entries: []*api.DirectoryEntry{syncEntry("b", 1, 2, 3, 4)}},
			{Kind: api.DirectoryUpdate_UPSERT, Sequence: 9, Entries: []*api.DirectoryEntry{syncEntry("x", 1, 2, 3)}},
		},
		{ // b stays, a goes, c comes; then the stream breaks
			{Kind: api.DirectoryUpdate_SNAPSHOT, Sequence: 10, PartitionBits: 1, Partitions: parts, Nodes: nodes,
				Entries: []*api.DirectoryEntry{syncEntry("b", 1, 2, 3, 4), syncEntry("c", 2, 3, 1)}},
		},
		{ // a delta first is refused: a stream starts with a snapshot
			{Kind: api.DirectoryUpdate_UPSERT, Sequence: 11, Entries: []*api.DirectoryEntry{syncEntry("y", 1, 2, 3)}},
		},
		{ // the last stream: a snapshot, a delete, and it stays open
			{Kind: api.DirectoryUpdate_SNAPSHOT, Sequence: 20, PartitionBits: 1, Partitions: parts, Nodes: nodes,
				Entries: []*api.DirectoryEntry{syncEntry("b", 1, 2, 3, 4), syncEntry("c", 2, 3, 1)}},
			{Kind: api.DirectoryUpdate_DELETE, Sequence: 21, Entries: []*api.DirectoryEntry{syncEntry("c", 2, 3, 1)}},
		},
	}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	api.RegisterControllerServer(gs, sc)
	go gs.Serve(lis)
	defer gs.Stop()

	a, err := New(Config{Iface: "d0", Controller: lis.Addr().String(), Netns: nsPath(ns), Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.XDPMode() != "generic" {
		t.Errorf("XDP on a bridge interface attached in %s mode, want the generic fallback", a.XDPMode())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	dp := a.Dataplane()
	hb := wire.HashKey([]byte("b"))
	waitFor(t, 10*time.Second, "the first snapshot and delta", func() bool {
		_, ok, _ := dp.Lookup(hb)
		return ok
	})
	// b's versions advance (a PUT-reply through XDP): the reconciling
	// snapshots that follow must keep a staying entry's coherence state.
	reply := wire.Packet{Header: wire.Header{Op: wire.OpPutReply, KeyHash: hb, Stamp: 7, Node: 3}}
	pkt, _ := reply.AppendEncode(nil)
	src := netip.MustParseAddrPort("10.78.0.13:7420")
	if ret, _, err := run(dp.XDP(), frame(src, netip.MustParseAddrPort("10.78.0.1:7420"), pkt)); err != nil || ret != xdpPass {
		t.Fatalf("put-reply through XDP: %d, %v", ret, err)
	}
	if slot, _, _ := dp.Lookup(hb); slot.VerDone != 7 {
		t.Fatalf("b after its put-reply: %+v", slot)
	}
	close(sc.gate)
	waitFor(t, 10*time.Second, "the last stream's snapshot and delete", func() bool {
		s := a.SyncStats()
		return sc.subscriptions() == 4 && s.Synced && s.Sequence == 21
	})
	s := a.SyncStats()
	if s.Snapshots != 3 || s.Resubscribes != 3 {
		t.Errorf("sync: %+v; want 3 snapshots, 3 resubscriptions", s)
	}
	for key, want := range map[string]bool{"a": false, "b": true, "c": false, "x": false, "y": false} {
		if _, ok, _ := dp.Lookup(wire.HashKey([]byte(key))); ok != want {
			t.Errorf("key %s in the directory: %v, want %v", key, ok, want)
		}
	}
	slot, _, _ := dp.Lookup(hb)
	if slot.VerDone != 7 || slot.N != 4 {
		t.Errorf("b after two reconciling snapshots: %+v; want ver_done 7 kept", slot)
	}
	if p, ok, _ := dp.Partition(1); !ok || p.Chain[0] != 2 {
		t.Errorf("partition 1: %+v", p)
	}
}

// TestApplyRefuses checks Apply's refusals without a controller.
func TestApplyRefuses(t *testing.T) {
	d := loadTest(t)
	a := &Agent{dp: d, nodes: map[wire.NodeID]netip.AddrPort{}, resolved: map[wire.NodeID]NodeAddr{},
		resolveKick: make(chan struct{}, 1), ifmac: agentMAC, cfg: Config{Service: service}, log: quietLog()}
	if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_UPSERT, Sequence: 1}); err == nil {
		t.Error("a delta before any snapshot was applied")
	}
	snap := &api.DirectoryUpdate{Kind: api.DirectoryUpdate_SNAPSHOT, Sequence: 3, PartitionBits: 1,
		Partitions: []*api.Partition{{Index: 1, Chain: []uint32{1, 2, 3}}}}
	if err := a.Apply(snap); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_UPSERT, Sequence: 5}); !errors.Is(err, errGap) {
		t.Errorf("a delta after a gap: %v, want %v", err, errGap)
	}
	if err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_PARTITIONS, Sequence: 4, PartitionBits: 3}); err == nil {
		t.Error("a partition-count change was applied as a delta")
	}
	bad := syncEntry("k", 1, 2, 3)
	bad.ChainLength = 9
	err := a.Apply(&api.DirectoryUpdate{Kind: api.DirectoryUpdate_UPSERT, Sequence: 4, Entries: []*api.DirectoryEntry{bad}})
	if !errors.Is(err, directory.ErrBadLocs) {
		t.Errorf("an entry with a chain longer than its LocationList: %v", err)
	}
}

// TestSetSourceRefusesSpine: the XDP plane classifies clients and storage
// nodes only; a spine port (directory.PortSpine, Go core and sim/ only)
// is refused, not taken for a storage port that would accept its VSBs.
func TestSetSourceRefusesSpine(t *testing.T) {
	d := loadTest(t)
	if err := d.SetSource(portSource(7), directory.PortSpine); err == nil {
		t.Error("a spine port was accepted")
	}
	if err := d.SetSource(portSource(7), directory.PortStorage); err != nil {
		t.Errorf("a storage port: %v", err)
	}
}
