// Package wireshark holds netdir.lua, the Wireshark dissector, and its test:
// tshark decodes a capture of every packet of the vector suite, and of node
// ops and malformed packets, as the Go decoder (wire) does.
package wireshark

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/directory/vectors"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/wire"
)

// recorder is the Go core as a vector plane that keeps every packet it was
// given and every packet it sent on.
type recorder struct {
	vectors.Core
	packets [][]byte
}

func (r *recorder) Process(pkt []byte, port uint32, now uint64) (directory.Verdict, []byte, error) {
	r.packets = append(r.packets, bytes.Clone(pkt))
	v, out, err := r.Core.Process(pkt, port, now)
	if out != nil {
		r.packets = append(r.packets, bytes.Clone(out))
	}
	return v, out, err
}

// fields are the dissector fields the test compares, in tshark's -e order.
var fields = []string{
	"netdir.op", "netdir.flags", "netdir.code", "netdir.tenant", "netdir.reqid", "netdir.keyhash",
	"netdir.stamp", "netdir.stamp.incarnation", "netdir.stamp.version", "netdir.node", "netdir.load",
	"netdir.epoch", "netdir.timestamp", "netdir.delta", "netdir.rho", "netdir.keylen", "netdir.vallen",
	"netdir.key", "netdir.value", "netdir.extra", "netdir.ext.op", "netdir.ext.addr", "netdir.ext.absorbed", "netdir.auth.key_id",
	"netdir.auth.counter", "netdir.auth.mac", "netdir.malformed",
}

// goFields is what the Go decoder makes of pkt, as the dissector's fields.
// Numbers are decimal and bytes are hex, as normalize prints tshark's.
func goFields(pkt []byte) map[string]string {
	m := map[string]string{}
	if n := trailer(pkt); n > 0 {
		tr := pkt[len(pkt)-n:]
		m["netdir.auth.key_id"] = strconv.FormatUint(uint64(binary.BigEndian.Uint32(tr)), 10)
		m["netdir.auth.counter"] = strconv.FormatUint(binary.BigEndian.Uint64(tr[4:]), 10)
		m["netdir.auth.mac"] = hex.EncodeToString(tr[12:])
		pkt = pkt[:len(pkt)-n]
	}
	var h wire.Header
	if err := h.DecodeHeader(pkt); err != nil {
		m["netdir.malformed"] = "yes"
		return m
	}
	u := func(name string, v uint64) { m[name] = strconv.FormatUint(v, 10) }
	u("netdir.op", uint64(h.Op))
	u("netdir.flags", uint64(h.Flags))
	u("netdir.code", uint64(h.Code))
	u("netdir.tenant", uint64(h.Tenant))
	u("netdir.reqid", h.ReqID)
	m["netdir.keyhash"] = hex.EncodeToString(h.KeyHash[:])
	u("netdir.stamp", h.Stamp)
	u("netdir.stamp.incarnation", uint64(wire.StampIncarnation(h.Stamp)))
	u("netdir.stamp.version", wire.StampVersion(h.Stamp))
	u("netdir.node", uint64(h.Node))
	u("netdir.load", uint64(h.Load))
	u("netdir.epoch", uint64(h.Epoch))
	u("netdir.timestamp", h.Timestamp)
	u("netdir.delta", uint64(h.Delta))
	u("netdir.rho", uint64(h.Rho))
	if len(pkt) < wire.PrefixLen {
		m["netdir.malformed"] = "yes"
		return m
	}
	// The lengths as the packet states them, even when they exceed it.
	u("netdir.keylen", uint64(binary.BigEndian.Uint16(pkt[wire.HeaderLen:])))
	u("netdir.vallen", uint64(binary.BigEndian.Uint16(pkt[wire.HeaderLen+2:])))
	var np wire.NodePacket
	err := np.Decode(pkt)
	if len(np.Key) > 0 {
		m["netdir.key"] = hex.EncodeToString(np.Key)
	}
	if len(np.Value) > 0 {
		m["netdir.value"] = hex.EncodeToString(np.Value)
	}
	switch {
	case err != nil:
	case !h.Op.IsNodeOp():
		var p wire.Packet
		err = p.Decode(pkt)
	case h.Op == wire.OpPromote:
		var ids []wire.NodeID
		ids, err = wire.ParseNodeIDs(np.Value)
		m["netdir.extra"] = joinIDs(ids)
	case h.Op == wire.OpChainWrite:
		var ext wire.ChainExt
		err = ext.Decode(np.Ext)
		if err == nil {
			u("netdir.ext.op", uint64(ext.Op))
			if ext.Addr.IsValid() {
				m["netdir.ext.addr"] = ext.Addr.String()
			}
			m["netdir.extra"] = joinIDs(ext.Extras)
			ids := make([]string, len(ext.Absorbed))
			for i, w := range ext.Absorbed {
				ids[i] = strconv.FormatUint(w.ReqID, 10)
			}
			m["netdir.ext.absorbed"] = strings.Join(ids, ",")
		}
	}
	if err != nil {
		m["netdir.malformed"] = "yes"
		// What follows a malformed part is not compared.
		delete(m, "netdir.extra")
		delete(m, "netdir.ext.absorbed")
	}
	for _, list := range []string{"netdir.extra", "netdir.ext.absorbed"} {
		if m[list] == "" {
			delete(m, list)
		}
	}
	return m
}

