package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/bench"
)

// runCmd runs the netdir command line with args and returns its output.
func runCmd(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	var cmd = demoCmd()
	if args[0] == "bench" {
		cmd = benchCmd()
	}
	cmd.SetArgs(args[1:])
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("netdir %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// issue6Fields are the JSON field names of every run that scripts rely on.
var issue6Fields = []string{"policy", "workload", "zipf", "nodes", "throughput_ops", "p50_us", "p99_us",
	"p999_us", "load_max_over_mean", "load_cov", "node_latency_cov", "dir_hit_rate", "tail_index"}

func checkJSON(t *testing.T, path string, policies []string, nodes int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Runs []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(doc.Runs) != len(policies) {
		t.Fatalf("%s: %d runs, want %d", path, len(doc.Runs), len(policies))
	}
	for i, r := range doc.Runs {
		for _, f := range issue6Fields {
			if _, ok := r[f]; !ok {
				t.Errorf("run %d: no field %q", i, f)
			}
		}
		if r["policy"] != policies[i] {
			t.Errorf("run %d: policy %v, want %s", i, r["policy"], policies[i])
		}
		if r["nodes"] != float64(nodes) {
			t.Errorf("run %d: nodes %v, want %d", i, r["nodes"], nodes)
		}
		if tp, _ := r["throughput_ops"].(float64); tp <= 0 {
			t.Errorf("run %d: throughput %v", i, r["throughput_ops"])
		}
	}
}

// TestDemoShort: a short demo (on the device ssd) writes the JSON
// with issue 6's field names, one run per phase (static and netdir closed
// loop, then both open loop at one offered load, with time series), an
// HTML report with figures, and prints the summary, which names the device.
func TestDemoShort(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "demo.json")
	out := runCmd(t, "demo", "--nodes", "3", "--keys", "300", "--duration", "2500ms", "--warmup", "500ms",
		"--concurrency", "8", "--device", "ssd", "--json", jsonPath, "--out", dir, "--live", "lines")
	checkJSON(t, jsonPath, []string{"static", "netdir", "static", "netdir"}, 3)
	var doc bench.Results
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for i, r := range doc.Runs {
		if open := r.OfferedOps > 0; open != (i >= 2) {
			t.Errorf("run %d (%s): offered %.0f ops/s; want open loop for the last two only", i, r.Policy, r.OfferedOps)
		}
		if len(r.Series) < 2 {
			t.Errorf("run %d (%s): %d points of time series", i, r.Policy, len(r.Series))
		}
	}
	if doc.Runs[2].OfferedOps != doc.Runs[3].OfferedOps {
		t.Errorf("open-loop phases at %.0f and %.0f ops/s; want equal", doc.Runs[2].OfferedOps, doc.Runs[3].OfferedOps)
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	figs, err := bench.Figures(doc)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(html), "data:image/png;base64,"); n != len(figs) || n != 5 {
		t.Errorf("report has %d figures, want 5 (no throughput-vs-skew of one point each)", n)
	}
	for _, want := range []string{"over P4Runtime gRPC", "preload", "phase 1/4: static", "phase 2/4: netdir",
		"phase 3/4: static", "phase 4/4: netdir", "open loop at", "summary (device ssd)",
		"netdir vs static", "at equal offered load", "device ssd: block reads per GET", jsonPath} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The live view prints each second of a phase (warm-up, measured) once.
	seen := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "==> phase") {
			seen = map[string]bool{}
		}
		fs := strings.Fields(l)
		if len(fs) > 2 && strings.HasPrefix(fs[1], "t=") {
			if key := fs[0] + " " + fs[1]; seen[key] {
				t.Errorf("live view repeats %s", key)
			} else {
				seen[key] = true
			}
		}
	}
}

func TestLiveClock(t *testing.T) {
	var c liveClock
	var got []time.Duration
	for _, e := range []time.Duration{300 * time.Millisecond, 1999 * time.Millisecond, 2001 * time.Millisecond, 3900 * time.Millisecond} {
		got = append(got, c.next("netdir", e))
	}
	got = append(got, c.next("netdir", 1100*time.Millisecond)) // a new phase, same policy
	got = append(got, c.next("static", 2600*time.Millisecond))
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, time.Second, 3 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("clock %v, want %v", got, want)
	}
}

