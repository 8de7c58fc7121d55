package yamlconf

import (
	"testing"
	"time"
)

type node struct {
	ID   uint16 `yaml:"id"`
	Addr string `yaml:"addr"`
}

type conf struct {
	Round  time.Duration     `yaml:"round"`
	Nodes  []node            `yaml:"nodes"`
	Chains map[uint32][]int  `yaml:"chains"`
	On     bool              `yaml:"on"`
	Labels map[string]string `yaml:"labels"`
}

// TestDecodeNamesTheField: every error is one line naming the field's
// path in the document and the value.
func TestDecodeNamesTheField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"round: soon", "round: soon: want a duration such as 500ms"},
		{"nodes:\n  - {id: 1, addr: a}\n  - {id: 70000, addr: b}", "nodes[1].id: 70000: want an integer 0..65535"},
		{"nodes:\n  - id: 1\n    adr: a", "nodes[0].adr: unknown field"},
		{"chains: {x: [1]}", "chains.x: x: want an integer 0..4294967295"},
		{"chains: {1: [a]}", "chains.1[0]: a: want an integer"},
		{"on: maybe", "on: maybe: want true or false"},
		{"labels: [1]", "labels: a list: want a mapping"},
		{"round: 1s\nrounds: 2", "rounds: unknown field"},
		{"round: 1s\nround: 2s", `line 2: mapping key "round" already defined at line 1`},
		{"nodes: [", "line 1: did not find expected node content"},
		{"a: 1\nb: 2", "a: unknown field; b: unknown field"},
	} {
		var c conf
		err := Decode([]byte(tc.yaml), &c)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n error %v\n want  %s", tc.yaml, err, tc.want)
		}
	}
	var c conf
	if err := Decode(nil, &c); err != nil {
		t.Fatalf("empty document: %v", err)
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct{ dir, path, want string }{
		{"/etc/netdir", "ca.pem", "/etc/netdir/ca.pem"},
		{"/etc/netdir", "../share/p4info.txtpb", "/etc/share/p4info.txtpb"},
		{"/etc/netdir", "/abs/ca.pem", "/abs/ca.pem"},
		{"/etc/netdir", "", ""},
		{".", "p4/build/x", "p4/build/x"},
	} {
		if got := Resolve(tc.dir, tc.path); got != tc.want {
			t.Errorf("Resolve(%q, %q) = %q, want %q", tc.dir, tc.path, got, tc.want)
		}
	}
}
