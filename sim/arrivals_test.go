package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestArrivalsWithoutEventsAreTheSameRun: requests that reach a busy node
// without an event of their own give the run an event per arrival gives,
// where arrivals and completions tie (a deterministic service of a whole
// number of links), where nodes go idle with requests on their way (a
// link as long as a service, few clients), with writes served first, an
// exponential service, racks under a spine (reads checked), requests
// resent after a timeout while the first waits queued, and a warm-up
// whose end falls between events.
func TestArrivalsWithoutEventsAreTheSameRun(t *testing.T) {
	run := func(cfg Config, everyOne bool) string {
		s := newSim(t, cfg)
		s.arriving.everyOne = everyOne
		r, err := s.Run()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%+v", r)
	}
	busy := smallConfig(3)
	busy.Workload.Name, busy.Requests, busy.Warmup = "A", 20_000, 2*time.Second+7*time.Microsecond
	idle := busy
	idle.Link, idle.Concurrency = time.Millisecond, 12
	tied := busy
	tied.Link, tied.Concurrency = 250*time.Microsecond, 24
	exp := tied
	exp.Service = ServiceExponential
	racks := busy
	racks.Nodes, racks.RackSize, racks.Concurrency, racks.CheckReads = 12, 4, 96, true
	resent := busy
	resent.Concurrency, resent.ClientTimeout = 400, 20*time.Millisecond
	for name, cfg := range map[string]Config{"busy": busy, "idle": idle, "tied": tied, "exp": exp, "racks": racks, "resent": resent} {
		for seed := range uint64(3) {
			cfg.Seed = seed
			if a, b := run(cfg, false), run(cfg, true); a != b {
				t.Errorf("%s, seed %d: arrivals without events, another run:\n%s\nwith an event each:\n%s", name, seed, a, b)
			}
		}
	}
}
