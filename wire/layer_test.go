package wire

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// frame serialises Ethernet/IPv4/UDP to dstPort carrying p.
func frame(t *testing.T, p Packet, dstPort layers.UDPPort) []byte {
	t.Helper()
	eth := &layers.Ethernet{
		SrcMAC:       net.HardwareAddr{0x02, 0, 0, 0, 0, 1},
		DstMAC:       net.HardwareAddr{0x02, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4,
	}
	ip := &layers.IPv4{
		Version:  4,
		TTL:      64,
		Protocol: layers.IPProtocolUDP,
		SrcIP:    net.IPv4(10, 0, 0, 1),
		DstIP:    net.IPv4(10, 0, 0, 2),
	}
	udp := &layers.UDP{SrcPort: 40000, DstPort: dstPort}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, &Layer{Packet: p}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func netdirLayer(t *testing.T, data []byte) *Layer {
	t.Helper()
	pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatalf("decode error: %v", el.Error())
	}
	l, ok := pkt.Layer(LayerTypeNetdir).(*Layer)
	if !ok {
		t.Fatalf("no Netdir layer in %v", pkt)
	}
	if pkt.ApplicationLayer() != l {
		t.Error("the Netdir layer is not the application layer")
	}
	return l
}

func TestGopacketLayer(t *testing.T) {
	want := full()
	data := frame(t, want, ServicePort)

	l := netdirLayer(t, data)
	if !equalPackets(&l.Packet, &want) {
		t.Fatalf("decoded %+v, want %+v", l.Packet, want)
	}
	if got := string(l.Payload()); got != "applered" {
		t.Errorf("Payload = %q, want key then value", got)
	}
	if len(l.LayerContents()) != want.Len() {
		t.Errorf("LayerContents has %d bytes, want %d", len(l.LayerContents()), want.Len())
	}

	// Through a pcap file and back.
	var file bytes.Buffer
	w := pcapgo.NewWriter(&file)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, 0), CaptureLength: len(data), Length: len(data)}
	if err := w.WritePacket(ci, data); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(&file)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("link type %v", r.LinkType())
	}
	back, rci, err := r.ReadPacketData()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) || rci.Length != len(data) {
		t.Fatalf("pcap round trip changed the frame")
	}
	if l := netdirLayer(t, back); !equalPackets(&l.Packet, &want) {
		t.Fatalf("after pcap: %+v", l.Packet)
	}
}

// The zero-allocation path data planes in Go use: a DecodingLayerParser.
func TestDecodingLayerParser(t *testing.T) {
	want := full()
	data := frame(t, want, ServicePort)
	var (
		eth layers.Ethernet
		ip  layers.IPv4
		udp layers.UDP
		nd  Layer
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip, &udp, &nd)
	var decoded []gopacket.LayerType
	if err := parser.DecodeLayers(data, &decoded); err != nil {
		t.Fatal(err)
	}
	if len(decoded) != 4 || decoded[3] != LayerTypeNetdir {
		t.Fatalf("decoded layers %v", decoded)
	}
	if !equalPackets(&nd.Packet, &want) {
		t.Fatalf("decoded %+v", nd.Packet)
	}
}

func TestGopacketOtherPortNotNetdir(t *testing.T) {
	data := frame(t, full(), ServicePort+1)
	pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
	if pkt.Layer(LayerTypeNetdir) != nil {
		t.Fatal("UDP to another port decoded as Netdir")
	}
	if pkt.Layer(layers.LayerTypeUDP) == nil {
		t.Fatal("no UDP layer")
	}
}

func TestGopacketMalformedPayload(t *testing.T) {
	data := frame(t, full(), ServicePort)
	data = data[:len(data)-1] // cut the value short; IPv4/UDP lengths now lie
	pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
	if pkt.Layer(LayerTypeNetdir) != nil {
		t.Fatal("a truncated netdir payload decoded as a Netdir layer")
	}
	if pkt.ErrorLayer() == nil {
		t.Fatal("no error layer for a truncated netdir payload")
	}
}
