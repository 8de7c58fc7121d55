package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/netdir/netdir/wire"
)

func listen(t *testing.T) *Conn {
	t.Helper()
	c, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCallResendsSameID: Call resends the same request until its reply
// comes, ignoring replies of another op, and gives up after Tries.
func TestCallResendsSameID(t *testing.T) {
	f := newFake(t, func(i int, p *wire.Packet) *wire.Packet {
		switch i {
		case 0:
			return nil // lost
		case 1:
			return reply(p, wire.OpDemote, wire.CodeOK, 0, "") // not a promote's reply
		}
		return reply(p, wire.OpPromote, wire.CodeOK, 7, "")
	})
	c := listen(t)
	req := wire.NewPromote([]byte("k"), []wire.NodeID{2}, false)
	req.ReqID = 42
	r, err := c.Call(context.Background(), f.addr(), &req, Retry{Timeout: 20 * time.Millisecond, Tries: 5})
	if err != nil || r.Op != wire.OpPromote || r.Stamp != 7 {
		t.Fatalf("Call = %+v, %v", r, err)
	}
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d tries, want 3", len(reqs))
	}
	for _, q := range reqs {
		if q.ReqID != 42 || q.Op != wire.OpPromote || string(q.Key) != "k" {
			t.Errorf("resent %+v", q.Header)
		}
	}
	silent := newFake(t, func(int, *wire.Packet) *wire.Packet { return nil })
	t0 := time.Now()
	if _, err := c.Call(context.Background(), silent.addr(), &req, Retry{Timeout: 5 * time.Millisecond, MaxTimeout: 20 * time.Millisecond, Tries: 4}); err != ErrTimeout {
		t.Fatalf("no reply: %v, want ErrTimeout", err)
	}
	// 5 + 10 + 20 + 20 ms: the timeout doubles up to MaxTimeout.
	if n := len(silent.requests()); n != 4 || time.Since(t0) < 55*time.Millisecond {
		t.Errorf("%d tries in %v, want 4 in at least 55ms", n, time.Since(t0))
	}
}

// TestCallErrAndContext: an ERR with the request's id is the reply; a
// context's end stops the retries.
func TestCallErrAndContext(t *testing.T) {
	f := newFake(t, func(_ int, p *wire.Packet) *wire.Packet { return reply(p, wire.OpErr, wire.CodeQueueFull, 0, "") })
	c := listen(t)
	req := wire.Packet{Header: wire.Header{Op: wire.OpGet, ReqID: 9}, Key: []byte("k")}
	if r, err := c.Call(context.Background(), f.addr(), &req, Retry{Timeout: time.Second, Tries: 1}); err != nil || r.Op != wire.OpErr || r.Code != wire.CodeQueueFull {
		t.Fatalf("Call = %+v, %v", r, err)
	}
	silent := newFake(t, func(int, *wire.Packet) *wire.Packet { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := c.Call(ctx, silent.addr(), &req, Retry{Timeout: 5 * time.Millisecond}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call past the deadline = %v", err)
	}
	c.Close()
	if _, err := c.Call(context.Background(), silent.addr(), &req, Retry{Timeout: time.Second}); err == nil {
		t.Fatal("Call on a closed Conn succeeded")
	}
}
