package directory_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

func TestBucketsForWeights(t *testing.T) {
	// Exact tables, also relied on by the vector suite's weights=(...).
	exact := []struct {
		w    []uint32
		want []uint8
	}{
		{[]uint32{1, 0, 3}, []uint8{0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}},
		{[]uint32{1, 1, 1, 5}, []uint8{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}},
		{[]uint32{3, 1, 0}, []uint8{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}},
		{[]uint32{0, 0, 0}, []uint8{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}},
		{[]uint32{7}, make([]uint8, 32)},
		{nil, make([]uint8, 32)},
	}
	for _, tc := range exact {
		if got := directory.BucketsForWeights(tc.w); !slices.Equal(got, tc.want) {
			t.Errorf("BucketsForWeights(%v) = %v, want %v", tc.w, got, tc.want)
		}
	}

	r := rand.New(rand.NewPCG(1, 2))
	for it := 0; it < 20000; it++ {
		n := 1 + r.IntN(directory.MaxLocations)
		w := make([]uint32, n)
		var total uint64
		for i := range w {
			switch it % 3 {
			case 0:
				w[i] = uint32(r.IntN(4))
			case 1:
				w[i] = uint32(r.IntN(1000))
			default:
				w[i] = r.Uint32() // large weights must not overflow
			}
			total += uint64(w[i])
		}
		b := directory.BucketsForWeights(w)
		if len(b) != directory.Buckets {
			t.Fatalf("%v: %d buckets", w, len(b))
		}
		count := make([]int, n)
		for _, x := range b {
			if int(x) >= n {
				t.Fatalf("%v: bucket entry %d out of range", w, x)
			}
			count[x]++
		}
		for i := range w {
			// Proportional: each share is the exact quota rounded down or up.
			var quota float64
			if total == 0 {
				quota = float64(directory.Buckets) / float64(n)
			} else {
				quota = float64(w[i]) * directory.Buckets / float64(total)
			}
			if d := float64(count[i]) - quota; d <= -1 || d >= 1 {
				t.Fatalf("%v: member %d has %d buckets for a quota of %.2f", w, i, count[i], quota)
			}
			if total > 0 && w[i] == 0 && count[i] != 0 {
				t.Fatalf("%v: zero-weight member %d has %d buckets", w, i, count[i])
			}
		}
		// Contiguous: one run per member with a share, in member order.
		rs := directory.Runs(b)
		for k, run := range rs {
			if k > 0 && run.Index <= rs[k-1].Index {
				t.Fatalf("%v = %v: runs %v out of member order", w, b, rs)
			}
			if int(run.Hi-run.Lo)+1 != count[run.Index] {
				t.Fatalf("%v = %v: member %d's run %v is not all its %d buckets", w, b, run.Index, run, count[run.Index])
			}
		}
	}
}

func TestRuns(t *testing.T) {
	for _, tc := range []struct {
		b    []uint8
		want []directory.Run
	}{
		{nil, nil},
		{[]uint8{4}, []directory.Run{{0, 0, 4}}},
		{[]uint8{0, 0, 1, 1, 1, 0}, []directory.Run{{0, 1, 0}, {2, 4, 1}, {5, 5, 0}}},
		{[]uint8{0, 1, 2, 0}, []directory.Run{{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 0}}},
	} {
		if got := directory.Runs(tc.b); !slices.Equal(got, tc.want) {
			t.Errorf("Runs(%v) = %v, want %v", tc.b, got, tc.want)
		}
	}
	// Every table is the union of its runs.
	r := rand.New(rand.NewPCG(3, 4))
	for it := 0; it < 1000; it++ {
		b := make([]uint8, directory.Buckets)
		for i := range b {
			b[i] = uint8(r.IntN(1 + it%4))
		}
		got := make([]uint8, directory.Buckets)
		next := 0
		for _, run := range directory.Runs(b) {
			if int(run.Lo) != next || run.Hi < run.Lo {
				t.Fatalf("%v: runs not consecutive at %v", b, run)
			}
			for i := run.Lo; i <= run.Hi; i++ {
				got[i] = run.Index
			}
			next = int(run.Hi) + 1
		}
		if next != len(b) || !slices.Equal(got, b) {
			t.Fatalf("Runs(%v) rebuilds %v", b, got)
		}
	}
}

