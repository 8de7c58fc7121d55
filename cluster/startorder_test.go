package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/grpcsec"
	"github.com/netdir/netdir/internal/grpcsec/pkitest"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/storagenode"
)

// logLines is a slog destination whose lines a test counts.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// count is the number of lines containing s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func testSchema(t *testing.T) *p4rt.Schema {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	schema, err := p4rt.LoadSchema(filepath.Join(filepath.Dir(file), "..", "p4", "build", "netdir.p4info.txtpb"))
	if err != nil {
		t.Fatal(err)
	}
	return schema
}

func reserve(t *testing.T) string {
	t.Helper()
	a, err := cluster.ReserveAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestStartInReverseOrder starts a node first, then the controller, then
// the switch, the reverse of the README's order: the node waits for the
// controller and the controller for the switch, each saying so once and
// once more when the other answers, and a write and a read through the
// switch succeed within a bound of the last start.
func TestStartInReverseOrder(t *testing.T) {
	nodeAddr, dp, apiAddr, p4rtAddr := reserve(t), reserve(t), reserve(t), reserve(t)
	lay, err := layout.New(layout.Config{Epoch: 1, PartitionBits: 4, Replicas: 1, DataPlane: dp,
		Nodes: []layout.Node{{ID: 1, Addr: nodeAddr}}})
	if err != nil {
		t.Fatal(err)
	}
	var nodeLog, ctlLog logLines
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	n, err := cluster.StartNode(ctx, cluster.NodeConfig{
		Storage:    storagenode.Options{ID: 1, Dir: t.TempDir(), Layout: lay, Logger: slog.New(slog.DiscardHandler)},
		Controller: apiAddr, ReportEvery: 500 * time.Millisecond, Log: nodeLog.logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	time.Sleep(1200 * time.Millisecond) // two reports refused

	type started struct {
		c   *cluster.Controller
		err error
	}
	ctlDone := make(chan started, 1)
	go func() {
		c, err := cluster.StartController(ctx, cluster.ControllerConfig{API: apiAddr, Layout: lay.Config(), Schema: testSchema(t),
			Switches: []cluster.SwitchEndpoint{{Name: "sw", Addr: p4rtAddr, DeviceID: 1, ElectionID: 1}}, Log: ctlLog.logger()})
		ctlDone <- started{c, err}
	}()
	time.Sleep(1500 * time.Millisecond) // the controller retries the switch meanwhile

	sw, err := cluster.StartSwitch(cluster.SwitchConfig{Listen: dp, Layout: lay, P4Runtime: p4rtAddr,
		Directory: directory.Config{Slots: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	last := time.Now()
	var c *cluster.Controller
	select {
	case s := <-ctlDone:
		if s.err != nil {
			t.Fatalf("controller: %v\n%s", s.err, ctlLog.String())
		}
		c = s.c
	case <-time.After(15 * time.Second):
		t.Fatalf("the controller did not program the switch within 15s of its start\n%s", ctlLog.String())
	}
	defer c.Close()

	cl, err := client.New(client.Options{Service: dp})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		_, err := cl.Put(rctx, []byte("k"), []byte("v"))
		rcancel()
		if err == nil {
			break
		}
		if time.Since(last) > 15*time.Second {
			t.Fatalf("no write served within 15s of the last start: %v", err)
		}
	}
	if v, _, err := cl.Get(ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("get: %q, %v", v, err)
	}
	served := time.Since(last)
	deadline := time.Now().Add(5 * time.Second)
	for nodeLog.count("controller reached") == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("served %v after the switch started", served.Round(time.Millisecond))
	for _, want := range []struct {
		log  *logLines
		line string
		n    int
	}{
		{&nodeLog, "waiting for the controller", 1},
		{&nodeLog, "controller reached", 1},
		{&nodeLog, "level=WARN", 2}, // those two, and nothing else
		{&ctlLog, "waiting for the switch", 1},
		{&ctlLog, "switch reached", 1},
		{&ctlLog, "level=WARN", 1},
	} {
		if got := want.log.count(want.line); got != want.n {
			t.Errorf("%d lines with %q, want %d", got, want.line, want.n)
		}
	}
	if t.Failed() {
		t.Logf("node log:\n%scontroller log:\n%s", nodeLog.String(), ctlLog.String())
	}
}

// TestSwitchTLS programs a software switch whose P4Runtime server speaks
// TLS: the controller with the switch's CA reaches it; with another CA it
// fails at once, naming the certificate problem, instead of waiting.
func TestSwitchTLS(t *testing.T) {
	pki := pkitest.Write(t, t.TempDir())
	nodeAddr, dp := reserve(t), reserve(t)
	lay, err := layout.New(layout.Config{Epoch: 1, PartitionBits: 4, Replicas: 1, DataPlane: dp,
		Nodes: []layout.Node{{ID: 1, Addr: nodeAddr}}})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := cluster.StartSwitch(cluster.SwitchConfig{Listen: dp, Layout: lay, P4Runtime: "127.0.0.1:0",
		P4RuntimeTLS: &grpcsec.TLS{Cert: pki.ServerCert, Key: pki.ServerKey, CA: pki.CA}})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	start := func(ca string) (*cluster.Controller, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return cluster.StartController(ctx, cluster.ControllerConfig{API: "127.0.0.1:0", Layout: lay.Config(), Schema: testSchema(t),
			Switches: []cluster.SwitchEndpoint{{Name: "sw", Addr: sw.P4RuntimeAddr(), DeviceID: 1, ElectionID: 1,
				TLS: &grpcsec.TLS{CA: ca, Cert: pki.ClientCert, Key: pki.ClientKey}}}})
	}
	c, err := start(pki.CA)
	if err != nil {
		t.Fatalf("with the switch's CA: %v", err)
	}
	if !c.Serving() {
		t.Error("controller not serving after programming the switch over TLS")
	}
	c.Close()
	// Prompt: the x509 error itself, not a deadline reached retrying.
	_, err = start(pki.OtherCA)
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with another CA: %v, want a prompt x509 error", err)
	}
}