func joinIDs(ids []wire.NodeID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// normalize prints a tshark field value as goFields does: numbers in
// decimal (tshark prints base.HEX fields as 0x..), bytes in plain hex.
func normalize(name, v string) string {
	switch name {
	case "netdir.malformed":
		return "yes"
	case "netdir.keyhash", "netdir.key", "netdir.value", "netdir.auth.mac":
		return strings.ReplaceAll(v, ":", "")
	case "netdir.ext.addr", "netdir.extra", "netdir.ext.absorbed":
		return v
	}
	if n, err := strconv.ParseUint(v, 0, 64); err == nil {
		return strconv.FormatUint(n, 10)
	}
	return v
}

// extraPackets are node ops with their extensions, and malformed packets
// of each kind the decoders refuse, beyond those of the vector suite.
func extraPackets(t *testing.T) [][]byte {
	key := []byte("user42")
	h := wire.Header{Op: wire.OpChainWrite, KeyHash: wire.HashKey(key), ReqID: 0x1234, Stamp: 7, Node: 2, Epoch: 3, Tenant: 1}
	ext := (&wire.ChainExt{Op: wire.OpPut, Promoted: true, Addr: netip.MustParseAddrPort("127.0.0.1:40001"), Extras: []wire.NodeID{4, 5}}).Append(nil)
	ext6 := (&wire.ChainExt{Op: wire.OpDel, Reservation: true, Addr: netip.MustParseAddrPort("[::1]:9")}).Append(nil)
	var pkts [][]byte
	pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, []byte("v1"), ext))
	pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, nil, ext6))
	pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, []byte("v1"), nil))                   // no extension
	pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, []byte("v1"), []byte{0x02, 0, 0, 3})) // extras missing
	// A write group's version: the writes it absorbed; then a count of 0,
	// an absorbed op that is no write, and an address with no IP.
	grouped := (&wire.ChainExt{Op: wire.OpPut, Addr: netip.MustParseAddrPort("127.0.0.1:40003"), Extras: []wire.NodeID{7},
		Absorbed: []wire.AbsorbedWrite{{ReqID: 0x51, Op: wire.OpPut}, {ReqID: 1 << 60, Op: wire.OpDel}}}).Append(nil)
	pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, []byte("v2"), grouped))
	pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, []byte("v2"), []byte{0x02, 0, 0, 0, 0}))
	badOp := bytes.Clone(grouped)
	badOp[len(badOp)-1] = byte(wire.OpGet)
	pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, []byte("v2"), badOp))
	pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, []byte("v2"), []byte{0x02, 0, 2, 0x1f, 0x90, 0}))
	promote := wire.NewPromote(key, []wire.NodeID{3, 9, 12}, true)
	promote.ReqID, promote.Stamp = 99, wire.MakeStamp(5, 0)
	b, err := promote.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	pkts = append(pkts, b)
	h.Op = wire.OpPromote
	pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, []byte{0, 1, 2}, nil)) // odd id list
	for _, op := range []wire.Op{wire.OpChainAck, wire.OpVerQuery, wire.OpVerAnswer, wire.OpCopy, wire.OpCopyAck,
		wire.OpDemote, wire.OpSync, wire.OpSyncData, wire.OpStats} {
		h.Op = op
		pkts = append(pkts, wire.AppendNodeOp(nil, &h, key, []byte("x"), []byte{1, 2}))
	}
	pkts = append(pkts, sealedPackets(t, key)...)
	get := wire.Packet{Header: wire.Header{Op: wire.OpGet, KeyHash: wire.HashKey(key), ReqID: 1}, Key: key}
	good, err := get.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	pkts = append(pkts,
		good[:10],                       // short header
		good[:wire.HeaderLen+2],         // short prefix
		append(bytes.Clone(good), 0xaa), // trailing byte on a client op
		good[:len(good)-1],              // lengths exceed the packet
	)
	bad := bytes.Clone(good)
	wire.Frame(bad).SetMagic(0xbeef)
	pkts = append(pkts, bad)
	bad = bytes.Clone(good)
	wire.Frame(bad).SetVersion(1)
	pkts = append(pkts, bad)
	bad = bytes.Clone(good)
	wire.Frame(bad).SetOp(0x77) // unknown op: decoded, with a warning
	pkts = append(pkts, bad)
	return pkts
}

