package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// corePlane is a DataPlane over the Go directory core, standing in for a
// device so the controller's decisions can be checked without P4Runtime.
type corePlane struct {
	mu    sync.Mutex
	d     *directory.Directory
	slots map[uint32]wire.KeyHash
}

func newCorePlane(t *testing.T) *corePlane {
	d, err := directory.New(directory.Config{PartitionBits: 4, Slots: 64})
	if err != nil {
		t.Fatal(err)
	}
	return &corePlane{d: d, slots: map[uint32]wire.KeyHash{}}
}

func (p *corePlane) Name() string { return "core" }
func (p *corePlane) Setup(_ context.Context, m *layout.Map, _ []uint32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return directory.InstallLayout(p.d, m)
}
func (p *corePlane) InstallEntry(_ context.Context, e *Entry) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slots[e.Slot] = e.Hash
	_, err := p.d.Insert(e.Hash, e.Locs, e.R, e.Ver, e.Buckets)
	return err
}
func (p *corePlane) RemoveEntry(_ context.Context, e *Entry) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.slots, e.Slot)
	return p.d.Evict(e.Hash)
}
func (p *corePlane) SetSlotBuckets(_ context.Context, e *Entry) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.d.SetSlotBuckets(e.Hash, e.Buckets)
}
func (p *corePlane) SetPartitionBuckets(_ context.Context, part uint32, _ []wire.NodeID, b []uint8) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.d.SetPartitionBuckets(part, b)
}
func (p *corePlane) ReadHits(_ context.Context, slots []uint32) (map[uint32]uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[uint32]uint64{}
	for _, s := range slots {
		if sl, ok := p.d.Lookup(p.slots[s]); ok {
			out[s] = sl.Hits
		}
	}
	return out, nil
}
func (p *corePlane) ReadSketch(context.Context) (out [directory.SketchRows][directory.SketchCols]uint64, _ error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for r := range out {
		for c := range out[r] {
			out[r][c] = uint64(p.d.SketchCell(r, uint32(c)))
		}
	}
	return out, nil
}

// get sends a GET for key through the plane and returns the chosen node.
func (p *corePlane) get(t *testing.T, key string, reqid uint64) wire.NodeID {
	p.mu.Lock()
	defer p.mu.Unlock()
	pk := wire.Packet{Header: wire.Header{Op: wire.OpGet, ReqID: reqid, KeyHash: wire.HashKey([]byte(key))}, Key: []byte(key)}
	b, err := pk.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	v := p.d.Process(b, 0, 1)
	if v.Action != directory.Forward {
		t.Fatalf("GET %s: %v", key, v)
	}
	return v.Node
}

type recStorage struct {
	mu       sync.Mutex
	promoted map[string][]wire.NodeID
	demoted  []string
	latest   uint64            // the heads' latest version, as Promote answers
	inc      map[string]uint16 // the incarnation each key's last promotion carried
}

func (s *recStorage) Promote(_ context.Context, head layout.Node, key []byte, extras []layout.Node, inc uint16) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inc == nil {
		s.inc = map[string]uint16{}
	}
	s.inc[string(key)] = inc
	ids := []wire.NodeID{head.ID}
	for _, e := range extras {
		ids = append(ids, e.ID)
	}
	s.promoted[string(key)] = ids
	return s.latest, nil
}
func (s *recStorage) Demote(_ context.Context, _ layout.Node, key []byte, _ []layout.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.demoted = append(s.demoted, string(key))
	return nil
}