func newDir(t testing.TB, cfg directory.Config) *directory.Directory {
	t.Helper()
	d, err := directory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConfig(t *testing.T) {
	d := newDir(t, directory.Config{})
	cfg := d.Config()
	if cfg.PartitionBits != 10 || cfg.Slots != 4096 || cfg.MaxNodes != 4096 || cfg.Window != 1_000_000 ||
		cfg.Mode != directory.ModeToR || cfg.Policy != directory.PolicyNetdir {
		t.Errorf("defaults: %+v", cfg)
	}
	if d.Partitions() != 1024 {
		t.Errorf("%d partitions", d.Partitions())
	}
	bad := []directory.Config{
		{PartitionBits: 21},
		{Slots: -1},
		{Slots: 1<<20 + 1},
		{MaxNodes: -1},
		{MaxNodes: 1<<16 + 1},
		{Mode: directory.ModeHost + 1},
		{Policy: directory.PolicyCoarse + 1},
	}
	for _, cfg := range bad {
		if _, err := directory.New(cfg); err == nil {
			t.Errorf("New(%+v) did not fail", cfg)
		}
	}
	for _, p := range []directory.Policy{directory.PolicyNetdir, directory.PolicyPegasus, directory.PolicyReplicas, directory.PolicyStatic, directory.PolicyCoarse} {
		if got, err := directory.ParsePolicy(p.String()); err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p, got, err)
		}
	}
	if _, err := directory.ParsePolicy("random"); err == nil {
		t.Error("ParsePolicy(random) did not fail")
	}
}

func TestSetPartitionErrors(t *testing.T) {
	d := newDir(t, directory.Config{PartitionBits: 2, MaxNodes: 16})
	good := []wire.NodeID{1, 2, 3}
	if err := d.SetPartition(3, good, nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		p       uint32
		chain   []wire.NodeID
		buckets []uint8
		want    error // nil: any error
	}{
		{"partition-out-of-range", 4, good, nil, directory.ErrRange},
		{"partition-huge", 1 << 31, good, nil, directory.ErrRange},
		{"empty-chain", 3, nil, nil, directory.ErrBadChain},
		{"chain-too-long", 3, []wire.NodeID{1, 2, 3, 4, 5, 6, 7, 8, 9}, nil, directory.ErrBadChain},
		{"duplicate-node", 3, []wire.NodeID{1, 2, 1}, nil, directory.ErrBadChain},
		{"node-at-max", 3, []wire.NodeID{1, 16}, nil, directory.ErrBadChain},
		{"node-far-above-max", 3, []wire.NodeID{65535}, nil, directory.ErrBadChain},
		{"bucket-out-of-range", 3, good, fill(3), directory.ErrBadBucket},
		{"buckets-too-few", 3, good, make([]uint8, 31), nil},
		{"buckets-too-many", 3, good, make([]uint8, 33), nil},
		{"buckets-empty-not-nil", 3, good, []uint8{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := d.SetPartition(tc.p, tc.chain, tc.buckets)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("SetPartition = %v, want %v", err, tc.want)
			}
			// A failed call leaves the partition as it was.
			p, ok := d.Partition(3)
			if !ok || p.R != 3 || p.Chain[0] != 1 || p.Buckets[1] != 1 {
				t.Fatalf("partition 3 changed: %+v", p)
			}
		})
	}
	if err := d.SetPartition(3, []wire.NodeID{1, 2, 3, 4, 5, 6, 7, 8}, nil); err != nil {
		t.Errorf("an 8-node chain: %v", err)
	}
	if err := d.SetPartitionBuckets(0, fill(0)); !errors.Is(err, directory.ErrRange) {
		t.Errorf("SetPartitionBuckets on a partition with no chain = %v", err)
	}
	if err := d.SetPartitionBuckets(9, fill(0)); !errors.Is(err, directory.ErrRange) {
		t.Errorf("SetPartitionBuckets out of range = %v", err)
	}
	if err := d.SetPartitionBuckets(3, fill(8)); !errors.Is(err, directory.ErrBadBucket) {
		t.Errorf("SetPartitionBuckets with entry 8 of an 8-node chain = %v", err)
	}
	if err := d.SetPartitionBuckets(3, fill(7)); err != nil {
		t.Errorf("SetPartitionBuckets: %v", err)
	}
	if p, _ := d.Partition(3); p.Buckets[0] != 7 {
		t.Errorf("SetPartitionBuckets did not apply: %v", p.Buckets)
	}
	if _, ok := d.Partition(4); ok {
		t.Error("Partition(4) of 4 reported present")
	}
	if _, ok := d.Partition(0); ok {
		t.Error("a partition with no chain reported present")
	}
}

