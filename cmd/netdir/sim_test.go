package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netdir/netdir/bench"
)

// TestSimCommandSweepsAndWritesItsOutputs: netdir sim runs one row per
// node count and policy, prints progress and the summary, writes JSON
// that reads back, and plots the directory needs of a --dir-size sweep;
// the JSON is byte for byte the same whether the runs go one at a time
// or several at once (--jobs).
func TestSimCommandSweepsAndWritesItsOutputs(t *testing.T) {
	dir := t.TempDir()
	jsonPath, needs := filepath.Join(dir, "sim.json"), filepath.Join(dir, "needs.svg")
	cmd := simCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--nodes", "4,8", "--policies", "static,netdir", "--dir-size", "8", "--requests", "2000",
		"--warmup", "1s", "--capacity", "500", "--keys", "2000", "--json", jsonPath, "--needs", needs, "--jobs", "3"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"200/2000 requests", "summary", "directory keys needed", "wrote " + needs} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	f, err := os.Open(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := bench.ReadJSON(f)
	if err != nil || len(res.Runs) != 4 {
		t.Fatalf("JSON: %v, %d runs, want 4", err, len(res.Runs))
	}
	if svg, err := os.ReadFile(needs); err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("needs figure: %v", err)
	}
	serial := filepath.Join(dir, "serial.json")
	one := simCmd()
	one.SetOut(&bytes.Buffer{})
	one.SetArgs([]string{"--nodes", "4,8", "--policies", "static,netdir", "--dir-size", "8", "--requests", "2000",
		"--warmup", "1s", "--capacity", "500", "--keys", "2000", "--json", serial, "--jobs", "1"})
	if err := one.Execute(); err != nil {
		t.Fatal(err)
	}
	if a, b := readFile(t, jsonPath), readFile(t, serial); !bytes.Equal(a, b) {
		t.Errorf("--jobs 3 and --jobs 1 wrote different JSON (%d and %d bytes)", len(a), len(b))
	}
	for _, args := range [][]string{{"--nodes", "0"}, {"--jobs", "0"}} {
		bad := simCmd()
		bad.SetOut(&out)
		bad.SetErr(&out)
		bad.SetArgs(args)
		if err := bad.Execute(); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
