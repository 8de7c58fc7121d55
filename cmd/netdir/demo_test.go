package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
// with issue 6's field names, one run per phase, an HTML report with
// figures, and prints the summary, which names the device.
func TestDemoShort(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "demo.json")
	out := runCmd(t, "demo", "--nodes", "3", "--keys", "300", "--duration", "1s", "--warmup", "500ms",
		"--concurrency", "8", "--device", "ssd", "--json", jsonPath, "--out", dir, "--live", "lines")
	checkJSON(t, jsonPath, []string{"static", "netdir"}, 3)
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(html), "data:image/png;base64,"); n != 4 {
		t.Errorf("report has %d figures, want 4", n)
	}
	for _, want := range []string{"over P4Runtime gRPC", "preload", "phase 1/2: static", "phase 2/2: netdir", "summary (device ssd)",
		"netdir vs static", "device ssd: block reads per GET", jsonPath} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
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
