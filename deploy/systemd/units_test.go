// Package systemd holds netdir's systemd units and the example files they
// read (cluster.yaml, controller.yaml, netdir.env), and their test: each
// unit's ExecStart, as systemd would expand it, runs in a network namespace
// of its own, and a put and a get cross them.
package systemd

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// unit is a unit file's [Service] settings that the test uses.
type unit struct {
	env        map[string]string // Environment=, then EnvironmentFile=
	execStart  string
	restart    bool          // Restart=on-failure
	restartSec time.Duration // RestartSec=
}

// parseEnv reads KEY=VALUE words (Environment=) or lines (an env file).
func parseEnv(dst map[string]string, words []string) {
	for _, w := range words {
		if k, v, ok := strings.Cut(w, "="); ok && !strings.HasPrefix(strings.TrimSpace(w), "#") {
			dst[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
}

// readUnit parses path's [Service] section; envFile stands for the file
// that EnvironmentFile= names (read after Environment=, as systemd does).
func readUnit(t *testing.T, path, envFile string) unit {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{env: map[string]string{}}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section != "[Service]" {
			continue
		}
		switch k {
		case "Environment":
			parseEnv(u.env, strings.Fields(v))
		case "EnvironmentFile":
			b, err := os.ReadFile(envFile)
			if err != nil {
				t.Fatal(err)
			}
			parseEnv(u.env, strings.Split(string(b), "\n"))
		case "ExecStart":
			u.execStart = v
		case "Restart":
			u.restart = v == "on-failure"
		case "RestartSec":
			sec, err := time.ParseDuration(v + "s")
			if err != nil {
				t.Fatalf("%s: RestartSec=%s: %v", path, v, err)
			}
			u.restartSec = sec
		}
	}
	if u.execStart == "" {
		t.Fatalf("%s: no ExecStart", path)
	}
	return u
}

var braced = regexp.MustCompile(`\$\{(\w+)\}`)

// argv expands ExecStart as systemd does: %i is the instance; ${VAR} is
// one word; a word $VAR splits into words, none if empty.
func (u unit) argv(instance string) []string {
	var args []string
	for _, w := range strings.Fields(strings.ReplaceAll(u.execStart, "%i", instance)) {
		if name, ok := strings.CutPrefix(w, "$"); ok && !strings.HasPrefix(name, "{") {
			args = append(args, strings.Fields(u.env[name])...)
			continue
		}
		args = append(args, braced.ReplaceAllStringFunc(w, func(m string) string { return u.env[m[2:len(m)-1]] }))
	}
	return args
}

// host is a namespace on the test's bridge, with the address the example
// files give it.
type host struct{ ns, addr string }

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestUnitsNetns starts the units of a three-node cluster (nodes, switch,
// controller, agent), each ExecStart in its own network namespace with the
// address the example files give it, and checks that a value put from the
// agent's host is read from the controller's through the switch, and
// through the agent's service address.
func TestUnitsNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the units' netns test needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the units' netns test needs iproute2's `ip` on PATH")
	}
	if testing.Short() {
		t.Skip("-short: the units' netns test builds netdir and runs a cluster")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "netdir")
	build := exec.Command("go", "build", "-o", bin, "github.com/netdir/netdir/cmd/netdir")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// The files' install paths, under tmp; the P4Info from the repository.
	etc, lib := filepath.Join(tmp, "etc"), filepath.Join(tmp, "lib")
	paths := strings.NewReplacer("/usr/local/bin/netdir", bin, "/etc/netdir", etc, "/var/lib/netdir", lib,
		"/usr/local/share/netdir", filepath.Join(repo, "p4", "build"))
	for _, d := range []string{etc, lib} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"cluster.yaml", "controller.yaml", "netdir.env"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, f), []byte(paths.Replace(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	prefix := fmt.Sprintf("ndsd%d", os.Getpid()%100000)
	bridge := prefix + "-br"
	hosts := map[string]host{
		"n1": {prefix + "-n1", "10.74.0.1"}, "n2": {prefix + "-n2", "10.74.0.2"}, "n3": {prefix + "-n3", "10.74.0.3"},
		"sw": {prefix + "-sw", "10.74.0.10"}, "ctl": {prefix + "-ctl", "10.74.0.20"}, "agent": {prefix + "-agent", "10.74.0.30"},
	}
	t.Cleanup(func() {
		for _, h := range hosts {
			exec.Command("ip", "netns", "del", h.ns).Run()
		}
		exec.Command("ip", "netns", "del", bridge).Run()
	})
	run(t, "ip", "netns", "add", bridge)
	run(t, "ip", "-n", bridge, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", bridge, "link", "set", "br0", "up")
	for name, h := range hosts {
		run(t, "ip", "netns", "add", h.ns)
		run(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", bridge, "link", "add", "v"+name, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		run(t, "ip", "-n", bridge, "link", "set", "v"+name, "master", "br0", "up")
		run(t, "ip", "-n", h.ns, "addr", "add", h.addr+"/24", "dev", "eth0")
		run(t, "ip", "-n", h.ns, "link", "set", "eth0", "up")
	}

	envFile := filepath.Join(etc, "netdir.env")
	type service struct {
		unit, instance, host string
	}
	services := []service{
		{"netdir-node@.service", "1", "n1"}, {"netdir-node@.service", "2", "n2"}, {"netdir-node@.service", "3", "n3"},
		{"netdir-switch.service", "", "sw"}, {"netdir-controller.service", "", "ctl"}, {"netdir-agent.service", "", "agent"},
	}
	sups := map[string]*supervisor{}
	for _, s := range services {
		u := readUnit(t, s.unit, envFile)
		argv := u.argv(s.instance)
		for i := range argv {
			argv[i] = paths.Replace(argv[i])
		}
		sup := &supervisor{argv: append([]string{"netns", "exec", hosts[s.host].ns}, argv...), unit: u, stop: make(chan struct{}), done: make(chan struct{})}
		go sup.run()
		t.Logf("%s in %s: %s", s.unit, hosts[s.host].ns, strings.Join(argv, " "))
		sups[s.host] = sup
	}
	defer func() {
		for name, sup := range sups {
			sup.close()
			if t.Failed() {
				t.Logf("%s's output (%d starts):\n%s", name, sup.starts, sup.log.String())
			}
		}
	}()

	// kv runs netdir put or get in a host's namespace.
	kv := func(hostName string, args ...string) (string, error) {
		argv := append([]string{"netns", "exec", hosts[hostName].ns, bin}, args...)
		out, err := exec.Command("ip", argv...).CombinedOutput()
		return string(out), err
	}
	sw := hosts["sw"].addr + ":7420"
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := kv("agent", "put", "--service", sw, "--timeout", "2s", "greeting", "hello")
		if err == nil {
			t.Logf("put from the agent's host through the switch: %s", strings.TrimSpace(out))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no put through the switch within 60 s: %v: %s", err, out)
		}
		time.Sleep(time.Second)
	}
	out, err := kv("ctl", "get", "--service", sw, "--timeout", "5s", "greeting")
	if err != nil || !strings.Contains(out, `"hello"`) {
		t.Fatalf("get from the controller's host through the switch: %v: %s", err, out)
	}
	t.Logf("get from the controller's host through the switch: %s", strings.TrimSpace(out))

	// The agent: its service address on its own host.
	deadline = time.Now().Add(30 * time.Second)
	for {
		out, err = kv("agent", "get", "--service", "169.254.74.20:7420", "--timeout", "2s", "greeting")
		if err == nil && strings.Contains(out, `"hello"`) {
			t.Logf("get through the agent's service address: %s", strings.TrimSpace(out))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no get through the agent within 30 s: %v: %s", err, out)
		}
		time.Sleep(time.Second)
	}
}

// supervisor runs a unit's command as systemd would: again RestartSec
// after a failure, if Restart=on-failure; SIGTERM to stop.
type supervisor struct {
	argv       []string
	unit       unit
	stop, done chan struct{}

	mu     sync.Mutex
	cmd    *exec.Cmd
	log    syncBuffer
	starts int
}

func (s *supervisor) run() {
	defer close(s.done)
	for {
		cmd := exec.Command("ip", s.argv...)
		cmd.Stdout, cmd.Stderr = &s.log, &s.log
		s.mu.Lock()
		s.cmd = cmd
		s.starts++
		err := cmd.Start()
		s.mu.Unlock()
		if err == nil {
			err = cmd.Wait()
		}
		select {
		case <-s.stop:
			return
		default:
		}
		if err == nil || !s.unit.restart {
			return
		}
		select {
		case <-s.stop:
			return
		case <-time.After(s.unit.restartSec):
		}
	}
}

func (s *supervisor) close() {
	close(s.stop)
	s.mu.Lock()
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.mu.Lock()
		s.cmd.Process.Kill()
		s.mu.Unlock()
		<-s.done
	}
}

// syncBuffer is a log that a process writes while the test may read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
