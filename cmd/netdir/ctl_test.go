package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netdir/netdir/cluster"
)

// startTestController serves a controller's API on loopback, keeping its
// state in dir; the test's end closes it, if the test has not.
func startTestController(t *testing.T, dir string) *cluster.Controller {
	t.Helper()
	c, err := cluster.StartController(context.Background(), cluster.ControllerConfig{API: "127.0.0.1:0", Layout: testLayout, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ctl runs `netdir ctl --controller addr args...` and returns its output.
func ctl(addr string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := ctlCmd()
	cmd.SetArgs(append([]string{"--controller", addr}, args...))
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.Execute()
	return out.String(), err
}

// TestCtlQoS drives `netdir ctl qos` against a real controller: set
// registers a tenant and keeps the flags not given, get and dump show the
// policies, an R > L triple is refused with dmClock's reason, rm puts a
// tenant back under the defaults, and the policies persist in data_dir.
func TestCtlQoS(t *testing.T) {
	dir := t.TempDir()
	c := startTestController(t, dir)
	addr := c.APIAddr()
	run := func(want string, args ...string) {
		t.Helper()
		out, err := ctl(addr, args...)
		if err != nil {
			t.Fatalf("ctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(out, want) {
			t.Fatalf("ctl %s printed\n%s\nwant it to contain %q", strings.Join(args, " "), out, want)
		}
	}
	run("gold id 7: reservation 100, weight 2, limit 500\n", "qos", "set", "gold", "--id", "7", "--reservation", "100", "--weight", "2", "--limit", "500")
	run("gold id 7: reservation 100, weight 4, limit 500\n", "qos", "set", "gold", "--weight", "4")
	run("gold id 7: reservation 100, weight 4, limit 500\n", "qos", "get", "gold")
	run("defaults: reservation -, weight 3, limit -\n", "qos", "set", "--default", "--weight", "3")
	run("defaults: reservation -, weight 3, limit -\n", "qos", "get", "--default")
	out, err := ctl(addr, "qos", "dump")
	if err != nil {
		t.Fatalf("qos dump: %v\n%s", err, out)
	}
	if !strings.Contains(out, "; defaults (set): reservation -, weight 3, limit -\n") || !strings.Contains(out, "tenant  id") {
		t.Fatalf("qos dump printed\n%s", out)
	}
	if f := strings.Fields(lineOf(out, "gold")); len(f) < 6 || f[1] != "7" || f[2] != "100" || f[3] != "4" || f[4] != "500" || f[5] != "false" {
		t.Fatalf("qos dump's gold row %q in\n%s", lineOf(out, "gold"), out)
	}

	out, err = ctl(addr, "qos", "set", "bad", "--reservation", "200", "--limit", "100")
	if err == nil || !strings.Contains(err.Error(), "reservation 200 above limit 100") {
		t.Fatalf("R > L: error %v, output\n%s", err, out)
	}
	if _, err := ctl(addr, "qos", "set"); err == nil || !strings.Contains(err.Error(), "name a tenant or give --default") {
		t.Fatalf("set without a tenant: %v", err)
	}

	if _, err := os.Stat(filepath.Join(dir, "qos.json")); err != nil {
		t.Fatalf("policies not saved in data_dir: %v", err)
	}
	// A controller restarted on the same data_dir has them.
	c.Close()
	addr = startTestController(t, dir).APIAddr()
	run("gold id 7: reservation 100, weight 4, limit 500\n", "qos", "get", "gold")
	run("defaults: reservation -, weight 3, limit -\n", "qos", "get", "--default")

	run("", "qos", "rm", "gold")
	run("gold id 7: reservation -, weight 3, limit - (defaults)\n", "qos", "get", "gold")
	run("", "qos", "rm", "--default")
	run("defaults: reservation -, weight 1, limit -\n", "qos", "get", "--default")
}

// lineOf is the first line of out that starts with prefix.
func lineOf(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
