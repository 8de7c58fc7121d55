package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/spf13/cobra"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/netdir/netdir/model"
)

func captureCmd() *cobra.Command {
	var (
		iface, mirror, filter, out string
		count                      int
		duration                   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "capture (--interface IF | --mirror ADDR) [--filter EXPR] [-w FILE]",
		Short: "Capture netdir traffic as pcap (an interface) or pcapng (the switch's mirror)",
		Long: `Capture packets for Wireshark or tshark (tools/wireshark/netdir.lua decodes them).

With --interface, read the interface with an AF_PACKET socket (root or
CAP_NET_RAW) and write pcap (gopacket's pcapgo). With --mirror, listen on ADDR (UDP) for the
copies that a software switch started with --mirror ADDR sends of every
datagram it receives, and write them as pcapng: Ethernet/IPv4 (or IPv6)/UDP
frames from the sender to the switch, at the switch's clock.

--filter is a pcap-filter(7) expression ("udp port 7420"), compiled by
tcpdump -ddd, applied in the kernel on an interface and to each frame of
the mirror. Stops after --count packets, after --duration, or on SIGINT.

  netdir capture -i eth0 -f 'udp port 7420' -w netdir.pcap
  netdir switch --nodes cluster.yaml --mirror 127.0.0.1:7499 &
  netdir capture --mirror 127.0.0.1:7499 -w - | tshark -X lua_script:tools/wireshark/netdir.lua -r -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (iface == "") == (mirror == "") {
				return errors.New("capture: give one of --interface and --mirror")
			}
			prog, err := compileFilter(filter)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if out != "-" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			var n int
			if iface != "" {
				n, err = captureInterface(ctx, iface, prog, w, count)
			} else {
				n, err = captureMirror(ctx, mirror, prog, w, count)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "capture: %d packets\n", n)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&iface, "interface", "i", "", "interface to capture on (pcap)")
	f.StringVar(&mirror, "mirror", "", "UDP address to receive a software switch's mirror copies on (pcapng)")
	f.StringVarP(&filter, "filter", "f", "", "pcap-filter expression, e.g. 'udp port 7420' (needs tcpdump to compile)")
	f.StringVarP(&out, "write", "w", "-", "file to write (-: standard output)")
	f.IntVarP(&count, "count", "c", 0, "stop after this many packets (0: no limit)")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: no limit)")
	return cmd
}

// compileFilter compiles a pcap-filter expression for Ethernet frames with
// tcpdump -ddd (libpcap's compiler; the build needs no libpcap). Empty: no
// filter.
func compileFilter(expr string) ([]bpf.RawInstruction, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	if _, err := exec.LookPath("tcpdump"); err != nil {
		return nil, errors.New("capture: --filter needs tcpdump to compile it (Debian: apt-get install tcpdump)")
	}
	var stderr strings.Builder
	c := exec.Command("tcpdump", "-ddd", "-y", "EN10MB", expr)
	c.Stderr = &stderr
	b, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("capture: filter %q: %v: %s", expr, err, strings.TrimSpace(stderr.String()))
	}
	return parseDDD(string(b))
}

// parseDDD reads tcpdump -ddd output: a count, then "code jt jf k" lines.
func parseDDD(s string) ([]bpf.RawInstruction, error) {
	sc := bufio.NewScanner(strings.NewReader(s))
	var prog []bpf.RawInstruction
	want := -1
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		if want < 0 {
			n, err := strconv.Atoi(fs[0])
			if err != nil || len(fs) != 1 {
				return nil, fmt.Errorf("capture: compiled filter: bad count %q", sc.Text())
			}
			want = n
			continue
		}
		var v [4]uint64
		if len(fs) != 4 {
			return nil, fmt.Errorf("capture: compiled filter: bad line %q", sc.Text())
		}
		for i, x := range fs {
			n, err := strconv.ParseUint(x, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("capture: compiled filter: bad line %q", sc.Text())
			}
			v[i] = n
		}
		prog = append(prog, bpf.RawInstruction{Op: uint16(v[0]), Jt: uint8(v[1]), Jf: uint8(v[2]), K: uint32(v[3])})
	}
	if want != len(prog) {
		return nil, fmt.Errorf("capture: compiled filter: %d instructions, want %d", len(prog), want)
	}
	return prog, nil
}

// captureInterface writes pcap of iface's frames that pass prog until ctx
// ends or count frames are written.
func captureInterface(ctx context.Context, iface string, prog []bpf.RawInstruction, w io.Writer, count int) (int, error) {
	src, err := openPacketSocket(iface, prog)
	if err != nil {
		return 0, fmt.Errorf("capture: %s: %w", iface, err)
	}
	defer src.Close()
	return writeFrames(ctx, src, w, count)
}

// packetSocket is an AF_PACKET socket bound to one interface, read
// through Go's poller so that a read can be given a deadline: the capture
// stops on time (pcapgo.EthernetHandle blocks in recvmsg until a frame
// arrives).
type packetSocket struct{ f *os.File }

// openPacketSocket opens a packet socket on iface with prog attached
// before it is bound, so that no frame escapes the filter.
func openPacketSocket(iface string, prog []bpf.RawInstruction) (*packetSocket, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	allProtocols := int(uint16(unix.ETH_P_ALL)<<8 | uint16(unix.ETH_P_ALL)>>8) // network byte order
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, allProtocols)
	if err != nil {
		return nil, fmt.Errorf("packet socket (root or CAP_NET_RAW): %w", err)
	}
	if len(prog) > 0 {
		filter := make([]unix.SockFilter, len(prog))
		for i, in := range prog {
			filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
		}
		fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("attach filter: %w", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(allProtocols), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &packetSocket{f: os.NewFile(uintptr(fd), "packet:"+iface)}, nil
}

func (s *packetSocket) Close() error { return s.f.Close() }

// writeFrames copies src's frames to w as pcap, until ctx ends or count
// frames are written.
func writeFrames(ctx context.Context, src *packetSocket, w io.Writer, count int) (int, error) {
	const snapLen = 1 << 16
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(snapLen, layers.LinkTypeEthernet); err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, func() { _ = src.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, snapLen)
	n := 0
	for count == 0 || n < count {
		m, err := src.f.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, fmt.Errorf("capture: read: %w", err)
		}
		ci := gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: m, Length: m}
		if err := pw.WritePacket(ci, buf[:m]); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// captureMirror receives a switch's mirror copies on addr and writes those
// that pass prog as pcapng, until ctx ends or count are written.
func captureMirror(ctx context.Context, addr string, prog []bpf.RawInstruction, w io.Writer, count int) (int, error) {
	var vm *bpf.VM
	if prog != nil {
		insns, ok := bpf.Disassemble(prog)
		if !ok {
			return 0, errors.New("capture: the compiled filter has instructions x/net/bpf cannot run")
		}
		var err error
		if vm, err = bpf.NewVM(insns); err != nil {
			return 0, fmt.Errorf("capture: filter: %w", err)
		}
	}
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return 0, fmt.Errorf("capture: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	ng, err := pcapgo.NewNgWriter(w, layers.LinkTypeEthernet)
	if err != nil {
		return 0, err
	}
	defer ng.Flush()
	buf := make([]byte, 1<<16)
	n := 0
	for count == 0 || n < count {
		m, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, fmt.Errorf("capture: %w", err)
		}
		sw, _ := netip.ParseAddrPort(from.String())
		frame, ts, err := mirrorFrame(buf[:m], sw)
		if err != nil {
			continue // not a mirror copy: someone else's datagram
		}
		if vm != nil {
			if keep, err := vm.Run(frame); err != nil || keep == 0 {
				continue
			}
		}
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, int64(ts)), CaptureLength: len(frame), Length: len(frame)}
		if err := ng.WritePacket(ci, frame); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// mirrorFrame turns a mirror copy into the Ethernet frame it stands for:
// from its sender to the switch (sw, the copy's source), and the switch's
// clock as its time.
func mirrorFrame(b []byte, sw netip.AddrPort) ([]byte, uint64, error) {
	from, ts, pkt, err := model.ParseMirror(b)
	if err != nil {
		return nil, 0, err
	}
	sw = netip.AddrPortFrom(sw.Addr().Unmap(), sw.Port())
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: layers.UDPPort(from.Port()), DstPort: layers.UDPPort(sw.Port())}
	var ip gopacket.SerializableLayer
	if from.Addr().Is4() && sw.Addr().Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: from.Addr().AsSlice(), DstIP: sw.Addr().AsSlice()}
		udp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		s16, d16 := from.Addr().As16(), sw.Addr().As16()
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: s16[:], DstIP: d16[:]}
		udp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	}
	buf := gopacket.NewSerializeBuffer()
	err = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(pkt))
	return buf.Bytes(), ts, err
}
