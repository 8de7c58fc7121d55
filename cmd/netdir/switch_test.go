package main

import (
	"strings"
	"testing"
)

func TestParseNodes(t *testing.T) {
	nodes, err := parseNodes([]byte("- {id: 2, addr: 127.0.0.1:7502}\n- {id: 1, addr: 127.0.0.1:7501}\n"), "f", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || nodes[0].ID != 1 || nodes[0].Addr.String() != "127.0.0.1:7501" || nodes[1].ID != 2 {
		t.Fatalf("nodes = %v, want 1 and 2 sorted by id", nodes)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"missing id", "- {id: 1, addr: 127.0.0.1:1}\n- {addr: 127.0.0.1:2}\n", "f:2: node without an id"},
		{"missing addr", "- {id: 1}\n", "without an addr"},
		{"duplicate id", "- {id: 1, addr: 127.0.0.1:1}\n- {id: 1, addr: 127.0.0.1:2}\n", "id 1 is also on line 1"},
		{"duplicate addr", "- {id: 1, addr: 127.0.0.1:1}\n- {id: 2, addr: 127.0.0.1:1}\n", "is also on line 1"},
		{"no port", "- {id: 1, addr: 127.0.0.1}\n", "missing port"},
		{"zero port", "- {id: 1, addr: 127.0.0.1:0}\n", "non-zero port"},
		{"bad id", "- {id: -1, addr: 127.0.0.1:1}\n", "want an integer 0..4095"},
		{"id too large", "- {id: 4096, addr: 127.0.0.1:1}\n", "want an integer 0..4095"},
		{"unknown field", "- {id: 1, adr: 127.0.0.1:1}\n", `unknown field "adr"`},
		{"not a list", "id: 1\n", "want a list"},
		{"empty", "", "no nodes"},
		{"empty list", "[]\n", "no nodes"},
		{"not yaml", "- {id: 1\n", "f:"},
	} {
		_, err := parseNodes([]byte(tc.yaml), "f", 4096)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}
