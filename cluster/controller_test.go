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
		{strings.Replace(controllerYAML, "coarse_epoch: 30s", "epoch: 30s", 1), "epoch"},                   // the old key of the coarse period
		{strings.Replace(controllerYAML, "round:", "rounds:", 1), "rounds: unknown field"},                 // strict
		{strings.Replace(controllerYAML, "3: [3, 2]", "3: [3, 9]", 1), "chains.3[1]: 9 is not in nodes"},   // the layout's validation
		{strings.Replace(controllerYAML, "replicas: 2", "replicas: 4", 1), "replicas: 4: more than the 3"}, // likewise
	} {
		if _, err := cluster.LoadControllerConfig(writeFile(t, tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}

// TestControllerConfigStrict: each misconfiguration is refused in one line
// naming the file, the field and the value; relative paths are the config
// file's.
func TestControllerConfigStrict(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"netdir.p4info.txtpb", "netdir.json", "token"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const sw = "p4info: netdir.p4info.txtpb\nswitches:\n  - {name: a, addr: 127.0.0.1:9559, device_config: netdir.json}\n"
	base := controllerYAML + sw
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", strings.Replace(base, "nodes:", "node:", 1), "node: unknown field"},
		{"unknown switch key", strings.Replace(base, "device_config:", "device_cfg:", 1), "switches[0].device_cfg: unknown field"},
		{"duplicate node addr", strings.Replace(base, "127.0.0.1:7503", "127.0.0.1:7501", 1),
			"nodes[2].addr: 127.0.0.1:7501 duplicates nodes[0]"},
		{"duplicate node id", strings.Replace(base, "{id: 3,", "{id: 2,", 1), "nodes[2].id: 2 duplicates nodes[1]"},
		{"node id 0", strings.Replace(base, "{id: 3,", "{id: 0,", 1), "nodes[2].id: 0: ids start at 1"},
		{"duplicate switch", base + "  - {name: b, addr: 127.0.0.1:9559}\n", "switches[1].addr: 127.0.0.1:9559 duplicates switches[0]"},
		{"duplicate switch name", base + "  - {name: a, addr: 127.0.0.1:9560}\n", "switches[1].name: a duplicates switches[0]"},
		{"switch without addr", base + "  - {name: b}\n", `switches[1].addr: "": want host:port`},
		{"missing p4info", strings.Replace(base, "p4info: netdir.p4info.txtpb", "p4info: none.txtpb", 1),
			"p4info: " + filepath.Join(dir, "none.txtpb") + ": no such file or directory"},
		{"missing device config", strings.Replace(base, "netdir.json", "x.json", 1),
			"switches[0].device_config: " + filepath.Join(dir, "x.json") + ": no such file or directory"},
		{"bad route", base + "  - {name: b, addr: 127.0.0.1:9560, routes: [{prefix: 10.0.0.0/33, port: 1}]}\n",
			`switches[1].routes[0]: route "10.0.0.0/33": want an IPv4 prefix`},
		{"bad duration", strings.Replace(base, "round: 500ms", "round: 5 minutes", 1), `round: 5 minutes: want a duration such as 500ms`},
		{"negative round", strings.Replace(base, "round: 500ms", "round: -5s", 1), "round: -5s: want a duration of 0 or more"},
		{"bad api", strings.Replace(base, "api: 127.0.0.1:0", "api: 7400", 1), `api: "7400": want host:port`},
		{"half a tls pair", base + "tls: {cert: netdir.json}\n", `tls: give cert and key together (cert "` + filepath.Join(dir, "netdir.json") + `", key "")`},
		{"tls ca only", base + "tls: {ca: netdir.json}\n", "tls: a server needs cert and key"},
		{"missing cert", base + "tls: {cert: c.pem, key: netdir.json}\n", "tls.cert: " + filepath.Join(dir, "c.pem") + ": no such file or directory"},
		{"missing switch ca", strings.Replace(base, "device_config: netdir.json}", "device_config: netdir.json, tls: {ca: ca.pem}}", 1),
			"switches[0].tls.ca: " + filepath.Join(dir, "ca.pem") + ": no such file or directory"},
		{"raft without id", base + "raft: {bind: 127.0.0.1:7601}\n", "raft.id: missing"},
		{"raft duplicate peer", base + "raft: {id: c1, bind: 127.0.0.1:7601, peers: [{id: c1, raft: 127.0.0.1:7601}, {id: c2, raft: 127.0.0.1:7601}]}\n",
			"raft.peers[1].raft: 127.0.0.1:7601 duplicates raft.peers[0]"},
		{"raft id not a peer", base + "raft: {id: c9, bind: 127.0.0.1:7601, peers: [{id: c1, raft: 127.0.0.1:7601}]}\n",
			"raft.id: c9 is not one of raft.peers"},
		{"empty token", base + "api_token_file: empty\n", "api_token_file: " + filepath.Join(dir, "empty") + ": empty token"},
	} {
		path := filepath.Join(dir, "controller.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := cluster.LoadControllerConfig(path)
		if want := path + ": " + tc.want; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s:\n error %v\n want  %s", tc.name, err, want)
		}
	}
	// Relative paths are the file's, from any working directory.
	path := filepath.Join(dir, "controller.yaml")
	if err := os.WriteFile(path, []byte(base+"api_token_file: token\ndata_dir: state\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := cluster.LoadControllerConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.P4Info != filepath.Join(dir, "netdir.p4info.txtpb") || cfg.Switches[0].DeviceConfig != filepath.Join(dir, "netdir.json") ||
		cfg.DataDir != filepath.Join(dir, "state") || cfg.APIToken != "secret" {
		t.Fatalf("p4info %s, device_config %s, data_dir %s, token %q", cfg.P4Info, cfg.Switches[0].DeviceConfig, cfg.DataDir, cfg.APIToken)
	}
}
