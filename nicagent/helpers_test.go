package nicagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// needBPF skips the test, naming what is missing, unless it can load XDP and
// TC programs: root (CAP_BPF and CAP_NET_ADMIN) and a kernel with BPF.
func needBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("nicagent: the eBPF tests need root (CAP_BPF, CAP_NET_ADMIN); run `make test` as root, as .ci/run does")
	}
	for _, pt := range []ebpf.ProgramType{ebpf.XDP, ebpf.SchedCLS} {
		if err := features.HaveProgramType(pt); err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				t.Skipf("nicagent: this kernel cannot load %s programs: %v", pt, err)
			}
			t.Fatalf("probe %s: %v", pt, err)
		}
	}
}

var (
	sharedMu sync.Mutex
	shared   *Dataplane
)

// loadTest returns a Dataplane sized for tests, loaded once per test binary
// (the verifier's work is the costly part); each test resets it.
func loadTest(t testing.TB) *Dataplane {
	t.Helper()
	needBPF(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		d, err := Load(Options{PartitionCap: 1 << 10, SlotCap: 4096})
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		shared = d
	}
	if err := shared.ClearClock(); err != nil {
		t.Fatal(err)
	}
	return shared
}

// Return codes.
const (
	xdpAborted = 0
	xdpDrop    = 1
	xdpPass    = 2
	xdpTx      = 3
	tcOK       = 0
	tcShot     = 2
)

// The test network: every address is a constant used only inside
// BPF_PROG_TEST_RUN, never configured on an interface.
var (
	agentMAC  = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}
	clientMAC = net.HardwareAddr{0x02, 0xcc, 0, 0, 0, 1}
	service   = netip.MustParseAddrPort("10.201.0.1:7420")
)

// portSource is the UDP source that stands for vector ingress port P.
func portSource(p uint32) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 200, byte(p >> 8), byte(p)}), wire.ServicePort)
}

// testNodeAddr is node n's address in tests.
func testNodeAddr(n wire.NodeID) NodeAddr {
	return NodeAddr{
		MAC:  net.HardwareAddr{0x02, 0xdd, 0, 0, byte(n >> 8), byte(n)},
		Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 100, byte(n >> 8), byte(n)}), 20000+n%10000),
	}
}

// testLayout is nodes 1..n at their testNodeAddr, on 1024 partitions with
// chains of 3.
func testLayout(tb testing.TB, n int) *layout.Map {
	tb.Helper()
	var nodes []layout.Node
	for id := wire.NodeID(1); int(id) <= n; id++ {
		nodes = append(nodes, layout.Node{ID: id, Addr: testNodeAddr(id).Addr.String()})
	}
	m, err := layout.New(layout.Config{PartitionBits: 10, Replicas: 3, Nodes: nodes})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// frame wraps a netdir packet in Ethernet, IPv4 and UDP, with checksums.
func frame(src, dst netip.AddrPort, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: agentMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: 0x1234, Protocol: layers.IPProtocolUDP,
		SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	udp := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, gopacket.Payload(payload)); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// parsed is a frame taken apart.
type parsed struct {
	eth     *layers.Ethernet
	ip      *layers.IPv4
	udp     *layers.UDP
	payload []byte
}

func parseFrame(b []byte) (*parsed, error) { return parseFrameCsum(b, true) }

// parseFrameCsum parses a frame, verifying its checksums if verify.
func parseFrameCsum(b []byte, verify bool) (*parsed, error) {
	var p parsed
	p.eth, p.ip, p.udp = &layers.Ethernet{}, &layers.IPv4{}, &layers.UDP{}
	dp := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, p.eth, p.ip, p.udp)
	dp.IgnoreUnsupported = true
	var decoded []gopacket.LayerType
	if err := dp.DecodeLayers(b, &decoded); err != nil {
		return nil, err
	}
	if len(decoded) != 3 {
		return nil, fmt.Errorf("decoded %v, want Ethernet/IPv4/UDP", decoded)
	}
	p.payload = p.udp.Payload
	if !verify {
		return &p, nil
	}
	if err := checksums(b[14:]); err != nil {
		return nil, err
	}
	return &p, nil
}

func sum16(b []byte, s uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// checksums verifies the IPv4 header and UDP checksums of an IP packet.
func checksums(ip []byte) error {
	if len(ip) < 20 || len(ip) < int(ip[0]&0xf)*4+8 {
		return errors.New("truncated")
	}
	ihl := int(ip[0]&0xf) * 4
	if fold(sum16(ip[:ihl], 0)) != 0xffff {
		return errors.New("bad IPv4 header checksum")
	}
	udp := ip[ihl:]
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen > len(udp) {
		return fmt.Errorf("UDP length %d over the %d bytes present", ulen, len(udp))
	}
	if binary.BigEndian.Uint16(udp[6:]) == 0 {
		return nil // no checksum
	}
	s := sum16(ip[12:20], 0)
	s += uint32(ip[9]) + uint32(ulen)
	if fold(sum16(udp[:ulen], s)) != 0xffff {
		return errors.New("bad UDP checksum")
	}
	return nil
}

// run runs prog once over data and returns its verdict and output.
func run(prog *ebpf.Program, data []byte) (uint32, []byte, error) {
	out := make([]byte, len(data)+256)
	opts := ebpf.RunOptions{Data: data, DataOut: out}
	ret, err := prog.Run(&opts)
	if err != nil {
		return 0, nil, err
	}
	return ret, opts.DataOut, nil
}

// counterDelta names the one counter that moved between a and b.
func counterDelta(a, b Stats) (directory.Action, directory.Reason, error) {
	var moved []string
	var act directory.Action
	var reason directory.Reason
	if b.Hits+b.Misses > a.Hits+a.Misses {
		moved, act = append(moved, "hits/misses"), directory.Forward
	}
	if b.Replies > a.Replies {
		moved, act = append(moved, "replies"), directory.ToClient
	}
	if b.VSBs > a.VSBs {
		moved, act = append(moved, "vsbs"), directory.Multicast
	}
	if b.Passed > a.Passed {
		moved, act = append(moved, "passed"), directory.Pass
	}
	if b.DropTotal > a.DropTotal {
		moved, act = append(moved, "drops"), directory.Drop
		for _, r := range directory.Reasons() {
			if b.Drops[r] > a.Drops[r] {
				reason = r
			}
		}
	}
	if len(moved) != 1 {
		return 0, 0, fmt.Errorf("counters moved: %v, want exactly one", moved)
	}
	return act, reason, nil
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
