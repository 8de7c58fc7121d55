package nicagent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/netdir/netdir/wire"
)

// TestMain lets the test binary stand in for `netdir agent`: with
// NICAGENT_CLI=1 it runs the command (Command, which `netdir agent` is)
// on its arguments, so the netns test starts the agent exactly as the
// README says, without building the netdir binary.
func TestMain(m *testing.M) {
	if os.Getenv("NICAGENT_CLI") == "1" {
		cmd := Command()
		if len(os.Args) < 2 || os.Args[1] != "agent" {
			fmt.Fprintln(os.Stderr, "usage: NICAGENT_CLI=1 nicagent.test agent --iface IF --controller ADDR ...")
			os.Exit(2)
		}
		cmd.SetArgs(os.Args[2:])
		if err := cmd.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "netdir:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for a process's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// scrape reads the agent's Prometheus metrics from inside namespace ns.
func scrape(ns, addr string) (map[string]float64, error) {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (c net.Conn, err error) {
			err = inNS(ns, func() error {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, a)
				return err
			})
			return c, err
		},
		DisableKeepAlives: true,
	}}
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// TestNetnsCommand starts the agent as the README says, `netdir agent
// --iface eth0 --controller ADDR` run in the client host's namespace (this
// test binary stands in for netdir), in front of three storage nodes, and
// checks that a hot key's reads are split over its replicas, writes land,
// the metrics report it, and SIGTERM detaches the agent and removes its
// service route.
func TestNetnsCommand(t *testing.T) {
	e, lis := startCluster(t, clusterOptions{listen: func(tb *testbed) (l net.Listener, err error) {
		// The controller's API on the client host's loopback, where the
		// agent process (in that namespace) reaches it.
		err = inNS(tb.hosts["c"], func() error {
			l, err = net.Listen("tcp", "127.0.0.1:0")
			return err
		})
		return l, err
	}})
	cns := e.tb.hosts["c"]
	const metrics = "127.0.0.1:9475"
	var out syncBuffer
	cmd := exec.Command("ip", "netns", "exec", cns, os.Args[0], "agent", "--iface", "eth0",
		"--controller", lis.Addr().String(), "--metrics", metrics)
	cmd.Env = append(os.Environ(), "NICAGENT_CLI=1")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	}()
	metric := func(name string) float64 {
		m, err := scrape(cns, metrics)
		if err != nil {
			return -1
		}
		return m[name]
	}
	waitFor(t, 20*time.Second, "the agent process to sync and resolve the nodes", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the agent exited: %v\n%s", err, out.String())
		default:
		}
		return metric("netdir_agent_synced") == 1 && metric("netdir_agent_nodes_resolved") == 3
	})
	e.newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	hot := []byte("hot-key")
	if _, err := e.client.Put(ctx, hot, []byte("v1")); err != nil {
		t.Fatalf("put: %v\n%s", err, out.String())
	}
	if _, err := e.ctl.Pin(ctx, hot); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the pinned key in the agent's directory", func() bool {
		return metric("netdir_agent_directory_entries") == 1
	})
	const reads = 150
	by := e.readsByNode(ctx, t, hot, "v1", reads)
	t.Logf("reads of the hot key by node: %v", by)
	for _, n := range e.lay.ChainOf(wire.HashKey(hot)) {
		// Every replica gets a share: at least 1/9 of the reads (both
		// candidates the same replica), 17 ± 4 of 150.
		if by[n] == 0 {
			t.Errorf("replica %d served %d of %d reads: %v", n, by[n], reads, by)
		}
	}
	if h := metric(`netdir_agent_packets_total{outcome="hit"}`); h < reads {
		t.Errorf("the agent reports %v hits, want at least %d", h, reads)
	}
	if _, err := e.client.Put(ctx, hot, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := e.client.Get(ctx, hot); err != nil || string(got) != "v2" {
		t.Fatalf("get after put = %q, %v", got, err)
	}

	// SIGTERM: the agent detaches and removes the route it installed.
	stopped = true
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the agent exited with %v\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the agent did not stop on SIGTERM\n%s", out.String())
	}
	routes, err := exec.Command("ip", "-n", cns, "route", "show", DefaultService.Addr().String()).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(routes)) != 0 {
		t.Errorf("after the agent stopped, the service route: %q, %v", routes, err)
	}
	link, err := exec.Command("ip", "-n", cns, "link", "show", "eth0").CombinedOutput()
	if err != nil || bytes.Contains(link, []byte("xdp")) {
		t.Errorf("after the agent stopped, eth0: %s, %v", link, err)
	}
	if !strings.Contains(out.String(), "agent on eth0 (XDP native") {
		t.Errorf("the agent's output: %s", out.String())
	}
}
