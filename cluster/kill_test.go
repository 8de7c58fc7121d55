package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/layout"
)

// TestKill9 runs three `netdir node` processes, writes, kills one with
// SIGKILL in the middle of the writes, restarts it, then SIGKILLs all three
// and restarts them, and checks that every acknowledged write is there.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the netdir binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "netdir")
	build := exec.Command("go", "build", "-o", bin, "github.com/netdir/netdir/cmd/netdir")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t0 := time.Now()
	defer func() { t.Logf("after build: %v", time.Since(t0)) }()
	var nodes []layout.Node
	for i := range 3 {
		a, err := cluster.ReserveAddr()
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, layout.Node{ID: uint16(i + 1), Addr: a})
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "epoch: 1\npartition_bits: 6\nreplicas: 3\nnodes:\n")
	for _, n := range nodes {
		fmt.Fprintf(&cfg, "  - {id: %d, addr: %s}\n", n.ID, n.Addr)
	}
	cfgPath := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := layout.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	procs := make([]*exec.Cmd, 3)
	start := func(i int) {
		cmd := exec.Command(bin, "node", "--id", fmt.Sprint(i+1), "--data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"--config", cfgPath, "--workers", "4", "--cache-mib", "8", "--memtable-mib", "4")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if !strings.Contains(line, "listening") {
			t.Fatalf("node %d: %q", i+1, line)
		}
		go func() { _, _ = bufio.NewReader(out).WriteTo(discard{}) }()
		procs[i] = cmd
	}
	kill := func(i int) {
		procs[i].Process.Signal(syscall.SIGKILL)
		procs[i].Wait()
	}
	for i := range 3 {
		start(i)
	}
	defer func() {
		for i := range 3 {
			if procs[i] != nil && procs[i].ProcessState == nil {
				kill(i)
			}
		}
	}()

	cl, err := client.New(client.Options{Layout: m, Timeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	type acked struct {
		val string
		ver uint64
	}
	var mu sync.Mutex
	ack := map[string]acked{}
	var wg sync.WaitGroup
	const writers, perWriter, keys = 4, 150, 64
	killAt := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for j := range perWriter {
				if w == 0 && j == perWriter/3 {
					close(killAt)
				}
				k := fmt.Sprintf("key-%d", r.IntN(keys))
				v := fmt.Sprintf("w%d-%d", w, j)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				ver, err := cl.Put(ctx, []byte(k), []byte(v))
				cancel()
				if err != nil {
					continue // outcome unknown: not acknowledged
				}
				mu.Lock()
				if ver > ack[k].ver {
					ack[k] = acked{v, ver}
				}
				mu.Unlock()
			}
		}()
	}
	<-killAt
	victim := rand.IntN(3)
	kill(victim)
	time.Sleep(100 * time.Millisecond)
	start(victim)
	wg.Wait()
	t.Logf("writes done: %v", time.Since(t0))

	verify := func(stage string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		mu.Lock()
		defer mu.Unlock()
		for k, a := range ack {
			for range 3 { // reads spread over the chain members
				v, ver, err := cl.Get(ctx, []byte(k))
				if err != nil {
					t.Fatalf("%s: get %s: %v", stage, k, err)
				}
				if ver < a.ver || (ver == a.ver && string(v) != a.val) {
					t.Fatalf("%s: %s = %q v%d, acknowledged %q v%d", stage, k, v, ver, a.val, a.ver)
				}
			}
		}
	}
	verify("after kill -9 of node " + fmt.Sprint(victim+1))
	for i := range 3 {
		kill(i)
	}
	for i := range 3 {
		start(i)
	}
	verify("after kill -9 of every node")
	if len(ack) < keys/2 {
		t.Fatalf("only %d keys acknowledged", len(ack))
	}
	t.Logf("%d keys, every acknowledged write present after kill -9 of node %d and of all nodes", len(ack), victim+1)
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
