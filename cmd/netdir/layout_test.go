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
	"github.com/netdir/netdir/wire"
)

// testLayout has what a layout file can say: a data plane, a node's switch
// port and MAC, a chain override.
var testLayout = layout.Config{
	Epoch: 4, PartitionBits: 4, Replicas: 2, DataPlane: "127.0.0.1:7420",
	Nodes: []layout.Node{
		{ID: 1, Addr: "127.0.0.1:7501", Port: 1, MAC: layout.MAC{0x02, 0x4e, 0x44, 0x01, 0x00, 0x01}},
		{ID: 2, Addr: "127.0.0.1:7502"},
		{ID: 3, Addr: "127.0.0.1:7503"},
	},
	Chains: map[uint32][]wire.NodeID{3: {3, 2}},
}

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
	want, err := layout.New(testLayout)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := cluster.StartController(context.Background(), cluster.ControllerConfig{API: "127.0.0.1:0", Layout: testLayout})
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
