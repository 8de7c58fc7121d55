package client

import (
	"context"
	"net"
	"testing"

	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/wire"
)

// echoNode answers every GET and PUT in place, as its reply op at version 7,
// with the same batched, allocation-free socket code the client uses, so
// that allocation counts measure the client.
func echoNode(t *testing.T) *net.UDPConn {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	rx, err := udpbatch.NewReader(c, udpbatch.Buffers(16, wire.MaxPacket+1))
	if err != nil {
		t.Fatal(err)
	}
	tx := udpbatch.NewWriter(c, true, 16)
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		for {
			n, err := rx.Read()
			if err != nil {
				return
			}
			for i := range n {
				b, from := rx.Msg(i)
				f := wire.Frame(b)
				if f.Check() != nil {
					continue
				}
				f.SetOp(f.Op().Reply())
				f.SetStamp(7)
				tx.AddPeer(b, from)
			}
			tx.Flush()
		}
	}()
	return c
}

// TestNoAllocsPerOp: a GET (AppendGet into a buffer with room) and a PUT
// through the service address allocate nothing in steady state: no
// channel, timer, packet or reply buffer per operation.
func TestNoAllocsPerOp(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	node := echoNode(t)
	cl, err := New(Options{Service: node.LocalAddr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	key, val := []byte("user00000042"), make([]byte, 100)
	dst := make([]byte, 0, 256)
	get := func() {
		if _, ver, err := cl.AppendGet(ctx, dst[:0], key); err != nil || ver != 7 {
			t.Fatalf("AppendGet = %d, %v", ver, err)
		}
	}
	put := func() {
		if ver, err := cl.Put(ctx, key, val); err != nil || ver != 7 {
			t.Fatalf("Put = %d, %v", ver, err)
		}
	}
	for _, op := range []struct {
		name string
		f    func()
	}{{"get", get}, {"put", put}} {
		op.f() // warm the waiter, buffers and maps
		if n := testing.AllocsPerRun(1000, op.f); n != 0 {
			t.Errorf("%s: %v allocations per operation, want 0", op.name, n)
		}
	}
}
