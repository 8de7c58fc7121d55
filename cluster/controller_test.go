package cluster_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/layout"
)

const controllerYAML = `api: 127.0.0.1:0
round: 500ms
coarse_epoch: 30s
epoch: 4
partition_bits: 4
replicas: 2
dataplane: 127.0.0.1:7420
nodes:
  - {id: 1, addr: 127.0.0.1:7501, port: 1, mac: 02:4e:44:01:00:01}
  - {id: 2, addr: 127.0.0.1:7502}
  - {id: 3, addr: 127.0.0.1:7503}
chains:
  3: [3, 2]
`

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestControllerConfigLayout(t *testing.T) {
	cfg, err := cluster.LoadControllerConfig(writeFile(t, controllerYAML))
	if err != nil {
		t.Fatal(err)
	}
	m, err := layout.New(cfg.Layout)
	if err != nil {
		t.Fatal(err)
	}
	if m.Epoch() != 4 || m.Bits() != 4 || m.R() != 2 || m.Chain(3)[0] != 3 || cfg.CoarseEpoch.String() != "30s" {
		t.Fatalf("epoch %d bits %d R %d chain 3 %v coarse %v", m.Epoch(), m.Bits(), m.R(), m.Chain(3), cfg.CoarseEpoch)
	}
	if n, _ := m.Node(1); n.Port != 1 || n.MAC.String() != "02:4e:44:01:00:01" {
		t.Fatalf("node 1 = %+v", n)
	}
	for _, tc := range []struct{ yaml, want string }{
		{strings.Replace(controllerYAML, "coarse_epoch: 30s", "epoch: 30s", 1), "epoch"},       // the old key of the coarse period
		{strings.Replace(controllerYAML, "round:", "rounds:", 1), "field rounds not found"},    // strict
		{strings.Replace(controllerYAML, "3: [3, 2]", "3: [3, 9]", 1), "bad chain member 9"},   // the layout's validation
		{strings.Replace(controllerYAML, "replicas: 2", "replicas: 4", 1), "4 replicas but 3"}, // likewise
	} {
		if _, err := cluster.LoadControllerConfig(writeFile(t, tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}
