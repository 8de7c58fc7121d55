package directory_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netdir/netdir/directory/vectors"
)

// TestVectors holds the Go core to the shared vector suite.
func TestVectors(t *testing.T) {
	if n := vectors.Count(t); n < 70 {
		t.Errorf("the vector suite has %d cases; the contract asks for at least 70", n)
	}
	vectors.Run(t, &vectors.Core{})
}

// TestVectorSuiteShape checks what every plane relies on: each case starts
// from reset (no state leaks between cases, whichever plane runs them) and
// has a comment above it saying what it pins down, and feature-gated files
// name only features the runner documents.
func TestVectorSuiteShape(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(vectors.Dir(t), "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files: %v", err)
	}
	known := map[string]bool{"clock": true, "coarse": true, "host": true, "policy": true, "sketch": true}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		if rest, ok := strings.CutPrefix(lines[0], "# requires:"); ok {
			for _, feat := range strings.Fields(rest) {
				if !known[feat] {
					t.Errorf("%s: unknown feature %q", filepath.Base(f), feat)
				}
			}
		}
		for i, l := range lines {
			if !strings.HasPrefix(l, "subtest ") || l == "subtest end" {
				continue
			}
			if i == 0 || !strings.HasPrefix(lines[i-1], "#") {
				t.Errorf("%s:%d: %s has no comment above it", filepath.Base(f), i+1, l)
			}
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "reset") {
				t.Errorf("%s:%d: %s does not start with reset", filepath.Base(f), i+1, l)
			}
		}
	}
}
