package client

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// fake is a scripted node or data plane: it records every request and
// answers with script(i, request), or not at all when script returns nil.
type fake struct {
	conn *net.UDPConn
	mu   sync.Mutex
	reqs []wire.Packet
}

func newFake(t *testing.T, script func(i int, p *wire.Packet) *wire.Packet) *fake {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{conn: c}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 70000)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			var p wire.Packet
			if p.Decode(append([]byte(nil), buf[:n]...)) != nil {
				continue
			}
			f.mu.Lock()
			i := len(f.reqs)
			f.reqs = append(f.reqs, p)
			f.mu.Unlock()
			if r := script(i, &p); r != nil {
				b, _ := r.AppendEncode(nil)
				c.WriteToUDPAddrPort(b, from)
			}
		}
	}()
	return f
}

func (f *fake) addr() netip.AddrPort { return f.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (f *fake) requests() []wire.Packet {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.Packet(nil), f.reqs...)
}

func reply(p *wire.Packet, op wire.Op, code wire.Code, ver uint64, val string) *wire.Packet {
	return &wire.Packet{Header: wire.Header{Op: op, Code: code, ReqID: p.ReqID, KeyHash: p.KeyHash, Stamp: ver, Node: 1}, Value: []byte(val)}
}

func opts(service netip.AddrPort, m *layout.Map) Options {
	o := Options{Layout: m, Timeout: 10 * time.Millisecond, MaxTimeout: 20 * time.Millisecond, Backoff: time.Millisecond}
	if service.IsValid() {
		o.Service = service.String()
	}
	return o
}

