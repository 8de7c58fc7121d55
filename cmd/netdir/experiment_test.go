package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestExperimentShort: a compaction experiment runs its phases in ABBA
// order and writes the runs, the phases' per-node figures and the summary.
func TestExperimentShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.json")
	runCmd(t, "bench", "--experiment", "compaction-pacing", "--nodes", "3", "--keys", "200", "--duration", "300ms",
		"--warmup", "0s", "--concurrency", "4", "--capacity", "0", "--workload", "C", "--zipf", "uniform",
		"--fill-mib", "2", "--fill-lead", "0s", "--repeat", "2", "--live", "off", "--p4info", "none", "--json", path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc experimentResults
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, p := range doc.Phases {
		order = append(order, p.Phase)
		if len(p.NodeRequests) != 3 || len(p.NodePebbleReadUs) != 3 || len(p.NodeCompactionMiB) != 3 {
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
