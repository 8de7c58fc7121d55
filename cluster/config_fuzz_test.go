package cluster_test

import (
	"strings"
	"testing"

	"github.com/netdir/netdir/cluster"
)

// FuzzParseControllerConfig feeds the controller's configuration loader
// arbitrary YAML: it never panics, and a refusal is one line. `go test`
// runs the seeds.
func FuzzParseControllerConfig(f *testing.F) {
	for _, s := range []string{
		controllerYAML,
		controllerYAML + "switches:\n  - {name: a, addr: 127.0.0.1:9559, routes: [{prefix: 10.0.0.1/32, port: 1, smac: 02:00:00:00:00:01, dmac: x}]}\n",
		controllerYAML + "tls: {cert: a.pem}\napi_token_file: /nonexistent\n",
		controllerYAML + "raft: {id: c1, bind: 127.0.0.1:7601, peers: [{id: c1, raft: 127.0.0.1:7601, api: 127.0.0.1:7401}]}\n",
		strings.Replace(controllerYAML, "round: 500ms", "round: -5s", 1),
		strings.Replace(controllerYAML, "api: 127.0.0.1:0", "api: [1, 2]", 1),
		"switches: 7", "{", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := cluster.ParseControllerConfig(b, t.TempDir())
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("%q: error of several lines: %q", b, err)
		}
	})
}
