//go:build linux

package bmv2test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace that the test creates and deletes, holding
// one veth pair per switch port: "sw<port>" is given to BMv2, "h<port>" is the
// test's end, read and written through AF_PACKET sockets opened inside the
// namespace.
type Netns struct {
	Name  string
	ports map[uint32]*hostPort
	rx    chan Frame
	stop  chan struct{}
	wg    sync.WaitGroup
}

// Frame is a frame that left the switch on a port.
type Frame struct {
	Port uint32
	Data []byte
}

type hostPort struct {
	fd      int
	ifindex int
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NewNetns creates the namespace and a veth pair per port.
func NewNetns(name string, ports []uint32) (*Netns, error) {
	n := &Netns{Name: name, ports: map[uint32]*hostPort{}, rx: make(chan Frame, 1024), stop: make(chan struct{})}
	_ = run("ip", "netns", "del", name) // a leftover of a killed run
	if err := run("ip", "netns", "add", name); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			n.Close()
		}
	}()
	// No IPv6: the kernel's router solicitations and DAD would be traffic
	// the switch forwards and the test sees.
	for _, k := range []string{"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"} {
		if err := run("ip", "netns", "exec", name, "sysctl", "-qw", k); err != nil {
			return nil, err
		}
	}
	// Loopback carries the switch's Thrift server.
	if err := run("ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	for _, p := range ports {
		sw, h := fmt.Sprintf("sw%d", p), fmt.Sprintf("h%d", p)
		if err := run("ip", "-n", name, "link", "add", sw, "type", "veth", "peer", "name", h); err != nil {
			return nil, err
		}
		for _, i := range []string{sw, h} {
			if err := run("ip", "-n", name, "link", "set", i, "up", "promisc", "on"); err != nil {
				return nil, err
			}
		}
	}
	err := n.Do(func() error {
		for _, p := range ports {
			fd, ifindex, err := packetSocket(fmt.Sprintf("h%d", p))
			if err != nil {
				return err
			}
			n.ports[p] = &hostPort{fd: fd, ifindex: ifindex}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for p, hp := range n.ports {
		n.wg.Add(1)
		go n.recv(p, hp)
	}
	ok = true
	return n, nil
}

// packetSocket opens an AF_PACKET socket bound to interface name (in the
// calling thread's namespace) that reads every frame, with a 50 ms read
// timeout so its reader can notice a stop.
func packetSocket(name string) (fd, ifindex int, err error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return -1, 0, err
	}
	fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return -1, 0, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index}); err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, ifc.Index, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Do runs f on an OS thread inside the namespace. Sockets f creates stay in
// the namespace. The thread is discarded afterwards.
func (n *Netns) Do(f func() error) error { return InNetns(n.Name, f) }

// InNetns runs f on an OS thread inside the named namespace (one that `ip
// netns` made). Sockets f creates stay in the namespace, whichever thread
// uses them later. The thread is discarded afterwards.
func InNetns(name string, f func() error) error { return InNetnsPath("/var/run/netns/"+name, f) }

// InNetnsPath is InNetns for the namespace file at path, such as a
// process's /proc/PID/ns/net.
func InNetnsPath(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

func (n *Netns) recv(port uint32, hp *hostPort) {
	defer n.wg.Done()
	buf := make([]byte, 65536)
	for {
		select {
		case <-n.stop:
			return
		default:
		}
		k, from, err := unix.Recvfrom(hp.fd, buf, 0)
		if err != nil {
			continue // timeout (EAGAIN) or EINTR: check stop
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // our own injection
		}
		select {
		case n.rx <- Frame{Port: port, Data: append([]byte(nil), buf[:k]...)}:
		case <-n.stop:
			return
		}
	}
}

// Send injects a frame into the switch on port.
func (n *Netns) Send(port uint32, frame []byte) error {
	hp, ok := n.ports[port]
	if !ok {
		return fmt.Errorf("no veth for switch port %d", port)
	}
	_, err := unix.Write(hp.fd, frame)
	return err
}

// Has reports whether port has a veth pair.
func (n *Netns) Has(port uint32) bool { _, ok := n.ports[port]; return ok }

// Drain discards frames already received.
func (n *Netns) Drain() {
	for {
		select {
		case <-n.rx:
		default:
			return
		}
	}
}

// Recv waits up to d for the next frame.
func (n *Netns) Recv(d time.Duration) (Frame, bool) {
	select {
	case f := <-n.rx:
		return f, true
	case <-time.After(d):
		return Frame{}, false
	}
}

// Close stops the readers and deletes the namespace with its veths.
func (n *Netns) Close() {
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
	n.wg.Wait()
	for _, hp := range n.ports {
		unix.Close(hp.fd)
	}
	_ = run("ip", "netns", "del", n.Name)
}

// Switch is a simple_switch_grpc process running in the namespace.
type Switch struct {
	cmd  *exec.Cmd
	Log  string // path of its log
	done chan struct{}
}

// StartSwitch starts simple_switch_grpc in ns with a port per veth, P4Runtime
// on a unix socket (reachable from outside the namespace) and Thrift on
// thriftPort inside it.
func StartSwitch(ns *Netns, bin string, deviceID uint64, grpcAddr string, thriftPort int, logPath string, verbose bool) (*Switch, error) {
	ifaces := map[uint32]string{}
	for p := range ns.ports {
		ifaces[p] = fmt.Sprintf("sw%d", p)
	}
	return startSwitch(ns.Name, ifaces, bin, deviceID, grpcAddr, thriftPort, logPath, verbose)
}

// startSwitch starts simple_switch_grpc in namespace ns, with BMv2 port p on
// interface ifaces[p], no program (the controller pushes one), P4Runtime at
// grpcAddr and Thrift on thriftPort.
func startSwitch(ns string, ifaces map[uint32]string, bin string, deviceID uint64, grpcAddr string, thriftPort int, logPath string, verbose bool) (*Switch, error) {
	args := []string{"netns", "exec", ns, bin, "--device-id", fmt.Sprint(deviceID), "--no-p4",
		"--thrift-port", fmt.Sprint(thriftPort)}
	for p, ifc := range ifaces {
		args = append(args, "-i", fmt.Sprintf("%d@%s", p, ifc))
	}
	if verbose {
		args = append(args, "--log-console", "-L", "debug")
	}
	args = append(args, "--", "--grpc-server-addr", grpcAddr)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	s := &Switch{cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	return s, nil
}

// Exited reports whether the switch process has ended.
func (s *Switch) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Stop ends the switch process (the one this test started, by its pid).
func (s *Switch) Stop() {
	if s.Exited() {
		return
	}
	_ = s.cmd.Process.Signal(unix.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// LogTail returns the last lines of the switch log.
func (s *Switch) LogTail(lines int) string {
	b, _ := os.ReadFile(s.Log)
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
