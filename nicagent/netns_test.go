package nicagent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/netdir/netdir/internal/netnsrun"
)

// testbed is a set of network namespaces the test creates and deletes:
// hosts on one bridge, which lives in a namespace of its own, so that
// nothing is configured outside them.
type testbed struct {
	t      *testing.T
	prefix string
	bridge string            // the bridge's namespace
	hosts  map[string]string // host → namespace
}

// newTestbed creates the bridge namespace; addHost adds hosts to it.
func newTestbed(t *testing.T) *testbed {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("nicagent: the netns testbed needs iproute2's `ip` on PATH")
	}
	tb := &testbed{t: t, prefix: fmt.Sprintf("ndt%d", os.Getpid()%100000), hosts: map[string]string{}}
	tb.bridge = tb.prefix + "-br"
	t.Cleanup(tb.destroy)
	tb.ip("netns", "add", tb.bridge)
	tb.ip("-n", tb.bridge, "link", "set", "lo", "up")
	tb.ip("-n", tb.bridge, "link", "add", "br0", "type", "bridge")
	tb.ip("-n", tb.bridge, "link", "set", "br0", "up")
	return tb
}

func (tb *testbed) ip(args ...string) {
	tb.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		tb.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// addHost creates a namespace with eth0 (addr, a CIDR) on the bridge; the
// bridge's end is named port.
func (tb *testbed) addHost(name, addr string) string {
	ns := tb.prefix + "-" + name
	port := "v" + name
	tb.ip("netns", "add", ns)
	tb.hosts[name] = ns
	tb.ip("-n", ns, "link", "set", "lo", "up")
	tb.ip("-n", tb.bridge, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
	tb.ip("-n", tb.bridge, "link", "set", port, "master", "br0", "up")
	tb.ip("-n", ns, "addr", "add", addr, "dev", "eth0")
	tb.ip("-n", ns, "link", "set", "eth0", "up")
	return ns
}

func (tb *testbed) destroy() {
	for _, ns := range tb.hosts {
		exec.Command("ip", "netns", "del", ns).Run()
	}
	exec.Command("ip", "netns", "del", tb.bridge).Run()
}

// path is a namespace's bind-mount path.
func nsPath(ns string) string { return "/var/run/netns/" + ns }

// inNS runs f on an OS thread in namespace ns; sockets f creates live there.
func inNS(ns string, f func() error) error { return netnsrun.In(ns, f) }

// setTxChecksum turns an interface's transmit checksum offload on or off
// (ETHTOOL_STXCSUM). Off on a bridge port, the kernel completes every
// offloaded checksum before the frame leaves it, so the receiver verifies
// what the sender's stack and the programs computed.
func setTxChecksum(ns, ifname string, on bool) error {
	return inNS(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		val := struct{ cmd, data uint32 }{cmd: 0x17} // ETHTOOL_STXCSUM
		if on {
			val.data = 1
		}
		var ifr struct {
			name [unix.IFNAMSIZ]byte
			data uintptr
			_    [16]byte
		}
		copy(ifr.name[:], ifname)
		ifr.data = uintptr(unsafe.Pointer(&val))
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
			return fmt.Errorf("ETHTOOL_STXCSUM %s: %w", ifname, errno)
		}
		runtime.KeepAlive(&val)
		return nil
	})
}

// udpCsumErrors reads the UDP InCsumErrors counter of namespace ns.
func udpCsumErrors(ns string) (uint64, error) {
	var n uint64
	err := inNS(ns, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		var names []string
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 || f[0] != "Udp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i, name := range names {
				if name == "InCsumErrors" && i < len(f) {
					n, err = strconv.ParseUint(f[i], 10, 64)
					return err
				}
			}
		}
		return fmt.Errorf("no Udp InCsumErrors in /proc/net/snmp")
	})
	return n, err
}
