package nicagent

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/directory/vectors"
	"github.com/netdir/netdir/wire"
)

// TestVectors holds the eBPF programs to the shared vector suite through
// BPF_PROG_TEST_RUN, in both of the agent's shapes:
//
//   - host: as deployed on a client host. Requests (GET, PUT, DEL) run
//     through the TC egress program, everything else through XDP ingress.
//   - router: XDP alone, routing requests too (router mode), as a host on
//     the path of all of a rack's traffic would.
//
// Each vector's reset picks the contract mode (tor or host) and policy,
// which the programs read from their config, so every file runs on both.
func TestVectors(t *testing.T) {
	d := loadTest(t)
	for _, shape := range []string{"host", "router"} {
		t.Run(shape, func(t *testing.T) {
			vectors.Run(t, &bpfPlane{t: t, d: d, router: shape == "router"})
		})
	}
}

// bpfPlane runs vectors through the programs.
//
// Mapping of the vectors' namespaces onto frames:
//   - Every packet is a UDP datagram to the service address (10.201.0.1:7420)
//     from the source that stands for its ingress port P (10.200.P/256.P%256,
//     port 7420): SetPort(P, storage) puts that source on the allowlist,
//     which is how the programs tell storage nodes from clients.
//   - Node ids are addresses: node n lives at 10.100.n/256.n%256, port
//     20000+n%10000, MAC 02:dd:00:00:n/256:n%256. A forward verdict is read
//     from the output frame: the header's node, which must match the frame's
//     destination MAC, IP and port, with valid checksums.
//   - Other verdicts are read from the counter that moved (each packet moves
//     exactly one) and the program's return code, and the output frame must
//     be the input unchanged.
//   - The clock is the programs' test clock (a config field used only when
//     set), so the "clock" feature is supported.
type bpfPlane struct {
	t      *testing.T
	d      *Dataplane
	router bool
}

func (p *bpfPlane) Supports(feature string) bool {
	switch feature {
	case "clock", "host", "policy", "sketch":
		return true
	}
	return false
}

func (p *bpfPlane) Reset(cfg directory.Config) error {
	if err := p.d.Reset(cfg); err != nil {
		return err
	}
	if err := p.d.SetService(service); err != nil {
		return err
	}
	if err := p.d.SetInterfaceMAC(agentMAC); err != nil {
		return err
	}
	if err := p.d.SetRouter(p.router); err != nil {
		return err
	}
	if err := p.d.SetConsumeVSB(false); err != nil {
		return err
	}
	c := p.d.Config()
	ids := make([]wire.NodeID, c.MaxNodes)
	addrs := make([]NodeAddr, c.MaxNodes)
	for i := range ids {
		ids[i] = wire.NodeID(i)
		addrs[i] = testNodeAddr(ids[i])
	}
	return p.d.SetNodeAddrs(ids, addrs)
}

func (p *bpfPlane) SetPartition(part uint32, chain []wire.NodeID, b []uint8) error {
	return p.d.SetPartition(part, chain, b)
}

func (p *bpfPlane) SetPort(port uint32, kind directory.PortKind) error {
	return p.d.SetSource(portSource(port), kind)
}

func (p *bpfPlane) Insert(h wire.KeyHash, locs []wire.NodeID, r int, ver uint64, b []uint8) error {
	return p.d.Insert(h, locs, r, ver, b)
}

func (p *bpfPlane) Evict(h wire.KeyHash) error                     { return p.d.Evict(h) }
func (p *bpfPlane) SetSlotBuckets(h wire.KeyHash, b []uint8) error { return p.d.SetSlotBuckets(h, b) }
func (p *bpfPlane) SetNodeStats(n wire.NodeID, s directory.NodeStats) error {
	return p.d.SetNodeStats(n, s)
}
func (p *bpfPlane) Lookup(h wire.KeyHash) (directory.Slot, bool, error) { return p.d.Lookup(h) }
func (p *bpfPlane) Node(n wire.NodeID) (directory.NodeStats, error)     { return p.d.Node(n) }
func (p *bpfPlane) Counters() (directory.Counters, error)               { return p.d.Counters() }
func (p *bpfPlane) SketchEstimate(h wire.KeyHash) (uint32, error)       { return p.d.SketchEstimate(h) }
func (p *bpfPlane) ResetSketch() error                                  { return p.d.ResetSketch() }