// fill is a bucket table with every entry x.
func fill(x uint8) []uint8 {
	b := make([]uint8, directory.Buckets)
	for i := range b {
		b[i] = x
	}
	return b
}

func key(s string) wire.KeyHash { return wire.HashKey([]byte(s)) }

func TestInsertErrors(t *testing.T) {
	d := newDir(t, directory.Config{Slots: 2, MaxNodes: 64})
	locs := []wire.NodeID{1, 2, 3, 4}
	if _, err := d.Insert(key("a"), locs, 3, 7, nil); err != nil {
		t.Fatal(err)
	}
	var many []wire.NodeID
	for i := 0; i < 33; i++ {
		many = append(many, wire.NodeID(i))
	}
	tests := []struct {
		name    string
		h       wire.KeyHash
		locs    []wire.NodeID
		r       int
		buckets []uint8
		want    error
	}{
		{"exists", key("a"), locs, 3, nil, directory.ErrExists},
		{"no-locs", key("b"), nil, 1, nil, directory.ErrBadLocs},
		{"33-locs", key("b"), many, 3, nil, directory.ErrBadLocs},
		{"r-zero", key("b"), locs, 0, nil, directory.ErrBadLocs},
		{"r-negative", key("b"), locs, -1, nil, directory.ErrBadLocs},
		{"r-above-len", key("b"), locs, 5, nil, directory.ErrBadLocs},
		{"r-above-max-chain", key("b"), many[:10], 9, nil, directory.ErrBadLocs},
		{"duplicate", key("b"), []wire.NodeID{1, 2, 3, 2}, 3, nil, directory.ErrBadLocs},
		{"node-at-max", key("b"), []wire.NodeID{1, 2, 64}, 3, nil, directory.ErrBadLocs},
		{"bucket-out-of-range", key("b"), locs, 3, fill(4), directory.ErrBadBucket},
		{"buckets-short", key("b"), locs, 3, make([]uint8, 3), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := d.Insert(tc.h, tc.locs, tc.r, 0, tc.buckets); err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Insert = %v, want %v", err, tc.want)
			}
			if d.Len() != 1 {
				t.Fatalf("a failed Insert changed Len to %d", d.Len())
			}
		})
	}
	// Failed inserts took no slot: one is still free, then none.
	if _, err := d.Insert(key("b"), many[:32], 8, 0, nil); err != nil {
		t.Fatalf("32 locations, chain of 8: %v", err)
	}
	if _, err := d.Insert(key("c"), locs, 3, 0, nil); !errors.Is(err, directory.ErrFull) {
		t.Fatalf("Insert into a full directory = %v", err)
	}
	if err := d.SetSlotBuckets(key("c"), nil); !errors.Is(err, directory.ErrNotFound) {
		t.Errorf("SetSlotBuckets of an absent key = %v", err)
	}
	if err := d.SetSlotBuckets(key("a"), fill(4)); !errors.Is(err, directory.ErrBadBucket) {
		t.Errorf("SetSlotBuckets entry 4 of 4 locations = %v", err)
	}
	if err := d.Evict(key("c")); !errors.Is(err, directory.ErrNotFound) {
		t.Errorf("Evict of an absent key = %v", err)
	}
	if err := d.Evict(key("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Insert(key("c"), locs, 3, 0, nil); err != nil {
		t.Errorf("Insert after Evict: %v", err)
	}
}