func oneNode(t *testing.T, a netip.AddrPort) *layout.Map {
	m, err := layout.New(layout.Config{Replicas: 1, Nodes: []layout.Node{{ID: 1, Addr: a.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWriteRetryIDs(t *testing.T) {
	// Request 0 is lost, 1 answered stale-version, 2 queue-full, 3 OK.
	f := newFake(t, func(i int, p *wire.Packet) *wire.Packet {
		switch i {
		case 0:
			return nil
		case 1:
			return reply(p, wire.OpErr, wire.CodeStaleVersion, 0, "")
		case 2:
			return reply(p, wire.OpErr, wire.CodeQueueFull, 0, "")
		}
		return reply(p, wire.OpPutReply, wire.CodeOK, 7, "")
	})
	c, err := New(opts(netip.AddrPort{}, oneNode(t, f.addr())))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ver, err := c.Put(context.Background(), []byte("k"), []byte("v"))
	if err != nil || ver != 7 {
		t.Fatalf("put: v%d %v", ver, err)
	}
	r := f.requests()
	if len(r) != 4 {
		t.Fatalf("%d requests", len(r))
	}
	// Timeout retry keeps the id; after stale-version a new one; queue-full keeps it.
	if r[0].ReqID != r[1].ReqID || r[2].ReqID == r[1].ReqID || r[3].ReqID != r[2].ReqID {
		t.Fatalf("ids %x %x %x %x", r[0].ReqID, r[1].ReqID, r[2].ReqID, r[3].ReqID)
	}
	if r[0].Epoch != 0 || string(r[0].Key) != "k" || r[0].KeyHash != wire.HashKey([]byte("k")) {
		t.Fatalf("request: %+v", r[0].Header)
	}
}

func TestGetFreshIDs(t *testing.T) {
	f := newFake(t, func(i int, p *wire.Packet) *wire.Packet {
		if i < 2 {
			return nil
		}
		return reply(p, wire.OpGetReply, wire.CodeOK, 3, "val")
	})
	c, _ := New(opts(netip.AddrPort{}, oneNode(t, f.addr())))
	defer c.Close()
	v, ver, err := c.Get(context.Background(), []byte("k"))
	if err != nil || string(v) != "val" || ver != 3 {
		t.Fatalf("get: %q v%d %v", v, ver, err)
	}
	r := f.requests()
	if len(r) != 3 || r[0].ReqID == r[1].ReqID || r[1].ReqID == r[2].ReqID {
		t.Fatalf("GET retries must draw fresh ids: %d requests", len(r))
	}
}

func TestWrongNodeGoesHome(t *testing.T) {
	// The data plane answers wrong-node; the client retries at the chain
	// head directly.
	head := newFake(t, func(i int, p *wire.Packet) *wire.Packet {
		return reply(p, wire.OpPutReply, wire.CodeOK, 2, "")
	})
	dp := newFake(t, func(i int, p *wire.Packet) *wire.Packet {
		return reply(p, wire.OpErr, wire.CodeWrongNode, 0, "")
	})
	c, _ := New(opts(dp.addr(), oneNode(t, head.addr())))
	defer c.Close()
	if ver, err := c.Put(context.Background(), []byte("k"), []byte("v")); err != nil || ver != 2 {
		t.Fatalf("put: v%d %v", ver, err)
	}
	if len(dp.requests()) != 1 || len(head.requests()) != 1 || dp.requests()[0].ReqID != head.requests()[0].ReqID {
		t.Fatal("wrong-node retry did not go to the head with the same id")
	}
}

func TestRetryGoesThroughDataPlane(t *testing.T) {
	// An unstamped write to a promoted key (ERR retry) is retried through
	// the data plane with a new id.
	head := newFake(t, func(i int, p *wire.Packet) *wire.Packet {
		return reply(p, wire.OpErr, wire.CodeRetry, 0, "")
	})
	dp := newFake(t, func(i int, p *wire.Packet) *wire.Packet {
		if i == 0 {
			return reply(p, wire.OpErr, wire.CodeWrongNode, 0, "")
		}
		return reply(p, wire.OpDelReply, wire.CodeOK, 5, "")
	})
	c, _ := New(opts(dp.addr(), oneNode(t, head.addr())))
	defer c.Close()
	if ver, err := c.Delete(context.Background(), []byte("k")); err != nil || ver != 5 {
		t.Fatalf("delete: v%d %v", ver, err)
	}
	d, h := dp.requests(), head.requests()
	if len(d) != 2 || len(h) != 1 || d[1].ReqID == h[0].ReqID {
		t.Fatalf("dp %d head %d requests", len(d), len(h))
	}
}

func TestPermanentAndContext(t *testing.T) {
	f := newFake(t, func(i int, p *wire.Packet) *wire.Packet {
		if p.Op == wire.OpGet {
			return reply(p, wire.OpErr, wire.CodeHashMismatch, 0, "")
		}
		return nil
	})
	c, _ := New(opts(netip.AddrPort{}, oneNode(t, f.addr())))
	defer c.Close()
	if _, _, err := c.Get(context.Background(), []byte("k")); !errors.Is(err, wire.CodeHashMismatch) {
		t.Fatalf("get: %v", err)
	}
	if _, err := c.Put(context.Background(), make([]byte, wire.MaxKey+1), nil); !errors.Is(err, wire.CodeKeyTooLarge) {
		t.Fatalf("big key: %v", err)
	}
	if _, err := c.Put(context.Background(), []byte("k"), make([]byte, wire.MaxValue+1)); !errors.Is(err, wire.CodeValTooLarge) {
		t.Fatalf("big value: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Put(ctx, []byte("k"), []byte("v")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered put: %v", err)
	}
	if _, err := New(Options{}); err == nil {
		t.Fatal("client with neither service nor layout")
	}
}

// TestTenants: requests carry Options.Tenant, and keys under a subvolume
// root its tenant, the longest root winning.
func TestTenants(t *testing.T) {
	f := newFake(t, func(_ int, p *wire.Packet) *wire.Packet { return reply(p, wire.OpGetReply, wire.CodeOK, 1, "v") })
	o := opts(netip.AddrPort{}, oneNode(t, f.addr()))
	o.Tenant = 5
	o.Subvolumes = map[string]uint16{"/volumes/g/": 7, "/volumes/g/a/": 8}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := map[string]uint16{"plain": 5, "/volumes/g/b/x": 7, "/volumes/g/a/x": 8, "/volumes/h/x": 5, "/volumes/g": 5}
	for k := range keys {
		if _, _, err := c.Get(context.Background(), []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range f.requests() {
		if want := keys[string(r.Key)]; r.Tenant != want {
			t.Errorf("key %q: tenant %d, want %d", r.Key, r.Tenant, want)
		}
	}
}

// TestNoAnswerNamesTheAddress: with nothing listening, a read's error names
// the address, the tries and the time, and still wraps the context's.
func TestNoAnswerNamesTheAddress(t *testing.T) {
	lis, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.LocalAddr().String()
	lis.Close() // nothing answers there now
	c, err := New(Options{Service: addr, Timeout: 50 * time.Millisecond, MaxTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, _, err = c.Get(ctx, []byte("k"))
	var na *NoAnswerError
	if !errors.As(err, &na) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v: want a NoAnswerError wrapping the deadline", err)
	}
	if want := "netdir get: no answer from " + addr + " after "; !strings.HasPrefix(err.Error(), want) || na.Tries < 2 {
		t.Fatalf("error %q (%d tries), want it to start %q", err, na.Tries, want)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err = c.Put(ctx, []byte("k"), []byte("v"))
	if !errors.As(err, &na) || !strings.Contains(err.Error(), "outcome unknown: no answer from "+addr) {
		t.Fatalf("put: error %v", err)
	}
}