// toTC reports whether the host shape sends pkt through TC egress: requests
// leave the client host, everything else arrives at it.
func toTC(pkt []byte) bool {
	if len(pkt) < wire.HeaderLen {
		return false
	}
	switch wire.Frame(pkt).Op() {
	case wire.OpGet, wire.OpPut, wire.OpDel:
		return true
	}
	return false
}

func (p *bpfPlane) Process(pkt []byte, port uint32, now uint64) (directory.Verdict, []byte, error) {
	if err := p.d.SetClock(now); err != nil {
		return directory.Verdict{}, nil, err
	}
	in := frame(portSource(port), service, pkt)
	before, err := p.d.Stats()
	if err != nil {
		return directory.Verdict{}, nil, err
	}
	tc := !p.router && toTC(pkt)
	prog := p.d.XDP()
	if tc {
		prog = p.d.TC()
	}
	ret, out, err := run(prog, in)
	if err != nil {
		return directory.Verdict{}, nil, err
	}
	after, err := p.d.Stats()
	if err != nil {
		return directory.Verdict{}, nil, err
	}
	act, reason, err := counterDelta(before, after)
	if err != nil {
		return directory.Verdict{}, nil, fmt.Errorf("plane: %w (return code %d)", err, ret)
	}
	want := map[directory.Action]uint32{
		directory.Drop: xdpDrop, directory.Forward: xdpTx, directory.ToClient: xdpPass,
		directory.Multicast: xdpPass, directory.Pass: xdpPass,
	}
	if tc {
		want = map[directory.Action]uint32{directory.Drop: tcShot, directory.Forward: tcOK}
	}
	if w, ok := want[act]; !ok || w != ret {
		return directory.Verdict{}, nil, fmt.Errorf("plane: %s by the counters, but return code %d", act, ret)
	}
	switch act {
	case directory.Drop:
		return directory.Verdict{Action: directory.Drop, Reason: reason}, nil, nil
	case directory.Forward:
		f, err := parseFrame(out)
		if err != nil {
			return directory.Verdict{}, nil, fmt.Errorf("plane: forwarded frame: %w", err)
		}
		if len(f.payload) < wire.HeaderLen {
			return directory.Verdict{}, nil, fmt.Errorf("plane: forwarded a %d-byte payload", len(f.payload))
		}
		var h wire.Header
		if err := h.DecodeHeader(f.payload); err != nil {
			return directory.Verdict{}, nil, fmt.Errorf("plane: forwarded header: %w", err)
		}
		na := testNodeAddr(h.Node)
		dst, _ := netip.AddrFromSlice(f.ip.DstIP)
		if dst != na.Addr.Addr() || uint16(f.udp.DstPort) != na.Addr.Port() || !bytes.Equal(f.eth.DstMAC, na.MAC) {
			return directory.Verdict{}, nil, fmt.Errorf("plane: node %d's packet went to %s:%d (%s), want %s (%s)",
				h.Node, dst, f.udp.DstPort, f.eth.DstMAC, na.Addr, na.MAC)
		}
		src, _ := netip.AddrFromSlice(f.ip.SrcIP)
		if src != portSource(port).Addr() || uint16(f.udp.SrcPort) != portSource(port).Port() {
			return directory.Verdict{}, nil, fmt.Errorf("plane: the source changed to %s:%d", src, f.udp.SrcPort)
		}
		if !tc && !bytes.Equal(f.eth.SrcMAC, agentMAC) {
			return directory.Verdict{}, nil, fmt.Errorf("plane: XDP_TX frame from %s, want the interface's %s", f.eth.SrcMAC, agentMAC)
		}
		return directory.Verdict{Action: directory.Forward, Node: h.Node}, f.payload, nil
	default:
		if !bytes.Equal(out, in) {
			return directory.Verdict{}, nil, fmt.Errorf("plane: %s changed the frame", act)
		}
		return directory.Verdict{Action: act}, pkt, nil
	}
}