func TestLookupEachAndCopies(t *testing.T) {
	d := newDir(t, directory.Config{Slots: 4})
	for i, k := range []string{"a", "b", "c"} {
		if idx, err := d.Insert(key(k), []wire.NodeID{1, 2, 3}, 3, uint64(i), nil); err != nil || int(idx) != i {
			t.Fatalf("Insert %s = %d, %v; slots are taken in order", k, idx, err)
		}
	}
	if err := d.Evict(key("b")); err != nil {
		t.Fatal(err)
	}
	var seen []uint64
	d.Each(func(idx uint32, s *directory.Slot) { seen = append(seen, s.VerDone) })
	if !slices.Equal(seen, []uint64{0, 2}) {
		t.Errorf("Each saw versions %v, want [0 2]", seen)
	}
	s, ok := d.Lookup(key("c"))
	if !ok || s.VerNext != 2 || s.N != 3 || s.R != 3 || s.Fresh != 0b111 {
		t.Fatalf("Lookup = %+v, %v", s, ok)
	}
	s.VerNext = 99
	if s2, _ := d.Lookup(key("c")); s2.VerNext != 2 {
		t.Error("Lookup returned a reference, not a copy")
	}
	if _, ok := d.Lookup(key("b")); ok {
		t.Error("an evicted key is still found")
	}
}

func TestReasonsAndVerdicts(t *testing.T) {
	rs := directory.Reasons()
	if len(rs) != 10 || rs[0] != directory.ReasonShort || rs[len(rs)-1] != directory.ReasonVSBVersion {
		t.Fatalf("Reasons() = %v", rs)
	}
	names := map[string]bool{}
	for _, r := range rs {
		if names[r.String()] || r.String() == "none" {
			t.Errorf("reason %d has name %q", r, r)
		}
		names[r.String()] = true
	}
	for v, want := range map[directory.Verdict]string{
		{Action: directory.Forward, Node: 7}:                         "forward node=7",
		{Action: directory.Drop, Reason: directory.ReasonVSBPending}: "drop reason=vsb-pending",
		{Action: directory.ToClient}:                                 "to-client",
		{Action: directory.Multicast}:                                "multicast",
		{Action: directory.Pass}:                                     "pass",
	} {
		if v.String() != want {
			t.Errorf("%#v.String() = %q, want %q", v, v.String(), want)
		}
	}
}

