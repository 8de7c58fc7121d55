package layout

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/netdir/netdir/wire"
)

func TestPlacement(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want map[uint32][]wire.NodeID
	}{
		{
			// Ring over sorted ids [10 20 30 40]: partition p starts at index p mod 4.
			name: "ring",
			yaml: "partition_bits: 3\nnodes: [{id: 30, addr: 127.0.0.1:3}, {id: 10, addr: 127.0.0.1:1}, {id: 20, addr: 127.0.0.1:2}, {id: 40, addr: 127.0.0.1:4}]",
			want: map[uint32][]wire.NodeID{0: {10, 20, 30}, 3: {40, 10, 20}, 5: {20, 30, 40}},
		},
		{
			// Ring over sorted ids [2 5 7], partition 1 overridden.
			name: "override",
			yaml: "partition_bits: 3\nreplicas: 2\nnodes: [{id: 7, addr: 127.0.0.1:9007}, {id: 2, addr: 127.0.0.1:9002}, {id: 5, addr: 127.0.0.1:9005}]\nchains:\n  1: [7, 5]",
			want: map[uint32][]wire.NodeID{0: {2, 5}, 1: {7, 5}, 2: {7, 2}, 3: {2, 5}, 5: {7, 2}},
		},
	} {
		m, err := Parse([]byte(tc.yaml))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for p, w := range tc.want {
			if got := m.Chain(p); !slices.Equal(got, w) {
				t.Errorf("%s: chain %d = %v, want %v", tc.name, p, got, w)
			}
		}
	}
}

func TestRingBalance(t *testing.T) {
	m, err := Parse([]byte("partition_bits: 3\nnodes: [{id: 30, addr: 127.0.0.1:3}, {id: 10, addr: 127.0.0.1:1}, {id: 20, addr: 127.0.0.1:2}, {id: 40, addr: 127.0.0.1:4}]"))
	if err != nil {
		t.Fatal(err)
	}
	// Every node holds each chain position equally often.
	pos := map[[2]int]int{}
	for _, c := range m.Chains() {
		for j, n := range c {
			pos[[2]int{int(n), j}]++
		}
	}
	for k, v := range pos {
		if v != 2 {
			t.Errorf("node %d at position %d in %d partitions, want 2", k[0], k[1], v)
		}
	}
	if m.Position(3, 10) != 1 || m.Position(3, 30) != -1 {
		t.Error("Position wrong")
	}
	if h := wire.HashKey([]byte("k")); !slices.Equal(m.ChainOf(h), m.Chain(h.Partition(3))) {
		t.Error("ChainOf is not the chain of the key's partition")
	}
}

