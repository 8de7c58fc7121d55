package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/netdir/netdir/bench/system"
)

// TestExperimentShort: a compaction experiment runs its phases in ABBA
// order and writes the runs, the phases' per-node figures and the summary.
func TestExperimentShort(t *testing.T) {
	doc := runExperimentJSON(t, "--experiment", "compaction-pacing", "--nodes", "3", "--keys", "200", "--duration", "300ms",
		"--warmup", "0s", "--concurrency", "4", "--device", "none", "--workload", "C", "--zipf", "uniform",
		"--fill-mib", "2", "--fill-lead", "0s", "--repeat", "2", "--live", "off", "--p4info", "none")
	var order []string
	for _, p := range doc.Phases {
		order = append(order, p.Phase)
		if len(p.NodeRequests) != 3 || len(p.NodePebbleReadUs) != 3 || len(p.NodeCompactionMiB) != 3 || len(p.NodePageHitsPerGet) != 3 {
			t.Fatalf("phase %s: per-node figures %+v", p.Phase, p)
		}
		if (p.Phase == "idle") != (p.FillMiB == 0) {
			t.Fatalf("phase %s wrote %.1f MiB in the background", p.Phase, p.FillMiB)
		}
	}
	want := []string{"idle", "unthrottled", "paced", "paced", "unthrottled"}
	if len(order) != len(want) || len(doc.Runs) != len(want) {
		t.Fatalf("phases %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("phases %v, want %v", order, want)
		}
	}
	if _, ok := doc.Summary["drop idle/unthrottled x"]; !ok {
		t.Fatalf("summary %v", doc.Summary)
	}
}

// runExperimentJSON runs netdir bench with args and reads the JSON it wrote.
func runExperimentJSON(t *testing.T, args ...string) system.ExperimentResults {
	t.Helper()
	path := filepath.Join(t.TempDir(), "e.json")
	runCmd(t, append(append([]string{"bench"}, args...), "--json", path)...)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc system.ExperimentResults
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestExperimentUnknown(t *testing.T) {
	cmd := benchCmd()
	cmd.SetArgs([]string{"--experiment", "bogus", "--nodes", "3"})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.Execute(); err == nil {
		t.Fatal("an unknown experiment ran")
	}
}

// TestAblationSteps: the ablation probes static's capacity first, then
// runs its steps in order, each on a fresh cluster at the same offered load
// (a fraction of the probe), each what it claims: the fine score moves
// requests only where it is on (coarse+fine and coarse+fine+compaction;
// none under coarse, which has the directory and weights but the first
// choice only), compaction is paced only in the last step, and background
// writes keep compaction live in every step. Tiny sizes, no timings.
func TestAblationSteps(t *testing.T) {
	doc := runExperimentJSON(t, "--experiment", "ablation", "--nodes", "3", "--keys", "200", "--duration", "700ms",
		"--warmup", "300ms", "--concurrency", "8", "--device", "none", "--workload", "B", "--zipf", "1.2",
		"--fill-mib", "1", "--fill-lead", "0s", "--live", "off", "--p4info", "none", "--repeat", "1",
		"--probe", "600ms", "--load", "0.5")
	if len(doc.Runs) != len(system.AblationSteps) || len(doc.Phases) != len(system.AblationSteps) {
		t.Fatalf("%d runs and %d phases, want %d", len(doc.Runs), len(doc.Phases), len(system.AblationSteps))
	}
	if doc.CapacityOps <= 0 || doc.OfferedOps != 0.5*doc.CapacityOps {
		t.Fatalf("probed %.1f ops/s, offered %.1f, want half of it", doc.CapacityOps, doc.OfferedOps)
	}
	for i, st := range system.AblationSteps {
		r, p := doc.Runs[i], doc.Phases[i]
		if r.Policy != st.Name || p.Phase != st.Name || p.Policy != st.Policy || r.Workload != "B" {
			t.Fatalf("run %d: %s/%s on %s (phase policy %s), want %s/%s on B", i, r.Policy, p.Phase, r.Workload, p.Policy, st.Name, st.Policy)
		}
		if r.Ops == 0 || doc.Rates[i] != doc.OfferedOps {
			t.Errorf("%s: %d operations at %.1f ops/s offered", st.Name, r.Ops, doc.Rates[i])
		}
		if fine := st.Policy == "netdir"; fine != (r.SwitchedFraction > 0) {
			t.Errorf("%s: fine score switched %.3f of requests", st.Name, r.SwitchedFraction)
		}
		if p.Paced != st.Paced {
			t.Errorf("%s: compaction paced %v, want %v", st.Name, p.Paced, st.Paced)
		}
		if p.FillMiB <= 0 {
			t.Errorf("%s: no background writes", st.Name)
		}
	}
	if _, ok := doc.Summary["B p99 "+system.AblationFull+"/c3 x"]; !ok {
		t.Fatalf("summary %v", doc.Summary)
	}
}
