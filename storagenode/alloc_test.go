package storagenode_test

import (
	"context"
	"net"
	"testing"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/wire"
)

// TestNoAllocsPerGet: a node answers a GET of a clean key, at a chain's head
// and at its tail, without allocating: the read, the reply and its send.
func TestNoAllocsPerGet(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c, err := cluster.Start(cluster.Options{N: 2, R: 2, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := c.Client(client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	key, val := []byte("k"), make([]byte, 100)
	if _, err := cl.Put(context.Background(), key, val); err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, _ := (&wire.Packet{Header: wire.Header{Op: wire.OpGet, KeyHash: wire.HashKey(key)}, Key: key}).AppendEncode(nil)
	reply := make([]byte, 2048)
	for _, id := range c.Layout.ChainOf(wire.HashKey(key)) {
		to := addrOf(c, id)
		var reqid uint64
		get := func() {
			reqid++
			wire.Frame(req).SetReqID(reqid)
			if _, err := conn.WriteToUDPAddrPort(req, to); err != nil {
				t.Fatal(err)
			}
			for {
				n, _, err := conn.ReadFromUDPAddrPort(reply)
				if err != nil {
					t.Fatal(err)
				}
				f := wire.Frame(reply[:n])
				if f.ReqID() != reqid {
					continue
				}
				if f.Op() != wire.OpGetReply || f.Code() != wire.CodeOK {
					t.Fatalf("node %d: reply op %v code %v", id, f.Op(), f.Code())
				}
				return
			}
		}
		get() // the node's buffers and counters are warm after the first
		if n := testing.AllocsPerRun(1000, get); n != 0 {
			t.Errorf("node %d: %v allocations per GET, want 0", id, n)
		}
	}
}