func TestConfig(t *testing.T) {
	m, err := Parse([]byte(`
epoch: 3
partition_bits: 3
replicas: 2
dataplane: 127.0.0.1:7420
nodes:
  - {id: 7, addr: 127.0.0.1:9007, port: 4, mac: 02:4e:44:01:00:07}
  - {id: 2, addr: 127.0.0.1:9002}
  - {id: 5, addr: 127.0.0.1:9005}
`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Partitions() != 8 || m.Bits() != 3 || m.Epoch() != 3 || m.R() != 2 {
		t.Fatalf("partitions %d bits %d epoch %d R %d", m.Partitions(), m.Bits(), m.Epoch(), m.R())
	}
	if fmt.Sprint(m.Nodes()) != "[2 5 7]" || m.DataPlane().String() != "127.0.0.1:7420" {
		t.Fatalf("nodes %v, dataplane %v", m.Nodes(), m.DataPlane())
	}
	n, ok := m.Node(7)
	if !ok || n.Addr != "127.0.0.1:9007" || n.Port != 4 || n.MAC.String() != "02:4e:44:01:00:07" {
		t.Fatalf("node 7 = %+v", n)
	}
	if a, ok := m.Addr(2); !ok || a.String() != "127.0.0.1:9002" {
		t.Fatalf("addr of 2 = %v", a)
	}
	if _, ok := m.Node(3); ok {
		t.Fatal("node 3 found")
	}
	c := m.Config()
	c2 := m.Config()
	c2.Nodes[0].MAC[0] = 0xff
	if !reflect.DeepEqual(c, m.Config()) {
		t.Fatal("changing a Config changed the Map")
	}
	// Defaults.
	d, err := New(Config{Nodes: []Node{{ID: 1, Addr: "127.0.0.1:1"}, {ID: 2, Addr: "127.0.0.1:2"}, {ID: 3, Addr: "127.0.0.1:3"}}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Bits() != DefaultPartitionBits || d.R() != DefaultReplicas || d.DataPlane().IsValid() {
		t.Fatalf("defaults: bits %d R %d dataplane %v", d.Bits(), d.R(), d.DataPlane())
	}
}

// TestValidation: every refusal is one line naming the field by its path
// and the value.
func TestValidation(t *testing.T) {
	const two = "replicas: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}]\n"
	for _, tc := range []struct{ yaml, want string }{
		{"nodes: []", "layout: nodes: none given"},
		{"replicas: 3\nnodes: [{id: 1, addr: 127.0.0.1:1}]", "layout: replicas: 3: more than the 1 nodes"},
		{"replicas: 9\nnodes: [{id: 1, addr: 127.0.0.1:1}]", "layout: replicas: 9: want 1..8"},
		{"replicas: -1\nnodes: [{id: 1, addr: 127.0.0.1:1}]", "layout: replicas: -1: want 1..8"},
		{"partition_bits: 21\nnodes: [{id: 1, addr: 127.0.0.1:1}]", "layout: partition_bits: 21: at most 20"},
		{"replicas: 1\nnodes: [{id: 1, addr: nope}]", `layout: nodes[0].addr: "nope": want IP:port`},
		{"replicas: 1\nnodes: [{id: 1}]", `layout: nodes[0].addr: "": want IP:port`},
		{"replicas: 1\nnodes: [{id: -1, addr: 127.0.0.1:1}]", "layout: nodes[0].id: -1: want an integer 0..65535"},
		{"replicas: 1\nnodes:\n  - id: x\n    addr: 127.0.0.1:1", "layout: nodes[0].id: x: want an integer 0..65535"},
		{"nodes: [{id: 1", "layout: line 1: did not find expected ',' or '}'"},
		{"replicas: 1\nnodes: [{id: 0, addr: 127.0.0.1:1}]", "layout: nodes[0].id: 0: ids start at 1"},
		{"replicas: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 1, addr: 127.0.0.1:2}]", "layout: nodes[1].id: 1 duplicates nodes[0]"},
		{"replicas: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}, {id: 3, addr: 127.0.0.1:1}]",
			"layout: nodes[2].addr: 127.0.0.1:1 duplicates nodes[0]"},
		{"replicas: 1\nnodes: [{id: 1, addr: 127.0.0.1:1, mac: 02:4e}]", "layout: nodes[0].mac: mac 02:4e: want 6 bytes such as 02:4e:44:01:00:01"},
		{two + "dataplane: here", `layout: dataplane: "here": want IP:port`},
		{two + "dataplane: 127.0.0.1:2", "layout: dataplane: 127.0.0.1:2 duplicates nodes[1].addr"},
		{two + "partition_bits: 2\nchains: {9: [1]}", "layout: chains.9: no partition 9 of 4"},
		{two + "chains: {0: [4]}", "layout: chains.0[0]: 4 is not in nodes"},
		{"replicas: 2\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}]\nchains: {0: [1, 1]}",
			"layout: chains.0[1]: 1 duplicates chains.0[0]"},
		{"replicas: 2\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}]\nchains: {0: [1]}",
			"layout: chains.0: [1]: 1 members, want replicas (2)"},
		{two + "down: [7]", "layout: down[0]: 7 is not in nodes"},
		{two + "down: [1]\ntails: [1]", "layout: tails[0]: 1 is down too"},
		{two + "down: [1, 2]", "layout: down: every member of partition 0's chain is down"},
		{two + "spares: {0: 2}", "layout: spares.0: 2 is not in the partition's placement"},
		{two + "filling: {1: [3]}", "layout: filling.1: 3: the node is not in the partition's chain"},
		{"replica: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}]", "layout: replica: unknown field"},
		{"replicas: 1\nnode:\n  - {id: 1, addr: 127.0.0.1:1}", "layout: node: unknown field"},
		{"replicas: 1\nnodes:\n  - {id: 1, adr: 127.0.0.1:1}", "layout: nodes[0].adr: unknown field"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n error %v\n want  %s", tc.yaml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error of several lines: %q", tc.yaml, err)
		}
	}
}

// TestLoadNamesTheFile: a layout file's errors start with its name.
func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodes.yaml")
	y := "replicas: 1\nnodes:\n  - {id: 1, addr: 127.0.0.1:7001}\n  - {id: 2, addr: 127.0.0.1:7002}\n  - {id: 3, addr: 127.0.0.1:7001}\n"
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if want := path + ": nodes[2].addr: 127.0.0.1:7001 duplicates nodes[0]"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

// TestDerive derives a later layout from a Map's Config, as chain
// reconfiguration does, and checks that the old Map is unchanged.
func TestDerive(t *testing.T) {
	old, err := New(Config{Epoch: 1, PartitionBits: 2, Replicas: 2,
		Nodes: []Node{{ID: 1, Addr: "127.0.0.1:1"}, {ID: 2, Addr: "127.0.0.1:2"}, {ID: 3, Addr: "127.0.0.1:3"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := old.Config()
	c.Epoch++
	c.Chains = map[uint32][]wire.NodeID{1: {3, 1}}
	next, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if next.Epoch() != 2 || fmt.Sprint(next.Chain(1)) != "[3 1]" || fmt.Sprint(next.Chain(0)) != "[1 2]" {
		t.Fatalf("next: epoch %d, chains %v", next.Epoch(), next.Chains())
	}
	c.Chains[1][0] = 2
	if old.Epoch() != 1 || fmt.Sprint(old.Chain(1)) != "[2 3]" || fmt.Sprint(next.Chain(1)) != "[3 1]" {
		t.Fatalf("old: epoch %d, chain 1 %v; next chain 1 %v", old.Epoch(), old.Chain(1), next.Chain(1))
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	m, err := New(Config{Epoch: 4, PartitionBits: 2, Replicas: 2, DataPlane: "127.0.0.1:7420",
		Nodes:  []Node{{ID: 1, Addr: "127.0.0.1:1", Port: 3, MAC: MAC{2, 0x4e, 0x44, 1, 0, 1}}, {ID: 2, Addr: "127.0.0.1:2"}},
		Chains: map[uint32][]wire.NodeID{3: {2, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(b)
	if err != nil {
		t.Fatalf("%v in\n%s", err, b)
	}
	if !reflect.DeepEqual(back.Config(), m.Config()) || !reflect.DeepEqual(back.Chains(), m.Chains()) {
		t.Fatalf("round trip:\n%s\n%+v\nwant %+v", b, back.Config(), m.Config())
	}
}

// TestWithoutWithTail splices a head, a middle and a tail out and back in,
// and checks epochs, chains, slots and the YAML round trip.
func TestWithoutWithTail(t *testing.T) {
	m, err := Parse([]byte("epoch: 4\npartition_bits: 2\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}, {id: 3, addr: 127.0.0.1:3}, {id: 4, addr: 127.0.0.1:4}]"))
	if err != nil {
		t.Fatal(err)
	}
	// Placement: 0:[1 2 3] 1:[2 3 4] 2:[3 4 1] 3:[4 1 2]; node 2 is head
	// of 1, middle of 0, tail of 3.
	w, err := m.Without(2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32][]wire.NodeID{0: {1, 3}, 1: {3, 4}, 2: {3, 4, 1}, 3: {4, 1}}
	for p, ch := range want {
		if got := w.Chain(p); !slices.Equal(got, ch) {
			t.Errorf("without 2: chain %d = %v, want %v", p, got, ch)
		}
	}
	if w.Epoch() != 5 || w.Slot(0, 3) != 2 || w.Slot(0, 2) != 1 || w.Position(0, 2) != -1 {
		t.Errorf("without 2: epoch %d, slot(0,3) %d, slot(0,2) %d, position(0,2) %d", w.Epoch(), w.Slot(0, 3), w.Slot(0, 2), w.Position(0, 2))
	}
	if _, err := w.Without(2); err == nil {
		t.Error("without 2 twice: no error")
	}
	back, err := w.WithTail(2)
	if err != nil {
		t.Fatal(err)
	}
	want = map[uint32][]wire.NodeID{0: {1, 3, 2}, 1: {3, 4, 2}, 2: {3, 4, 1}, 3: {4, 1, 2}}
	for p, ch := range want {
		if got := back.Chain(p); !slices.Equal(got, ch) {
			t.Errorf("with tail 2: chain %d = %v, want %v", p, got, ch)
		}
	}
	if back.Epoch() != 6 || back.Slot(1, 2) != 0 {
		t.Errorf("with tail 2: epoch %d, slot(1,2) %d", back.Epoch(), back.Slot(1, 2))
	}
	if _, err := back.WithTail(2); err == nil {
		t.Error("with tail 2 twice: no error")
	}
	b, err := back.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(again.Chains(), back.Chains()) || again.Epoch() != back.Epoch() {
		t.Errorf("round trip changed the layout:\n%s", b)
	}
	// One member left: splicing it out too fails.
	one, err := Parse([]byte("replicas: 2\npartition_bits: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}]"))
	if err != nil {
		t.Fatal(err)
	}
	if one, err = one.Without(1); err != nil {
		t.Fatal(err)
	}
	if _, err := one.Without(2); err == nil {
		t.Error("splicing out the last member: no error")
	}
}

// TestReplace replaces a down node by spares: every chain it was placed in
// has R members again, each spare at the tail and in the down node's slot,
// the other members keep their slots, and the spares are spread evenly.
func TestReplace(t *testing.T) {
	m := fiveNodes(t)
	if _, _, err := m.Replace(2); err == nil {
		t.Error("replacing a live node: no error")
	}
	down, err := m.Without(2)
	if err != nil {
		t.Fatal(err)
	}
	r, n, err := down.Replace(2)
	if err != nil {
		t.Fatal(err)
	}
	if n != m.Placed(2) || n != 5 || r.Epoch() != down.Epoch()+1 || r.Placed(2) != 0 {
		t.Errorf("replaced in %d chains of %d placed, epoch %d after %d, still placed in %d", n, m.Placed(2), r.Epoch(), down.Epoch(), r.Placed(2))
	}
	load := map[wire.NodeID]int{}
	for p := range r.Partitions() {
		part := uint32(p)
		ch := r.Chain(part)
		for _, id := range ch {
			load[id]++
		}
		if len(ch) != 3 || slices.Contains(ch, 2) || len(slices.Compact(slices.Sorted(slices.Values(ch)))) != 3 {
			t.Errorf("partition %d: chain %v, want 3 distinct members without 2", p, ch)
		}
		j := m.Slot(part, 2)
		spare, ok := r.Spare(part)
		if j < 0 {
			if ok || !slices.Equal(ch, m.Chain(part)) {
				t.Errorf("partition %d without node 2: chain %v→%v, spare %d", p, m.Chain(part), ch, spare)
			}
			continue
		}
		if !ok || ch[len(ch)-1] != spare || r.Slot(part, spare) != j || m.Slot(part, spare) >= 0 {
			t.Errorf("partition %d: chain %v, spare %d (%v) in slot %d, node 2 was in slot %d", p, ch, spare, ok, r.Slot(part, spare), j)
		}
		for _, id := range m.Chain(part) {
			if id != 2 && r.Slot(part, id) != m.Slot(part, id) {
				t.Errorf("partition %d: node %d moved from slot %d to %d", p, id, m.Slot(part, id), r.Slot(part, id))
			}
		}
	}
	// 8 chains of 3 over the 4 live nodes: 6 each, least-loaded first.
	for id, l := range load {
		if l != 6 {
			t.Errorf("node %d in %d chains, want 6: %v", id, l, load)
		}
	}
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(again.Chains(), r.Chains()) {
		t.Errorf("round trip changed the layout:\n%s", b)
	}
	// A spare that dies is spliced out like any member, and replaced in turn.
	spare, _ := r.Spare(0)
	w, err := r.Without(spare)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Spare(0); ok || slices.Contains(w.Chain(0), spare) || len(w.Chain(0)) != 2 {
		t.Errorf("spare %d down: chain 0 %v", spare, w.Chain(0))
	}
	if w2, _, err := w.Replace(spare); err != nil || len(w2.Chain(0)) != 3 {
		t.Errorf("replacing spare %d: %v", spare, err)
	}
	// Every live node is in every chain: no spare.
	three, err := Parse([]byte("partition_bits: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}, {id: 3, addr: 127.0.0.1:3}]"))
	if err != nil {
		t.Fatal(err)
	}
	if three, err = three.Without(3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := three.Replace(3); !errors.Is(err, ErrNoSpare) {
		t.Errorf("three nodes, one down: %v, want ErrNoSpare", err)
	}
	// A spare outside the placement is refused.
	if _, err := Parse([]byte("partition_bits: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}, {id: 3, addr: 127.0.0.1:3}, {id: 4, addr: 127.0.0.1:4}]\nspares: {0: 4}")); err == nil {
		t.Error("a spare outside its placement: no error")
	}
}

// fiveNodes is a layout of 5 nodes and 8 partitions at epoch 2.
func fiveNodes(t *testing.T) *Map {
	t.Helper()
	m, err := Parse([]byte("epoch: 2\npartition_bits: 3\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}, {id: 3, addr: 127.0.0.1:3}, {id: 4, addr: 127.0.0.1:4}, {id: 5, addr: 127.0.0.1:5}]"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// replaced is fiveNodes with node 2 spliced out and replaced by spares, and
// the number of chains it was replaced in.
func replaced(t *testing.T) (*Map, int) {
	t.Helper()
	down, err := fiveNodes(t).Without(2)
	if err != nil {
		t.Fatal(err)
	}
	r, n, err := down.Replace(2)
	if err != nil {
		t.Fatal(err)
	}
	return r, n
}

// TestFilling: a spare joins its chains filling, takes part in the chain
// (writes) but not in the read set until Filled marks it caught up, and the
// mark survives the YAML round trip.
func TestFilling(t *testing.T) {
	r, n := replaced(t)
	if got := len(r.FillingParts()); got != n {
		t.Fatalf("%d partitions filling after %d replaced", got, n)
	}
	var first uint32
	for i, p := range r.FillingParts() {
		spare, ok := r.Spare(p)
		ch, rs := r.Chain(p), r.ReadSet(p)
		if !ok || !slices.Equal(r.FillingIn(p), []wire.NodeID{spare}) || ch[len(ch)-1] != spare || r.Readable(p, spare) || slices.Contains(rs, spare) || len(rs) != len(ch)-1 {
			t.Errorf("partition %d: chain %v, read set %v, filling %v, spare %d (%v)", p, ch, rs, r.FillingIn(p), spare, ok)
		}
		if i == 0 {
			first = p
		}
	}
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(b)
	if err != nil || !slices.Equal(back.FillingParts(), r.FillingParts()) {
		t.Fatalf("round trip: %v, filling %v want %v", err, back.FillingParts(), r.FillingParts())
	}
	spare, _ := r.Spare(first)
	f, err := r.Filled(map[wire.NodeID][]uint32{spare: {first, 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if f.Epoch() != r.Epoch()+1 || len(f.FillingParts()) != n-1 || !f.Readable(first, spare) ||
		!slices.Equal(f.ReadSet(first), f.Chain(first)) || !slices.Equal(f.Chain(first), r.Chain(first)) {
		t.Errorf("filled %d: epoch %d after %d, filling %v, read set %v of chain %v", first, f.Epoch(), r.Epoch(), f.FillingParts(), f.ReadSet(first), f.Chain(first))
	}
	if same, err := f.Filled(map[wire.NodeID][]uint32{spare: {first}, 1: {first}}); err != nil || same != f {
		t.Errorf("filling nothing: %v, a new layout %v", err, same != f)
	}
	// The last caught-up member of a chain is not spliced out: the filling
	// members alone would serve what they never copied.
	ch := r.Chain(first)
	m := r
	for _, id := range ch[:len(ch)-2] {
		if m, err = m.Without(id); err != nil {
			t.Fatalf("splice out %d of %v: %v", id, ch, err)
		}
	}
	if _, err := m.Without(ch[len(ch)-2]); err == nil {
		t.Errorf("partition %d: the last caught-up member %d of %v spliced out, leaving its filling spare alone", first, ch[len(ch)-2], ch)
	}
	// A node fills only chains it is in.
	if _, err := Parse([]byte("partition_bits: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}, {id: 3, addr: 127.0.0.1:3}]\nreplicas: 2\nfilling: {3: [0]}")); err == nil {
		t.Error("filling a chain it is not in: no error")
	}
}

// TestRejoinFills: a node back as tail (WithTail) fills every chain it
// shares, as a spare does: out of the read sets and of the read weights
// until Filled; the chains it does not share it is left out of; spliced
// out again, it fills nothing.
func TestRejoinFills(t *testing.T) {
	m := fiveNodes(t)
	down, err := m.Without(2)
	if err != nil {
		t.Fatal(err)
	}
	back, err := down.WithTail(2)
	if err != nil {
		t.Fatal(err)
	}
	var parts []uint32
	for p := range uint32(back.Partitions()) {
		ch := back.Chain(p)
		if !slices.Contains(ch, 2) {
			if len(back.FillingIn(p)) != 0 {
				t.Errorf("partition %d without node 2: filling %v", p, back.FillingIn(p))
			}
			continue
		}
		parts = append(parts, p)
		w := back.ReadWeights(p)
		if ch[len(ch)-1] != 2 || !slices.Equal(back.FillingIn(p), []wire.NodeID{2}) || back.Readable(p, 2) ||
			slices.Contains(back.ReadSet(p), 2) || w[len(w)-1] != 0 || w[0] == 0 {
			t.Errorf("partition %d: chain %v, filling %v, read set %v, weights %v", p, ch, back.FillingIn(p), back.ReadSet(p), w)
		}
	}
	if !slices.Equal(back.FillingParts(), parts) {
		t.Errorf("filling %v, want node 2's chains %v", back.FillingParts(), parts)
	}
	half, err := back.Filled(map[wire.NodeID][]uint32{2: parts[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if !half.Readable(parts[0], 2) || half.Readable(parts[1], 2) || !slices.Equal(half.Chain(parts[0]), back.Chain(parts[0])) {
		t.Errorf("after filling partition %d: readable %v, %d readable %v", parts[0], half.Readable(parts[0], 2), parts[1], half.Readable(parts[1], 2))
	}
	again, err := half.Without(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.FillingParts()) != 0 {
		t.Errorf("node 2 down again: filling %v", again.FillingParts())
	}
}

// TestJoined: every derivation dates the members that join a chain to its
// epoch and keeps the others' dates, Filled (no chain changes) included,
// through the YAML round trip; a date after the epoch is an error.
func TestJoined(t *testing.T) {
	m := fiveNodes(t)
	down, err := m.Without(2)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := down.Replace(2)
	if err != nil {
		t.Fatal(err)
	}
	first := r.FillingParts()[0]
	f, err := r.Filled(map[wire.NodeID][]uint32{r.FillingIn(first)[0]: {first}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	joinedAt := 0
	for p := range uint32(m.Partitions()) {
		for _, id := range f.Chain(p) {
			want := uint32(0)
			switch {
			case !slices.Contains(down.Chain(p), id):
				want = r.Epoch()
			case !slices.Contains(m.Chain(p), id):
				want = down.Epoch()
			}
			if want != 0 {
				joinedAt++
			}
			if got := back.Joined(p, id); got != want || f.Joined(p, id) != want {
				t.Errorf("partition %d (chains %v %v %v): node %d joined at %d (%d before YAML), want %d", p, m.Chain(p), down.Chain(p), r.Chain(p), id, got, f.Joined(p, id), want)
			}
		}
	}
	if joinedAt == 0 {
		t.Error("no member joined a chain: the test tests nothing")
	}
	if _, err := Parse([]byte("epoch: 2\npartition_bits: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}]\nreplicas: 1\njoined: {0: {1: 3}}")); err == nil {
		t.Error("a chain changed after the epoch: no error")
	}
}
