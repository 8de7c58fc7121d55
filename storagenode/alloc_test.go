package storagenode_test

import (
	"context"
	"net"
	"testing"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/storagenode"
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
	if n := getAllocs(t, c); n != 0 {
		t.Errorf("%v allocations per GET, want 0", n)
	}
}

// TestNoAllocsPooledGet: a GET that waits in admission (here because MaxOps
// admits requests through its token bucket) and is served by the read pool
// allocates nothing either: its buffer comes from a pool, the admission
// goroutine hands it to a reader, which reads the record in place and
// sends the reply from its own buffer (udpbatch) without an address or
// message allocated.
func TestNoAllocsPooledGet(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c, err := cluster.Start(cluster.Options{N: 2, R: 2, Dir: t.TempDir(), Node: func(o *storagenode.Options) { o.MaxOps = 1 << 30 }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := getAllocs(t, c); n != 0 {
		t.Errorf("%v allocations per GET through the read pool, want 0", n)
	}
}

// getAllocs stores a key in c and returns the most allocations per GET of
// it that c's nodes made, at each member of its chain.
func getAllocs(t *testing.T, c *cluster.Cluster) float64 {
	t.Helper()
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
	worst := 0.0
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
		worst = max(worst, testing.AllocsPerRun(1000, get))
	}
	return worst
}
