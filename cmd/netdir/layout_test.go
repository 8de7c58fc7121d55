package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/layout"
)

const controllerYAML = `api: 127.0.0.1:0
round: 500ms
coarse_epoch: 30s
epoch: 4
partition_bits: 4
replicas: 2
dataplane: 127.0.0.1:7420
nodes:
  - {id: 1, addr: 127.0.0.1:7501, port: 1, mac: 02:4e:44:01:00:01}
  - {id: 2, addr: 127.0.0.1:7502}
  - {id: 3, addr: 127.0.0.1:7503}
chains:
  3: [3, 2]
`

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLayoutFromController serves a controller's API on loopback: `netdir
// ctl layout` prints a layout that a layout file can hold, and loadLayout
// fetches the same one with --controller.
func TestLayoutFromController(t *testing.T) {
	cfg, err := cluster.LoadControllerConfig(writeFile(t, controllerYAML))
	if err != nil {
		t.Fatal(err)
	}
	want, err := layout.New(cfg.Layout)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := cluster.StartController(context.Background(), *cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	addr := ctl.APIAddr()

	var out bytes.Buffer
	cmd := ctlCmd()
	cmd.SetArgs([]string{"--controller", addr, "layout"})
	cmd.SetOut(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	printed, err := loadLayout(context.Background(), "--config", writeFile(t, out.String()), "")
	if err != nil {
		t.Fatalf("%v in\n%s", err, out.String())
	}
	fetched, err := loadLayout(context.Background(), "--config", "", addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []any{printed.Config(), fetched.Config()} {
		if !reflect.DeepEqual(m, want.Config()) {
			t.Fatalf("layout %+v, want the controller's %+v", m, want.Config())
		}
	}
	if _, err := loadLayout(context.Background(), "--nodes", "", ""); err == nil || !strings.Contains(err.Error(), "give --nodes FILE, or --controller ADDR") {
		t.Fatalf("no layout: error %v", err)
	}
}
