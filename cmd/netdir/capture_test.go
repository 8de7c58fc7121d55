package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/netnsrun"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/wire"
)

// getPacket is a GET for key with request id id.
func getPacket(t *testing.T, key string, id uint64) []byte {
	p := wire.Packet{Header: wire.Header{Op: wire.OpGet, KeyHash: wire.HashKey([]byte(key)), ReqID: id}, Key: []byte(key)}
	b, err := p.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// netdirReqIDs decodes the capture's frames and returns the request ids of
// its netdir packets, and how many frames were something else.
func netdirReqIDs(t *testing.T, src gopacket.PacketDataSource) (ids []uint64, other int) {
	for {
		data, _, err := src.ReadPacketData()
		if err == io.EOF {
			return ids, other
		}
		if err != nil {
			t.Fatal(err)
		}
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		// The UDP payload, whatever the port (a software switch's port may
		// not be the service port that gopacket's layer is registered on).
		var np wire.Packet
		if u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && np.Decode(u.Payload) == nil {
			ids = append(ids, np.ReqID)
		} else {
			other++
		}
	}
}

// TestCaptureMirror runs a software switch with a mirror port and captures
// it: every datagram the switch receives is in the pcapng, as a netdir
// packet from its sender to the switch; with a filter, only those that
// match.
func TestCaptureMirror(t *testing.T) {
	mirrorConn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mirrorAddr := mirrorConn.LocalAddr().String()
	mirrorConn.Close() // captureMirror binds it again; a race here only fails the test

	sw, err := model.New(model.Config{Listen: "127.0.0.1:0", Directory: directory.Config{PartitionBits: 1, Slots: 16},
		Mirror: mustAddrPort(t, mirrorAddr)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go sw.Run(ctx)
	defer sw.Close()

	client, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(sw.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	other, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(sw.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	for _, tc := range []struct {
		name, filter string
		want         int // packets of client in the capture
	}{
		{"all", "", 4},
		{"filtered", fmt.Sprintf("udp src port %d", client.LocalAddr().(*net.UDPAddr).Port), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prog, err := compileFilter(tc.filter)
			if err != nil {
				t.Skip(err) // names tcpdump
			}
			count := 8 // client's and other's
			if tc.filter != "" {
				count = tc.want
			}
			var out bytes.Buffer
			done := make(chan error, 1)
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			go func() {
				n, err := captureMirror(cctx, mirrorAddr, prog, &out, count)
				if err == nil && n != count {
					err = fmt.Errorf("captured %d packets, want %d", n, count)
				}
				done <- err
			}()
			time.Sleep(100 * time.Millisecond) // the collector binds
			for i := range uint64(4) {
				client.Write(getPacket(t, "k", 100+i))
				other.Write(getPacket(t, "k", 200+i))
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			raw := bytes.Clone(out.Bytes())
			r, err := pcapgo.NewNgReader(&out, pcapgo.DefaultNgReaderOptions)
			if err != nil {
				t.Fatal(err)
			}
			ids, nonNetdir := netdirReqIDs(t, r)
			if nonNetdir != 0 || len(ids) != count {
				t.Fatalf("capture: %d netdir packets %v and %d others; want %d netdir", len(ids), ids, nonNetdir, count)
			}
			for _, id := range ids {
				if tc.filter != "" && (id < 100 || id >= 104) {
					t.Errorf("the filter passed request %d, which the other client sent", id)
				}
			}
			tsharkDecodes(t, raw, sw.Addr().Port(), count)
		})
	}
}

// tsharkDecodes checks that tshark, with the dissector and the switch's
// port decoded as netdir, finds want netdir packets in the pcapng.
func tsharkDecodes(t *testing.T, pcapng []byte, port uint16, want int) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Log("tshark is not installed: the capture is not checked with the dissector")
		return
	}
	file := filepath.Join(t.TempDir(), "mirror.pcapng")
	if err := os.WriteFile(file, pcapng, 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../../tools/wireshark/netdir.lua")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("tshark", "-n", "-X", "lua_script:"+script, "-d", fmt.Sprintf("udp.port==%d,netdir", port),
		"-r", file, "-Y", "netdir.op == 0x01 && !netdir.malformed", "-T", "fields", "-e", "netdir.reqid")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if n := len(strings.Fields(string(out))); n != want {
		t.Errorf("tshark decoded %d netdir GETs in the capture, want %d:\n%s", n, want, out)
	}
}

// TestCaptureInterfaceNetns captures the loopback interface of a network
// namespace it creates, with the filter "udp port 7420": the netdir packets
// sent there are in the pcap, and the datagrams to another port are not.
func TestCaptureInterfaceNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("capturing on an interface in a network namespace needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's `ip` on PATH")
	}
	prog, err := compileFilter(fmt.Sprintf("udp port %d", wire.ServicePort))
	if err != nil {
		t.Skip(err) // names tcpdump
	}
	ns := fmt.Sprintf("ndcap%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, out)
	}

	// Sockets and the capture handle made on a thread in the namespace
	// stay there.
	var (
		h         *packetSocket
		srv, sink net.PacketConn
		snd       *net.UDPConn
	)
	err = netnsrun.In(ns, func() (err error) {
		if h, err = openPacketSocket("lo", prog); err != nil {
			return err
		}
		if srv, err = net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", wire.ServicePort)); err != nil {
			return err
		}
		if sink, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return err
		}
		snd, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer sink.Close()
	defer snd.Close()
	defer h.Close()
	// Loopback frames are seen twice by a packet socket: leaving and
	// arriving.
	const sent = 3
	var out bytes.Buffer
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		_, err := writeFrames(ctx, h, &out, 2*sent)
		done <- err
	}()
	for i := range uint64(sent) {
		snd.WriteTo(getPacket(t, "k", 300+i), srv.LocalAddr())
		snd.WriteTo([]byte("not netdir"), sink.LocalAddr())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(&out)
	if err != nil {
		t.Fatal(err)
	}
	ids, other := netdirReqIDs(t, r)
	if other != 0 || len(ids) != 2*sent {
		t.Fatalf("capture: netdir request ids %v and %d other frames; want %d netdir frames", ids, other, 2*sent)
	}
	// With no traffic, the capture ends when its context does.
	start := time.Now()
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if n, err := writeFrames(short, h, io.Discard, 0); err != nil || n != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("an idle capture: %d frames, %v, after %v; want 0, nil, at its 200 ms deadline", n, err, time.Since(start))
	}
	t.Logf("captured %d netdir frames on lo in %s", len(ids), ns)
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