// pkt builds a header-and-key packet.
func pkt(t testing.TB, op wire.Op, k string, reqid, stamp uint64, node wire.NodeID) []byte {
	t.Helper()
	p := wire.Packet{Header: wire.Header{Op: op, ReqID: reqid, KeyHash: key(k), Stamp: stamp, Node: node, Load: 3, Timestamp: 10}, Key: []byte(k)}
	b, err := p.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// populated returns a directory with both partitions of 1 bit on chain
// (1,2,3), storage port 4, and key "hot" on LocationList (1,2,3,4) at
// version 7.
func populated(t testing.TB, cfg directory.Config) *directory.Directory {
	t.Helper()
	if cfg.PartitionBits == 0 {
		cfg.PartitionBits = 1
	}
	d := newDir(t, cfg)
	for p := uint32(0); p < uint32(d.Partitions()); p++ {
		if err := d.SetPartition(p, []wire.NodeID{1, 2, 3}, nil); err != nil {
			t.Fatal(err)
		}
	}
	d.SetPort(4, directory.PortStorage)
	if err := d.SetNodeStats(2, directory.NodeStats{Latency: 500, Load: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Insert(key("hot"), []wire.NodeID{1, 2, 3, 4}, 3, 7, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestProcessAllocs: Process allocates nothing on any path.
func TestProcessAllocs(t *testing.T) {
	tests := []struct {
		name   string
		b      []byte
		port   uint32
		want   directory.Action
		policy directory.Policy
	}{
		{"get-hit", pkt(t, wire.OpGet, "hot", 0x0102, 0, 0), 9, directory.Forward, directory.PolicyNetdir},
		{"get-hit-pegasus", pkt(t, wire.OpGet, "hot", 0x0102, 0, 0), 9, directory.Forward, directory.PolicyPegasus},
		{"get-miss", pkt(t, wire.OpGet, "cold", 0x0102, 0, 0), 9, directory.Forward, directory.PolicyNetdir},
		{"put-hit", pkt(t, wire.OpPut, "hot", 1, 0, 0), 9, directory.Forward, directory.PolicyNetdir},
		{"del-miss", pkt(t, wire.OpDel, "cold", 1, 0, 0), 9, directory.Forward, directory.PolicyNetdir},
		{"put-reply", pkt(t, wire.OpPutReply, "hot", 1, 0, 3), 9, directory.ToClient, directory.PolicyNetdir},
		{"err-reply", pkt(t, wire.OpErr, "hot", 1, 0, 1), 9, directory.ToClient, directory.PolicyNetdir},
		{"vsb-tail", pkt(t, wire.OpVSB, "hot", 0, 7, 3), 4, directory.Multicast, directory.PolicyNetdir},
		{"vsb-extra", pkt(t, wire.OpVSB, "hot", 0, 7, 4), 4, directory.Multicast, directory.PolicyNetdir},
		{"vsb-refused", pkt(t, wire.OpVSB, "hot", 0, 7, 1), 4, directory.Drop, directory.PolicyNetdir},
		{"node-op", pkt(t, wire.OpCopy, "hot", 0, 0, 1), 9, directory.Pass, directory.PolicyNetdir},
		{"short", pkt(t, wire.OpGet, "hot", 0, 0, 0)[:20], 9, directory.Drop, directory.PolicyNetdir},
	}
	for _, tc := range tests {
		d := populated(t, directory.Config{Policy: tc.policy})
		stamp := uint64(7)
		var got directory.Action
		allocs := testing.AllocsPerRun(200, func() {
			if tc.name == "put-reply" {
				stamp++
				wire.Frame(tc.b).SetStamp(stamp) // raise ver_done every time
			}
			got = d.Process(tc.b, tc.port, 100).Action
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per Process", tc.name, allocs)
		}
		if got != tc.want {
			t.Errorf("%s: action %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNodeIDsBeyondMaxNodes: node ids at or above MaxNodes are refused by
// the control API and harmless in packets.
func TestNodeIDsBeyondMaxNodes(t *testing.T) {
	d := populated(t, directory.Config{MaxNodes: 5})
	if err := d.SetNodeStats(5, directory.NodeStats{Load: 1}); !errors.Is(err, directory.ErrRange) {
		t.Errorf("SetNodeStats(5) = %v", err)
	}
	if st := d.Node(65535); st != (directory.NodeStats{}) {
		t.Errorf("Node(65535) = %+v", st)
	}
	if _, err := d.Insert(key("k"), []wire.NodeID{1, 2, 5}, 3, 0, nil); !errors.Is(err, directory.ErrBadLocs) {
		t.Errorf("Insert with node 5 = %v", err)
	}
	if err := d.SetPartition(0, []wire.NodeID{4, 65535}, nil); !errors.Is(err, directory.ErrBadChain) {
		t.Errorf("SetPartition with node 65535 = %v", err)
	}
	for _, n := range []wire.NodeID{5, 6, 4096, 65535} {
		for _, op := range []wire.Op{wire.OpGetReply, wire.OpPutReply, wire.OpDelReply, wire.OpErr} {
			if v := d.Process(pkt(t, op, "hot", 0, 8, n), 4, 100); v.Action != directory.ToClient {
				t.Errorf("%v from node %d: %v", op, n, v)
			}
		}
		if v := d.Process(pkt(t, wire.OpVSB, "hot", 0, 8, n), 4, 100); v.Reason != directory.ReasonVSBNotMember {
			t.Errorf("VSB from node %d: %v", n, v)
		}
		// A request's node field is the client's guess; it is overwritten.
		if v := d.Process(pkt(t, wire.OpGet, "hot", 0, 0, n), 9, 100); v.Action != directory.Forward || v.Node > 4 {
			t.Errorf("GET naming node %d: %v", n, v)
		}
	}
	if st := d.Node(4); st != (directory.NodeStats{}) {
		t.Errorf("replies from out-of-range nodes changed node 4: %+v", st)
	}
	// The put-replies above (version 8 from out-of-range nodes) still
	// completed the write: the version is the slot's, the sender only teaches.
	if s, _ := d.Lookup(key("hot")); s.VerDone != 8 {
		t.Errorf("ver_done = %d", s.VerDone)
	}
}

func TestRunChanges(t *testing.T) {
	old := directory.BucketsForWeights([]uint32{1, 1, 2}) // 0-7, 8-15, 16-31
	b := directory.BucketsForWeights([]uint32{1, 0, 1})   // 0-15, 16-31
	del, same, add := directory.RunChanges(old, b)
	if want := []directory.Run{{0, 7, 0}, {8, 15, 1}}; !slices.Equal(del, want) {
		t.Errorf("del = %v, want %v", del, want)
	}
	if want := []directory.Run{{16, 31, 2}}; !slices.Equal(same, want) {
		t.Errorf("same = %v, want %v", same, want)
	}
	if want := []directory.Run{{0, 15, 0}}; !slices.Equal(add, want) {
		t.Errorf("add = %v, want %v", add, want)
	}
	if del, same, add := directory.RunChanges(nil, b); len(del)+len(same) != 0 || !slices.Equal(add, directory.Runs(b)) {
		t.Errorf("from nothing: del %v same %v add %v", del, same, add)
	}
	if del, same, add := directory.RunChanges(b, nil); len(same)+len(add) != 0 || !slices.Equal(del, directory.Runs(b)) {
		t.Errorf("to nothing: del %v same %v add %v", del, same, add)
	}
}

func TestBucketsMovedIgnoresOneBucketOfNoise(t *testing.T) {
	even := directory.BucketsForWeights([]uint32{1, 1})
	if directory.BucketsMoved(even, directory.BucketsForWeights([]uint32{17, 15}), 2) {
		t.Error("a move of one bucket counted as moved")
	}
	if !directory.BucketsMoved(even, directory.BucketsForWeights([]uint32{20, 12}), 2) {
		t.Error("a move of four buckets not counted")
	}
	if !directory.BucketsMoved(directory.BucketsForWeights([]uint32{31, 1}), directory.BucketsForWeights([]uint32{1, 0}), 2) {
		t.Error("a member losing its last bucket not counted")
	}
	if got := directory.BucketShares(even, 2); got[0] != 16 || got[1] != 16 {
		t.Errorf("BucketShares(even) = %v", got)
	}
}

// TestVSBAfterEvictAndPortKinds: a VSB for an evicted key is refused even
// when the VSB before it found that key and another key took its slot;
// storage ports are told apart below and above 1<<16, and unset again.
func TestVSBAfterEvictAndPortKinds(t *testing.T) {
	d := populated(t, directory.Config{})
	vsb := func(k string, port uint32) directory.Verdict {
		return d.Process(pkt(t, wire.OpVSB, k, 0, 7, 4), port, 0)
	}
	if v := vsb("hot", 4); v.Action != directory.Multicast {
		t.Fatalf("extra's VSB = %v", v)
	}
	if err := d.Evict(key("hot")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Insert(key("warm"), []wire.NodeID{1, 2, 3, 4}, 3, 7, nil); err != nil {
		t.Fatal(err)
	}
	if v := vsb("hot", 4); v.Reason != directory.ReasonVSBNotCached {
		t.Errorf("VSB of the evicted key = %v, want vsb-not-cached", v)
	}
	if v := vsb("warm", 4); v.Action != directory.Multicast {
		t.Errorf("VSB of the key in its slot = %v", v)
	}
	d.SetPort(70000, directory.PortStorage)
	for _, tc := range []struct {
		port uint32
		want directory.Action
	}{{70000, directory.Multicast}, {5000, directory.Drop}, {9, directory.Drop}} {
		if v := vsb("warm", tc.port); v.Action != tc.want {
			t.Errorf("VSB on port %d = %v, want %v", tc.port, v, tc.want)
		}
	}
	d.SetPort(70000, directory.PortClient)
	d.SetPort(4, directory.PortClient)
	for _, port := range []uint32{70000, 4} {
		if v := vsb("warm", port); v.Reason != directory.ReasonVSBPort {
			t.Errorf("VSB on client port %d = %v, want vsb-port", port, v)
		}
	}
}

// TestVSBMembersInAnyOrder: a VSB's node is found in the LocationList
// whatever the order VSBs come in (the next index after the previous
// VSB's is only tried first): in order, reversed, shuffled, with nodes
// outside the list and chain members that are not the tail between them.
func TestVSBMembersInAnyOrder(t *testing.T) {
	d := populated(t, directory.Config{MaxNodes: 64})
	locs := []wire.NodeID{1, 2, 3}
	for n := wire.NodeID(10); n < 22; n++ {
		locs = append(locs, n)
	}
	if _, err := d.Insert(key("wide"), locs, 3, 7, nil); err != nil {
		t.Fatal(err)
	}
	for n := uint32(1); n < 40; n++ {
		d.SetPort(n, directory.PortStorage)
	}
	// want: a member at or after the tail is accepted, any other refused.
	want := func(n wire.NodeID) directory.Verdict {
		if slices.Index(locs, n) >= 2 {
			return directory.Verdict{Action: directory.Multicast}
		}
		return directory.Verdict{Action: directory.Drop, Reason: directory.ReasonVSBNotMember}
	}
	r := rand.New(rand.NewPCG(7, 8))
	inOrder := slices.Clone(locs)
	reversed := slices.Clone(locs)
	slices.Reverse(reversed)
	mixed := append(slices.Clone(locs), 30, 31, 1, 2, 32)
	r.Shuffle(len(mixed), func(i, j int) { mixed[i], mixed[j] = mixed[j], mixed[i] })
	skipping := []wire.NodeID{10, 30, 12, 11, 31, 13, 2, 14, 21, 20, 3, 1}
	for name, order := range map[string][]wire.NodeID{"in order": inOrder, "reversed": reversed, "mixed": mixed, "skipping": skipping} {
		for _, n := range order {
			if v := d.Process(pkt(t, wire.OpVSB, "wide", 0, 7, n), uint32(n), 0); v != want(n) {
				t.Errorf("%s: VSB of node %d = %v, want %v", name, n, v, want(n))
			}
		}
	}
}

// TestPartitionsKeepTheirOwnChains: every partition holds the chain set
// for it, whatever order the table stores them in, at each table size.
func TestPartitionsKeepTheirOwnChains(t *testing.T) {
	for _, pbits := range []uint{0, 1, 5, 10} {
		d := newDir(t, directory.Config{PartitionBits: pbits, MaxNodes: 1 << 12})
		n := uint32(1) << pbits
		chainOf := func(p uint32) []wire.NodeID { return []wire.NodeID{wire.NodeID(p + 1), wire.NodeID(p + 1 + n)} }
		for p := range n {
			if err := d.SetPartition(p, chainOf(p), nil); err != nil {
				t.Fatal(err)
			}
		}
		for p := range n {
			part, ok := d.Partition(p)
			if !ok || part.R != 2 || !slices.Equal(part.Chain[:2], chainOf(p)) {
				t.Fatalf("%d partition bits: partition %d holds %v (R %d), want %v", pbits, p, part.Chain, part.R, chainOf(p))
			}
		}
	}
}

// TestCopyPartitions: a directory given another's table holds every
// partition as set in the other, chains and buckets, and refuses a table
// of another size or chains of nodes it cannot hold.
func TestCopyPartitions(t *testing.T) {
	const pbits = 6
	src := newDir(t, directory.Config{PartitionBits: pbits, MaxNodes: 64})
	r := rand.New(rand.NewPCG(3, 4))
	for p := range uint32(1) << pbits {
		if p%5 == 4 {
			continue // left unset: must stay so in the copy
		}
		chain := []wire.NodeID{wire.NodeID(1 + r.IntN(20)), wire.NodeID(21 + r.IntN(20)), wire.NodeID(41 + r.IntN(20))}
		buckets := make([]uint8, directory.Buckets)
		for i := range buckets {
			buckets[i] = uint8(r.IntN(len(chain)))
		}
		if err := src.SetPartition(p, chain, buckets); err != nil {
			t.Fatal(err)
		}
	}
	d := newDir(t, directory.Config{PartitionBits: pbits, MaxNodes: 64})
	if err := d.SetPartition(4, []wire.NodeID{9}, nil); err != nil { // overwritten by the copy: unset
		t.Fatal(err)
	}
	if err := d.CopyPartitions(src); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(1) << pbits {
		want, wantOK := src.Partition(p)
		got, ok := d.Partition(p)
		if ok != wantOK || got != want {
			t.Fatalf("partition %d: copy %+v (set %v), want %+v (set %v)", p, got, ok, want, wantOK)
		}
	}
	if err := newDir(t, directory.Config{PartitionBits: pbits + 1, MaxNodes: 64}).CopyPartitions(src); err == nil {
		t.Error("copying 64 partitions into a directory of 128: no error")
	}
	if err := newDir(t, directory.Config{PartitionBits: pbits, MaxNodes: 32}).CopyPartitions(src); err == nil {
		t.Error("copying chains of ids below 64 into a directory of ids below 32: no error")
	}
	if err := newDir(t, directory.Config{PartitionBits: pbits, MaxNodes: 128}).CopyPartitions(src); err != nil {
		t.Errorf("copying into a directory of more nodes: %v", err)
	}
}