// trailer is the length of pkt's MAC trailer as the dissector (with its
// default, a keyed cluster) reads it: a node op with room for one after its
// value has one, unless it is a chain-write whose extension is well formed
// only with the trailer's bytes counted in.
func trailer(pkt []byte) int {
	var np wire.NodePacket
	if np.Decode(pkt) != nil || !np.Op.IsNodeOp() || len(np.Ext) < nodeauth.TrailerLen {
		return 0
	}
	valid := func(b []byte) bool { var c wire.ChainExt; return c.Decode(b) == nil }
	if np.Op == wire.OpChainWrite && !valid(np.Ext[:len(np.Ext)-nodeauth.TrailerLen]) && valid(np.Ext) {
		return 0
	}
	return nodeauth.TrailerLen
}

// sealedPackets are node ops as a cluster with a key sends them: a
// chain-write with its extension, one with an extension only as long as
// the trailer, a ver-query with none, and a sync-data whose records are
// longer than the trailer.
func sealedPackets(t *testing.T, key []byte) [][]byte {
	k, err := nodeauth.NewKey(bytes.Repeat([]byte{7}, nodeauth.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	s := nodeauth.New(nodeauth.Keys{Seal: k}, nil).NewSealer()
	h := wire.Header{Op: wire.OpChainWrite, KeyHash: wire.HashKey(key), ReqID: 0x99, Stamp: 8, Node: 3, Epoch: 4}
	ext := (&wire.ChainExt{Op: wire.OpPut, Addr: netip.MustParseAddrPort("127.0.0.1:40002"), Extras: []wire.NodeID{6}}).Append(nil)
	long := (&wire.ChainExt{Op: wire.OpPut, Extras: make([]wire.NodeID, 12)}).Append(nil)
	bodies := [][]byte{
		wire.AppendNodeOp(nil, &h, key, []byte("v2"), ext),
		wire.AppendNodeOp(nil, &h, key, []byte("v2"), long),
	}
	h.Op = wire.OpVerQuery
	bodies = append(bodies, wire.AppendNodeOp(nil, &h, key, nil, nil))
	h.Op = wire.OpSyncData
	bodies = append(bodies, wire.AppendNodeOp(nil, &h, nil, nil, bytes.Repeat([]byte{0xab}, 40)))
	var pkts [][]byte
	for _, b := range bodies {
		pkts = append(pkts, s.Seal(b))
	}
	return pkts
}

// writePcap writes each payload as a UDP datagram on loopback to the
// service port.
func writePcap(t *testing.T, path string, payloads [][]byte) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_700_000_000, 0)
	for i, p := range payloads {
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(127, 0, 0, 1), DstIP: net.IPv4(127, 0, 0, 1)}
		udp := &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(wire.ServicePort)}
		udp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			eth, ip, udp, gopacket.Payload(p)); err != nil {
			t.Fatal(err)
		}
		ci := gopacket.CaptureInfo{Timestamp: start.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(buf.Bytes()), Length: len(buf.Bytes())}
		if err := w.WritePacket(ci, buf.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
}

