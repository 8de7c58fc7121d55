package sim

import (
	"bytes"
	"testing"
	"time"

	"github.com/netdir/netdir/bench"
)

func smallConfig(seed uint64) Config {
	return Config{Nodes: 8, Capacity: 1000, Workload: bench.Workload{Name: "B", Keys: 5000, Zipf: 0.99, Seed: 1},
		Warmup: 6 * time.Second, Requests: 60_000, Seed: seed}
}

func runJSON(t *testing.T, cfg Config) []byte {
	t.Helper()
	run, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := bench.WriteJSON(&b, bench.Results{Runs: []bench.Run{run}}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestSmoke(t *testing.T) {
	run, err := Run(smallConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", run)
}
