package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/directory"
)

// TestBenchService: netdir bench --service measures a running deployment
// (an in-process cluster, its software data plane and controller, on
// loopback), static then netdir, writes the JSON and HTML, and leaves the
// controller's loops running.
func TestBenchService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := cluster.Start(cluster.Options{N: 3, R: 3, PartitionBits: 4, Epoch: 1, Dir: t.TempDir(), Controller: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.StartPlane(ctx, cluster.PlaneConfig{Directory: directory.Config{Policy: directory.PolicyNetdir}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "b.json"), filepath.Join(dir, "b.html")
	keyFile := filepath.Join(dir, "cluster.key")
	if err := os.WriteFile(keyFile, cl.Keys().File(), 0o600); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "bench", "--service", cl.DataPlane(), "--controller", p.Controller.APIAddr(), "--cluster-key-file", keyFile,
		"--keys", "200", "--duration", "500ms", "--warmup", "0s", "--concurrency", "4", "--zipf", "1.2",
		"--json", jsonPath, "--html", htmlPath, "--live", "off")
	checkJSON(t, jsonPath, []string{"static", "netdir"}, 3)
	if _, err := os.Stat(htmlPath); err != nil {
		t.Fatal(err)
	}
	if p.Controller.Paused() {
		t.Error("the controller's loops are still paused")
	}
}

// TestBenchServiceFlagErrors: --service needs --controller, takes only the
// policies a deployment can run, and none of the in-process system's flags.
func TestBenchServiceFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--service", "127.0.0.1:7420"},
		{"--controller", "127.0.0.1:7400"},
		{"--service", "127.0.0.1:7420", "--controller", "127.0.0.1:7400", "--policies", "static,pegasus"},
		{"--service", "127.0.0.1:7420", "--controller", "127.0.0.1:7400", "--nodes", "4"},
	} {
		cmd := benchCmd()
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil {
			t.Errorf("bench %v: no error", args)
		}
	}
}