// TestBenchShort: bench runs each policy once per workload and skew and
// writes JSON and HTML.
func TestBenchShort(t *testing.T) {
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "b.json"), filepath.Join(dir, "b.html")
	pols := []string{"static", "replicas", "c3", "pegasus", "netdir"}
	runCmd(t, "bench", "--nodes", "3", "--keys", "200", "--duration", "500ms", "--warmup", "0s",
		"--concurrency", "4", "--device", "none", "--zipf", "1.2", "--workload", "B",
		"--policies", strings.Join(pols, ","), "--json", jsonPath, "--html", htmlPath, "--live", "off", "--p4info", "none")
	checkJSON(t, jsonPath, pols, 3)
	if _, err := os.Stat(htmlPath); err != nil {
		t.Fatal(err)
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--policies", "static,bogus"},
		{"--zipf", "x"},
		{"--nodes", "0"},
		{"--write-ratio", "2"},
		{"--workload", "Z"},
		{"--live", "maybe"},
		{"--device", "floppy"},
	} {
		cmd := benchCmd()
		cmd.SetArgs(args)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		if err := cmd.Execute(); err == nil {
			t.Errorf("bench %v: no error", args)
		}
	}
}

func TestOpenRate(t *testing.T) {
	runs := []bench.Run{
		{Policy: "static", Nodes: 8, CapacityOps: 571, ThroughputOps: 2009},
		{Policy: "netdir", Nodes: 8, CapacityOps: 571, ThroughputOps: 2677},
	}
	if rate, basis := openRate(runs, 0.7); math.Abs(rate-0.7*2677) > 1e-9 || !strings.Contains(basis, "short of the ideal 4568") {
		t.Errorf("below the ideal: %.1f ops/s (%s), want 70%% of netdir's 2677", rate, basis)
	}
	runs[1].ThroughputOps = 5000
	if rate, _ := openRate(runs, 0.7); math.Abs(rate-0.7*4568) > 1e-9 {
		t.Errorf("at the ideal: %.1f ops/s, want 70%% of 4568", rate)
	}
	runs = append(runs, bench.Run{Policy: "netdir", Nodes: 8, ThroughputOps: 9999, OfferedOps: 100}) // open loop: ignored
	runs[0].CapacityOps, runs[1].CapacityOps = 0, 0
	if rate, basis := openRate(runs, 0.5); rate != 2500 || !strings.Contains(basis, "no nominal capacity") {
		t.Errorf("no capacity: %.1f ops/s (%s), want half of netdir's 5000", rate, basis)
	}
}

// The closed loop's depth: --concurrency if given; else a number per
// storage node for demo and bench, so that a bigger cluster is driven as
// deep per node, and the fixed depth of their sections for experiments.
func TestInFlightDefaults(t *testing.T) {
	for _, name := range []string{"demo", "bench"} {
		cmd := &cobra.Command{Use: name}
		var f benchFlags
		f.register(cmd, name == "demo")
		if err := cmd.Flags().Parse(nil); err != nil {
			t.Fatal(err)
		}
		if got := f.inFlight(16); got != 16*inFlightPerNode {
			t.Errorf("%s: 16 nodes, default %d in flight, want %d", name, got, 16*inFlightPerNode)
		}
		if got := f.experimentWorkers(); got != experimentInFlight {
			t.Errorf("%s: experiments' default %d in flight, want %d", name, got, experimentInFlight)
		}
		if err := cmd.Flags().Parse([]string{"--concurrency", "100"}); err != nil {
			t.Fatal(err)
		}
		if f.inFlight(16) != 100 || f.experimentWorkers() != 100 {
			t.Errorf("%s: --concurrency 100 gave %d and %d in flight", name, f.inFlight(16), f.experimentWorkers())
		}
	}
}