func tshark(t *testing.T, args ...string) string {
	script, err := filepath.Abs("netdir.lua")
	if err != nil {
		t.Fatal(err)
	}
	// Read it here so that go test's cache keys on the script tshark runs.
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"-n", "-o", "gui.max_tree_depth:40", "-X", "lua_script:" + script}, args...)
	cmd := exec.Command("tshark", args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no user profile
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if s := stderr.String(); strings.Contains(s, "Lua") || strings.Contains(s, "lua") {
		t.Fatalf("tshark reported a Lua problem:\n%s", s)
	}
	return string(out)
}

// TestDissectorMatchesDecoder decodes a capture of every packet of the
// vector suite (in and out), of node ops and of malformed packets with
// tshark and netdir.lua, and compares each field with the Go decoder's.
func TestDissectorMatchesDecoder(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark is not installed (Debian: apt-get install tshark)")
	}
	rec := &recorder{}
	t.Run("vectors", func(t *testing.T) { vectors.Run(t, rec) })
	if len(rec.packets) < 100 {
		t.Fatalf("the vector suite gave %d packets; want at least 100", len(rec.packets))
	}
	var pkts [][]byte
	for _, p := range append(rec.packets, extraPackets(t)...) {
		// An empty datagram carries no netdir packet: Wireshark calls no
		// dissector for it.
		if len(p) > 0 {
			pkts = append(pkts, p)
		}
	}
	pcap := filepath.Join(t.TempDir(), "vectors.pcap")
	writePcap(t, pcap, pkts)

	args := []string{"-r", pcap, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,", "-e", "frame.number"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	lines := strings.Split(strings.TrimRight(tshark(t, args...), "\n"), "\n")
	if len(lines) != len(pkts) {
		t.Fatalf("tshark printed %d lines for %d packets", len(lines), len(pkts))
	}
	malformed, sealed := 0, 0
	for i, line := range lines {
		cols := strings.Split(line, "\t")
		if len(cols) != len(fields)+1 {
			t.Fatalf("frame %d: %d columns, want %d: %q", i+1, len(cols), len(fields)+1, line)
		}
		want := goFields(pkts[i])
		if want["netdir.malformed"] != "" {
			malformed++
		}
		if want["netdir.auth.mac"] != "" {
			sealed++
		}
		for j, name := range fields {
			got := cols[j+1]
			if got != "" {
				got = normalize(name, got)
			}
			if got != want[name] {
				t.Errorf("frame %d (%x...): %s = %q, the Go decoder says %q", i+1, pkts[i][:min(len(pkts[i]), 8)], name, got, want[name])
			}
		}
	}
	if malformed < 8 {
		t.Errorf("only %d malformed packets in the capture; the test means to cover each kind", malformed)
	}
	if sealed < 4 {
		t.Errorf("only %d node ops with a MAC trailer in the capture; want at least sealedPackets' 4", sealed)
	}
	t.Logf("%d packets (%d from the vector suite, %d malformed, %d sealed) decoded as the Go decoder does", len(pkts), len(rec.packets), malformed, sealed)

	// A malformed packet is an expert item of the malformed group, and
	// nothing fails in the dissector (tshark prints Lua errors into the tree).
	verbose := tshark(t, "-r", pcap, "-V")
	if strings.Contains(verbose, "Lua Error") {
		i := strings.Index(verbose, "Lua Error")
		t.Fatalf("the dissector failed: %s", verbose[max(0, i-200):min(len(verbose), i+300)])
	}
	experts := tshark(t, "-r", pcap, "-T", "fields", "-e", "_ws.expert.group", "-Y", "netdir.malformed")
	if n := strings.Count(experts, fmt.Sprint(0x07000000)); n < malformed {
		t.Errorf("%d malformed-group expert items for %d malformed packets:\n%s", n, malformed, experts)
	}
}
