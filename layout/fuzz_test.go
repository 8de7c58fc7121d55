package layout

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzParse feeds the layout parser arbitrary YAML: it never panics, a
// refusal is one line, and a layout it takes marshals to YAML that parses
// back to the same layout. `go test` runs the seeds.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"epoch: 1\npartition_bits: 10\nreplicas: 3\ndataplane: 127.0.0.1:7420\nnodes:\n  - {id: 1, addr: 127.0.0.1:7501}\n" +
			"  - {id: 2, addr: 127.0.0.1:7502}\n  - {id: 3, addr: 127.0.0.1:7503, port: 3, mac: 02:4e:44:01:00:03}\n  - {id: 4, addr: 127.0.0.1:7504}\n",
		"replicas: 2\npartition_bits: 2\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}, {id: 3, addr: 127.0.0.1:3}]\n" +
			"chains: {1: [3, 1]}\ndown: [2]\n",
		"replicas: 2\npartition_bits: 1\nnodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:2}, {id: 3, addr: 127.0.0.1:3}]\n" +
			"chains: {0: [3, 2]}\nspares: {0: 3}\nfilling: [0]\ndown: [1]\ntails: [2]\n",
		"nodes: [{id: 0, addr: 127.0.0.1:1}]",
		"nodes: [{id: 1, addr: 127.0.0.1:1}, {id: 2, addr: 127.0.0.1:1}]",
		"node:\n  - {id: 1, addr: 127.0.0.1:1}",
		"nodes:\n  - id: x\n    addr: [1]\n",
		"partition_bits: 99\nnodes: {}\n",
		"replicas: 1\nnodes: [{id: 1, addr: 127.0.0.1:1, mac: zz}]",
		"chains: {4294967295: [1]}\nnodes: [{id: 1, addr: 127.0.0.1:1}]\nreplicas: 1",
		"&a [*a]", "{", "- - -", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("%q: error of several lines: %q", b, err)
			}
			return
		}
		y, err := m.Marshal()
		if err != nil {
			t.Fatalf("%q: marshal: %v", b, err)
		}
		back, err := Parse(y)
		if err != nil {
			t.Fatalf("%q: marshalled\n%s\ndoes not parse: %v", b, y, err)
		}
		if !reflect.DeepEqual(back.Chains(), m.Chains()) || back.Epoch() != m.Epoch() {
			t.Fatalf("%q: round trip changed the layout:\n%s", b, y)
		}
	})
}
