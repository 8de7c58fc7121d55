//go:build linux

package bmv2test

import (
	"fmt"
	"net"
	"sort"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Fabric is a switch with hosts behind it, each in a network namespace of
// its own: the switch's namespace holds "p<port>", one end of a veth pair
// per switch port, whose other end is the host's eth0. The test creates and
// deletes every namespace; nothing is configured outside them.
//
// Hosts reach each other only through the switch: every address they send
// to has a static neighbour entry (there is no ARP through the P4 program),
// and their transmit checksum offload is off, since BMv2 forwards frames as
// it reads them and would pass on veth's partial checksums.
type Fabric struct {
	prefix string
	Switch string           // the switch's namespace
	hosts  map[uint32]*Host // by switch port
}

// Host is a namespace behind one switch port.
type Host struct {
	Name string // its namespace
	Port uint32 // the switch port it sits behind
	IP   net.IP
	MAC  net.HardwareAddr
}

// Do runs f in the host's namespace (see InNetns).
func (h *Host) Do(f func() error) error { return InNetns(h.Name, f) }

// NewFabric creates the switch's namespace; namespaces are named
// prefix-sw, prefix-<host>.
func NewFabric(prefix string) (*Fabric, error) {
	f := &Fabric{prefix: prefix, Switch: prefix + "-sw", hosts: map[uint32]*Host{}}
	_ = run("ip", "netns", "del", f.Switch) // a leftover of a killed run
	if err := run("ip", "netns", "add", f.Switch); err != nil {
		return nil, err
	}
	if err := f.sysctls(f.Switch); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sysctls turns IPv6 off (router solicitations and DAD would be traffic
// through the switch) and brings loopback up.
func (f *Fabric) sysctls(ns string) error {
	for _, k := range []string{"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"} {
		if err := run("ip", "netns", "exec", ns, "sysctl", "-qw", k); err != nil {
			return err
		}
	}
	return run("ip", "-n", ns, "link", "set", "lo", "up")
}

// AddHost creates namespace prefix-name behind switch port port, with eth0
// at ip/prefixLen and the given MAC.
func (f *Fabric) AddHost(name string, port uint32, ip net.IP, prefixLen int, mac net.HardwareAddr) (*Host, error) {
	if _, ok := f.hosts[port]; ok {
		return nil, fmt.Errorf("switch port %d already has a host", port)
	}
	h := &Host{Name: f.prefix + "-" + name, Port: port, IP: ip.To4(), MAC: mac}
	_ = run("ip", "netns", "del", h.Name)
	if err := run("ip", "netns", "add", h.Name); err != nil {
		return nil, err
	}
	f.hosts[port] = h
	sw := fmt.Sprintf("p%d", port)
	steps := [][]string{
		{"-n", f.Switch, "link", "add", sw, "type", "veth", "peer", "name", "eth0", "netns", h.Name},
		{"-n", f.Switch, "link", "set", sw, "up", "promisc", "on"},
		{"-n", h.Name, "link", "set", "eth0", "address", mac.String()},
		{"-n", h.Name, "addr", "add", fmt.Sprintf("%s/%d", h.IP, prefixLen), "dev", "eth0"},
		{"-n", h.Name, "link", "set", "eth0", "up"},
	}
	if err := f.sysctls(h.Name); err != nil {
		return nil, err
	}
	for _, s := range steps {
		if err := run("ip", s...); err != nil {
			return nil, err
		}
	}
	if err := run("ip", "netns", "exec", h.Name, "ethtool", "-K", "eth0", "tx", "off"); err != nil {
		return nil, fmt.Errorf("checksum offload off: %w", err)
	}
	return h, nil
}

// Hosts returns the hosts by switch port, in port order.
func (f *Fabric) Hosts() []*Host {
	var out []*Host
	for _, h := range f.hosts {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

// Neighbour gives every host a static neighbour entry for ip (the switch's
// service address, say) at mac, and one for every other host.
func (f *Fabric) Neighbour(ip net.IP, mac net.HardwareAddr) error {
	for _, h := range f.hosts {
		if err := run("ip", "-n", h.Name, "neigh", "replace", ip.String(), "lladdr", mac.String(), "dev", "eth0"); err != nil {
			return err
		}
		for _, o := range f.hosts {
			if o == h {
				continue
			}
			if err := run("ip", "-n", h.Name, "neigh", "replace", o.IP.String(), "lladdr", o.MAC.String(), "dev", "eth0"); err != nil {
				return err
			}
		}
	}
	return nil
}

// StartSwitch starts simple_switch_grpc in the switch's namespace with BMv2
// port p on p<p>, no program, P4Runtime at grpcAddr (a unix socket reaches
// it from outside the namespace) and Thrift on thriftPort inside it.
func (f *Fabric) StartSwitch(bin string, deviceID uint64, grpcAddr string, thriftPort int, logPath string, verbose bool) (*Switch, error) {
	ifaces := map[uint32]string{}
	for p := range f.hosts {
		ifaces[p] = fmt.Sprintf("p%d", p)
	}
	return startSwitch(f.Switch, ifaces, bin, deviceID, grpcAddr, thriftPort, logPath, verbose)
}

// Close deletes every namespace (and so the veths).
func (f *Fabric) Close() {
	for _, h := range f.hosts {
		_ = run("ip", "netns", "del", h.Name)
	}
	_ = run("ip", "netns", "del", f.Switch)
}

// Sniffer counts the frames that reach a host's eth0 from the switch.
type Sniffer struct {
	fd    int
	n     atomic.Int64
	stop  chan struct{}
	done  chan struct{}
	match func([]byte) bool
}

// Sniff starts counting the frames arriving on the host's eth0 that match.
func (h *Host) Sniff(match func(frame []byte) bool) (*Sniffer, error) {
	s := &Sniffer{fd: -1, stop: make(chan struct{}), done: make(chan struct{}), match: match}
	err := h.Do(func() error {
		fd, _, err := packetSocket("eth0")
		s.fd = fd
		return err
	})
	if err != nil {
		return nil, err
	}
	go s.run()
	return s, nil
}

func (s *Sniffer) run() {
	defer close(s.done)
	buf := make([]byte, 65536)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		k, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			continue // timeout or EINTR: check stop
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // the host's own frames
		}
		if s.match(buf[:k]) {
			s.n.Add(1)
		}
	}
}

// Count is the number of matching frames so far.
func (s *Sniffer) Count() int64 { return s.n.Load() }

// Close stops counting.
func (s *Sniffer) Close() {
	close(s.stop)
	<-s.done
	unix.Close(s.fd)
}