// ringLayout is nodes 1..n at 127.0.0.1:7501.. on 16 partitions, chains of 3.
func ringLayout(t *testing.T, n int) *layout.Map {
	t.Helper()
	var nodes []layout.Node
	for i := 1; i <= n; i++ {
		nodes = append(nodes, layout.Node{ID: wire.NodeID(i), Addr: fmt.Sprintf("127.0.0.1:%d", 7500+i)})
	}
	m, err := layout.New(layout.Config{PartitionBits: 4, Replicas: 3, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func testController(t *testing.T) (*Controller, *corePlane, *recStorage) {
	p := newCorePlane(t)
	st := &recStorage{promoted: map[string][]wire.NodeID{}}
	c, err := New(Config{Layout: ringLayout(t, 8), PromoteMin: 10}, []DataPlane{p}, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, p, st
}

// nextUpdate is a watcher's next update as agents receive it.
func nextUpdate(w <-chan directoryUpdate) *api.DirectoryUpdate { return updateProto(<-w) }

func TestHotKeyPromotedSpreadThenEvicted(t *testing.T) {
	ctx := context.Background()
	c, p, st := testController(t)
	w := c.st.watch()

	// A skewed round: "hot" draws most requests; nodes report it.
	for i := 0; i < 400; i++ {
		p.get(t, "hot", uint64(i))
	}
	c.Report(NodeReport{Node: 1, Version: 1, HotKeys: []sched.KeyCount{{Key: []byte("hot"), Count: 400}, {Key: []byte("cold"), Count: 3}}})
	if err := c.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	es := c.Entries()
	if len(es) != 1 || string(es[0].Key) != "hot" {
		t.Fatalf("directory %v: want only the hot key", es)
	}
	e := es[0]
	if len(e.Locs) <= e.R {
		t.Fatalf("hot key got no extra copies: %v", e.Locs)
	}
	if got := st.promoted["hot"]; len(got) != 1+len(e.Locs)-e.R || got[0] != e.Locs[0] {
		t.Fatalf("head not asked to copy to the extras: %v vs %v", got, e.Locs)
	}
	// The watcher saw a snapshot, then the upsert.
	if u := nextUpdate(w); u.GetKind() != api.DirectoryUpdate_SNAPSHOT {
		t.Fatalf("first update %v", u.GetKind())
	}
	if u := nextUpdate(w); u.GetKind() != api.DirectoryUpdate_UPSERT || string(u.GetEntries()[0].GetKey()) != "hot" {
		t.Fatalf("second update %v", u)
	}

	// Once every extra has announced the version, reads spread over all locations.
	for i, n := range e.Locs[e.R:] {
		pk := wire.Packet{Header: wire.Header{Op: wire.OpVSB, KeyHash: e.Hash, Node: n}}
		b, _ := pk.AppendEncode(nil)
		port := uint32(100 + i)
		p.d.SetPort(port, directory.PortStorage)
		if v := p.d.Process(b, port, 1); v.Action != directory.Multicast {
			t.Fatalf("VSB from extra %d: %v", n, v)
		}
	}
	seen := map[wire.NodeID]int{}
	for i := 0; i < 2000; i++ {
		seen[p.get(t, "hot", uint64(i)*0x10001)]++
	}
	for _, n := range e.Locs {
		if seen[n] == 0 {
			t.Errorf("location %d served no read of %d", n, 2000)
		}
	}
	if len(seen) != len(e.Locs) {
		t.Errorf("reads went to %v, outside the LocationList %v", seen, e.Locs)
	}

	// The round that sees those hits keeps it; three cold rounds evict it,
	// from the planes and at the head.
	if err := c.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	if es := c.Entries(); len(es) != 1 || es[0].Hits != 2000 {
		t.Fatalf("warm round: %v, want the key kept with 2000 hits", es)
	}
	for i := 0; i < 3; i++ {
		if err := c.HotKeyRound(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.Entries()) != 0 || p.d.Len() != 0 {
		t.Fatalf("not evicted: controller %v, plane %d", c.Entries(), p.d.Len())
	}
	if len(st.demoted) != 1 || st.demoted[0] != "hot" {
		t.Fatalf("head not told to drop copies: %v", st.demoted)
	}
	if u := nextUpdate(w); u.GetKind() != api.DirectoryUpdate_DELETE {
		t.Fatalf("watcher: %v, want DELETE", u.GetKind())
	}
}

func TestPinSurvivesColdRounds(t *testing.T) {
	ctx := context.Background()
	c, p, _ := testController(t)
	if _, err := c.Pin(ctx, []byte("pinned")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := c.HotKeyRound(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.Entries()) != 1 || p.d.Len() != 1 {
		t.Fatalf("pinned key evicted: %v", c.Entries())
	}
	if err := c.Unpin(ctx, []byte("pinned")); err != nil {
		t.Fatal(err)
	}
	if p.d.Len() != 0 {
		t.Fatal("unpin left the entry in the plane")
	}
	if err := c.Unpin(ctx, []byte("pinned")); err == nil {
		t.Fatal("unpinning an absent key succeeded")
	}
}

// TestPromoteSeedsFromHead: a key is promoted at its head before any plane
// has it, also without extras, and the plane's slot starts at the head's
// latest version: seeded lower, each write to a key the nodes had already
// written would be refused as stale once per version behind.
func TestPromoteSeedsFromHead(t *testing.T) {
	ctx := context.Background()
	c, p, st := testController(t)
	st.latest = 41
	e, err := c.Pin(ctx, []byte("written-before"))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.promoted["written-before"]; len(got) != 1+len(e.Locs)-e.R || got[0] != e.Locs[0] {
		t.Fatalf("head promotion %v for locations %v (chain %d)", got, e.Locs, e.R)
	}
	if e.Ver != 41 {
		t.Fatalf("entry version %d, want the head's 41", e.Ver)
	}
	s, ok := p.d.Lookup(e.Hash)
	if !ok || s.VerNext != 41 || s.VerDone != 41 {
		t.Fatalf("slot %+v, want ver_next = ver_done = 41", s)
	}
	if err := c.Unpin(ctx, []byte("written-before")); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(st.demoted, "written-before") {
		t.Fatalf("evicted key not demoted at its head: %v", st.demoted)
	}
}

func TestWeights(t *testing.T) {
	ctx := context.Background()
	c, p, _ := testController(t)
	w := c.st.watch()
	<-w // the snapshot
	if err := c.SetPartitionWeights(ctx, 3, []uint32{1, 0, 0}); err != nil {
		t.Fatal(err)
	}
	// Agents are told, and later snapshots carry the weights too.
	u := nextUpdate(w)
	if u.GetKind() != api.DirectoryUpdate_PARTITIONS || u.GetPartitions()[3].GetBuckets()[5] != 0 || u.GetPartitions()[2].GetBuckets()[1] != 1 {
		t.Fatalf("weights update %v", u)
	}
	if snap := nextUpdate(c.st.watch()); snap.GetPartitions()[3].GetBuckets()[1] != 0 {
		t.Fatalf("snapshot after weights: %v", snap.GetPartitions()[3])
	}
	part, _ := p.d.Partition(3)
	for _, b := range part.Buckets {
		if b != 0 {
			t.Fatalf("weights (1,0,0) left bucket on member %d", b)
		}
	}
	if err := c.SetPartitionWeights(ctx, 3, []uint32{1, 1}); err == nil {
		t.Fatal("two weights for a chain of three accepted")
	}
	if err := c.SetPartitionWeights(ctx, 99, []uint32{1, 1, 1}); err == nil {
		t.Fatal("partition 99 of 16 accepted")
	}
	if err := c.SetKeyWeights(ctx, []byte("absent"), []uint32{1}); err == nil {
		t.Fatal("weights for a key outside the directory accepted")
	}
}

// TestLayoutOverridesAndEpoch: the controller installs the layout's chain
// overrides and announces its epoch, rather than a ring of its own.
func TestLayoutOverridesAndEpoch(t *testing.T) {
	cfg := ringLayout(t, 4).Config()
	cfg.Epoch = 5
	cfg.Chains = map[uint32][]wire.NodeID{2: {4, 2, 1}}
	lay, err := layout.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := newCorePlane(t)
	c, err := New(Config{Layout: lay}, []DataPlane{p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if part, ok := p.d.Partition(2); !ok || fmt.Sprint(part.Chain[:part.R]) != "[4 2 1]" {
		t.Fatalf("partition 2 installed as %+v, want the override [4 2 1]", part)
	}
	snap := nextUpdate(c.st.watch())
	if snap.GetEpoch() != 5 || fmt.Sprint(snap.GetPartitions()[2].GetChain()) != "[4 2 1]" {
		t.Fatalf("snapshot epoch %d, partition 2 %v", snap.GetEpoch(), snap.GetPartitions()[2].GetChain())
	}
}

// orderPlane records the keys a re-sync installs, in order.
type orderPlane struct {
	*corePlane
	keys []string
}

func (p *orderPlane) InstallEntry(ctx context.Context, e *Entry) error {
	p.keys = append(p.keys, string(e.Key))
	return p.corePlane.InstallEntry(ctx, e)
}

// TestResyncPinnedFirst: a re-sync installs pinned keys before the others,
// whatever their slots, so that their writes resume first after a switch
// restart; every key is installed once.
func TestResyncPinnedFirst(t *testing.T) {
	ctx := context.Background()
	c, _, _ := testController(t)
	c.keysMu.Lock()
	for i := range 3 {
		if _, err := c.promote(ctx, fmt.Appendf(nil, "warm-%d", i), 0.1, map[wire.NodeID]float64{}, false); err != nil {
			c.keysMu.Unlock()
			t.Fatal(err)
		}
	}
	c.keysMu.Unlock()
	for i := range 2 {
		if _, err := c.Pin(ctx, fmt.Appendf(nil, "pinned-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	bySlot := c.Entries()
	if bySlot[0].Pinned {
		t.Fatalf("precondition: want an unpinned key in the first slot, got %q", bySlot[0].Key)
	}
	p := &orderPlane{corePlane: newCorePlane(t)}
	if err := c.Resync(ctx, p); err != nil {
		t.Fatal(err)
	}
	if len(p.keys) != 5 {
		t.Fatalf("installed %v, want 5 keys", p.keys)
	}
	for i, k := range p.keys {
		if pinned := strings.HasPrefix(k, "pinned-"); pinned != (i < 2) {
			t.Fatalf("installed in the order %v: want the pinned keys first", p.keys)
		}
	}
}

// stampPut runs a PUT of key through p and returns the stamp p gave it.
func stampPut(t *testing.T, p *corePlane, key string) uint64 {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	pk := wire.Packet{Header: wire.Header{Op: wire.OpPut, ReqID: 1, KeyHash: wire.HashKey([]byte(key))}, Key: []byte(key)}
	b, err := pk.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := p.d.Process(b, 0, 1); v.Action != directory.Forward {
		t.Fatalf("PUT: %v", v)
	}
	return wire.Frame(b).Stamp()
}

// TestReincarnate: a plane the controller does not program (a router
// agent) lost its state and asks for a new incarnation (spec/README.md,
// flaw G): every head is re-promoted in it, the agents are sent the
// entries seeded with the heads' latest versions in it, and the planes
// that kept their state stamp it. Without storage nothing changes.
func TestReincarnate(t *testing.T) {
	ctx := context.Background()
	kept := newCorePlane(t)
	st := &recStorage{promoted: map[string][]wire.NodeID{}, latest: 7}
	c, err := New(Config{Layout: ringLayout(t, 8)}, []DataPlane{kept}, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pin(ctx, []byte("hot")); err != nil {
		t.Fatal(err)
	}
	if s := stampPut(t, kept, "hot"); s != wire.MakeStamp(0, 8) {
		t.Fatalf("stamp before the new incarnation %#x, want 8 in incarnation 0", s)
	}
	w := c.st.watch()
	defer c.st.unwatch(w)
	<-w // the snapshot
	st.latest = 8
	if err := c.Reincarnate(ctx); err != nil {
		t.Fatal(err)
	}
	if st.inc["hot"] != 1 || c.incarnation() != 1 {
		t.Fatalf("incarnation %d, head re-promoted in %d; want 1", c.incarnation(), st.inc["hot"])
	}
	want := wire.MakeStamp(1, 8)
	if got, _ := c.entry([]byte("hot")); got.Ver != want {
		t.Fatalf("entry's seed %#x, want version 8 in incarnation 1", got.Ver)
	}
	if u := <-w; u.kind != updateUpsert || len(u.entries) != 1 || u.entries[0].Ver != want {
		t.Fatalf("the agents were sent %+v; want the entry seeded %#x", u, want)
	}
	if s := stampPut(t, kept, "hot"); s != wire.MakeStamp(1, 9) {
		t.Fatalf("the plane that kept its state stamps %d in incarnation %d, want 9 in incarnation 1", wire.StampVersion(s), wire.StampIncarnation(s))
	}

	alone, err := New(Config{Layout: ringLayout(t, 8)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := alone.Reincarnate(ctx); err != nil || alone.incarnation() != 0 {
		t.Fatalf("without storage: incarnation %d, %v; want 0, nil", alone.incarnation(), err)
	}
}

// TestReprogramNewIncarnation: re-programming a plane that lost its state
// (a reset) starts a new incarnation (spec/README.md, flaw G): every head
// is re-promoted in it, and the reset plane and the plane that kept its
// state both stamp it; a re-sync without a reset keeps the incarnation.
func TestReprogramNewIncarnation(t *testing.T) {
	ctx := context.Background()
	lost, kept := newCorePlane(t), newCorePlane(t)
	st := &recStorage{promoted: map[string][]wire.NodeID{}, latest: 7}
	c, err := New(Config{Layout: ringLayout(t, 8)}, []DataPlane{lost, kept}, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := c.Pin(ctx, []byte("hot"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Ver != wire.MakeStamp(0, 7) || st.inc["hot"] != 0 {
		t.Fatalf("first promotion: seed %#x, head told incarnation %d; want version 7 in incarnation 0", e.Ver, st.inc["hot"])
	}
	stamp := func(p *corePlane) uint64 { return stampPut(t, p, "hot") }
	if s := stamp(kept); s != wire.MakeStamp(0, 8) {
		t.Fatalf("stamp before the reset %#x, want 8 in incarnation 0", s)
	}
	st.latest = 8
	reset := func(context.Context) error {
		d, err := directory.New(directory.Config{PartitionBits: 4, Slots: 64})
		lost.mu.Lock()
		lost.d, lost.slots = d, map[uint32]wire.KeyHash{}
		lost.mu.Unlock()
		return err
	}
	if err := c.Reprogram(ctx, lost, reset); err != nil {
		t.Fatal(err)
	}
	if st.inc["hot"] != 1 {
		t.Fatalf("head re-promoted in incarnation %d, want 1", st.inc["hot"])
	}
	if got, _ := c.entry([]byte("hot")); got.Ver != wire.MakeStamp(1, 8) {
		t.Fatalf("entry's seed after the reset %#x, want version 8 in incarnation 1", got.Ver)
	}
	for name, p := range map[string]*corePlane{"reset plane": lost, "plane that kept its state": kept} {
		if s := stamp(p); s != wire.MakeStamp(1, 9) {
			t.Fatalf("%s stamps %d in incarnation %d, want 9 in incarnation 1", name, wire.StampVersion(s), wire.StampIncarnation(s))
		}
	}
	if err := reset(ctx); err != nil { // emptied by hand: Resync itself resets nothing
		t.Fatal(err)
	}
	if err := c.Resync(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if st.inc["hot"] != 1 || c.incarnation() != 1 {
		t.Fatalf("a re-sync without a reset moved the incarnation to %d (head told %d)", c.incarnation(), st.inc["hot"])
	}
}
