package layout

import (
	"slices"
	"testing"

	"github.com/netdir/netdir/wire"
)

func TestLayoutYAML(t *testing.T) {
	m, err := Parse([]byte(`
epoch: 3
partition_bits: 3
replicas: 2
nodes:
  - {id: 7, addr: 127.0.0.1:9007}
  - {id: 2, addr: 127.0.0.1:9002}
  - {id: 5, addr: 127.0.0.1:9005}
chains:
  1: [7, 5]
`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Partitions() != 8 || m.Epoch() != 3 || m.R() != 2 {
		t.Fatalf("%d %d %d", m.Partitions(), m.Epoch(), m.R())
	}
	// Ring over sorted ids [2 5 7]: partition p starts at index p mod 3.
	want := map[uint32][]wire.NodeID{0: {2, 5}, 1: {7, 5}, 2: {7, 2}, 3: {2, 5}, 5: {7, 2}}
	for p, w := range want {
		if got := m.Chain(p); !slices.Equal(got, w) {
			t.Errorf("chain %d = %v, want %v", p, got, w)
		}
	}
	for _, bad := range []string{
		"nodes: []",
		"replicas: 3\nnodes: [{id: 1, addr: 127.0.0.1:1}]",
		"nodes: [{id: 1, addr: nope}]",
		"nodes: [{id: 1, addr: 127.0.0.1:1}, {id: 1, addr: 127.0.0.1:2}]",
		"replicas: 1\npartition_bits: 2\nnodes: [{id: 1, addr: 127.0.0.1:1}]\nchains: {9: [1]}",
		"replicas: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}]\nchains: {0: [4]}",
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
