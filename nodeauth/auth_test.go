package nodeauth

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netdir/netdir/wire"
)

// fakeClock is a settable clock shared by senders and receivers.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration)  { c.ns.Add(int64(d)) }
func newClock(start time.Time) *fakeClock { c := &fakeClock{}; c.ns.Store(start.UnixNano()); return c }
func mustKey(t testing.TB, b byte) Key {
	t.Helper()
	s := make([]byte, MinKeyLen)
	for i := range s {
		s[i] = b
	}
	k, err := NewKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var from = netip.MustParseAddrPort("127.0.0.1:7501")

func chainAck(node wire.NodeID) []byte {
	h := wire.Header{Op: wire.OpChainAck, KeyHash: wire.HashKey([]byte("k")), Stamp: 9, Node: node, Epoch: 3}
	return wire.AppendNodeOp(nil, &h, []byte("k"), nil, nil)
}

func TestSealOpen(t *testing.T) {
	clk := newClock(time.Unix(1000, 0))
	recv := New(Keys{Seal: mustKey(t, 1)}, clk.now)
	clk.add(time.Millisecond)
	send := New(Keys{Seal: mustKey(t, 1)}, clk.now)
	op := chainAck(2)
	sealed := send.Seal(append([]byte(nil), op...))
	if len(sealed) != len(op)+TrailerLen {
		t.Fatalf("sealed %d bytes, want %d", len(sealed), len(op)+TrailerLen)
	}
	body, v := recv.Open(sealed, 2, from)
	if v != OK || string(body) != string(op) {
		t.Fatalf("open: %v, body %x, want ok and %x", v, body, op)
	}
	if _, v := recv.Open(sealed, 2, from); v != Replay {
		t.Fatalf("the same packet again: %v, want replay", v)
	}
	for i := range len(sealed) {
		forged := append([]byte(nil), sealed...)
		forged[i] ^= 0x40
		if _, v := recv.Open(forged, 2, from); v == OK {
			t.Fatalf("byte %d flipped: accepted", i)
		}
	}
	if _, v := recv.Open(op, 2, from); v != BadMAC {
		t.Fatalf("unsealed: %v, want bad-mac", v)
	}
	other := New(Keys{Seal: mustKey(t, 9)}, clk.now)
	if _, v := recv.Open(other.Seal(chainAck(2)), 2, from); v != BadMAC {
		t.Fatalf("another cluster's key: %v, want bad-mac", v)
	}
	// The MAC covers every byte, the key id and the counter too.
	if d := recv.Drops(); d.Replay != 1 || d.BadMAC != uint64(len(sealed))+2 {
		t.Fatalf("drops %+v, want 1 replay and %d bad MACs", d, len(sealed)+2)
	}
}

func TestReplayWindow(t *testing.T) {
	clk := newClock(time.Unix(1000, 0))
	recv := New(Keys{Seal: mustKey(t, 1)}, clk.now)
	clk.add(time.Millisecond)
	send := New(Keys{Seal: mustKey(t, 1)}, clk.now)
	// Reordered within the window: all accepted once.
	var pkts [][]byte
	for range 3 * Window {
		pkts = append(pkts, send.Seal(chainAck(2))) // the fake clock stands still: counters still rise
	}
	for i := 0; i+1 < len(pkts); i += 2 {
		pkts[i], pkts[i+1] = pkts[i+1], pkts[i]
	}
	for i, p := range pkts {
		if _, v := recv.Open(p, 2, from); v != OK {
			t.Fatalf("packet %d: %v", i, v)
		}
	}
	for i, p := range pkts {
		if _, v := recv.Open(p, 2, from); v != Replay {
			t.Fatalf("packet %d replayed: %v", i, v)
		}
	}
	// A sealed op from before the receiver started is refused.
	early := newClock(time.Unix(999, 0))
	if _, v := recv.Open(New(Keys{Seal: mustKey(t, 1)}, early.now).Seal(chainAck(3)), 3, from); v != Replay {
		t.Fatalf("sealed before the receiver started: %v, want replay", v)
	}
}

// A restarted sender (a new Auth, its clock later) is not locked out, and a
// restarted receiver refuses what was sealed before it started.
func TestRestart(t *testing.T) {
	clk := newClock(time.Unix(1000, 0))
	recv := New(Keys{Seal: mustKey(t, 1)}, clk.now)
	clk.add(time.Second)
	send := New(Keys{Seal: mustKey(t, 1)}, clk.now)
	var last []byte
	for range 10 {
		last = send.Seal(chainAck(2))
		if _, v := recv.Open(last, 2, from); v != OK {
			t.Fatal(v)
		}
	}
	clk.add(time.Millisecond)
	send = New(Keys{Seal: mustKey(t, 1)}, clk.now)
	if _, v := recv.Open(send.Seal(chainAck(2)), 2, from); v != OK {
		t.Fatalf("restarted sender: %v", v)
	}
	clk.add(time.Millisecond)
	recv = New(Keys{Seal: mustKey(t, 1)}, clk.now)
	if _, v := recv.Open(last, 2, from); v != Replay {
		t.Fatalf("replayed to a restarted receiver: %v, want replay", v)
	}
}

// Controllers all send as node 0, each with its own clock: their counters
// are kept apart by source address.
func TestControllersApart(t *testing.T) {
	clk := newClock(time.Unix(1000, 0))
	recv := New(Keys{Seal: mustKey(t, 1)}, clk.now)
	ahead, behind := newClock(time.Unix(1010, 0)), newClock(time.Unix(1001, 0))
	a, b := New(Keys{Seal: mustKey(t, 1)}, ahead.now), New(Keys{Seal: mustKey(t, 1)}, behind.now)
	other := netip.MustParseAddrPort("127.0.0.1:9999")
	for i := range 2 * Window {
		if _, v := recv.Open(a.Seal(chainAck(0)), 0, from); v != OK {
			t.Fatalf("controller a, op %d: %v", i, v)
		}
		if _, v := recv.Open(b.Seal(chainAck(0)), 0, other); v != OK {
			t.Fatalf("controller b, op %d: %v", i, v)
		}
	}
}

// Rotation: add next everywhere, seal with it, drop the old key. Every
// step's senders are accepted by every step's receivers that overlap it,
// and after the last step the old key is refused as old-key.
func TestRotation(t *testing.T) {
	clk := newClock(time.Unix(1000, 0))
	k1, k2 := mustKey(t, 1), mustKey(t, 2)
	steps := []Keys{
		{Seal: k1},
		{Seal: k1, Next: &k2},
		{Seal: k2, Next: &k1},
		{Seal: k2},
	}
	for i := 0; i+1 < len(steps); i++ {
		for _, pair := range [][2]int{{i, i + 1}, {i + 1, i}} {
			recv := New(steps[pair[0]], clk.now)
			clk.add(time.Millisecond)
			send := New(steps[pair[1]], clk.now)
			if _, v := recv.Open(send.Seal(chainAck(2)), 2, from); v != OK {
				t.Errorf("step %d receiving from step %d: %v", pair[0], pair[1], v)
			}
		}
	}
	recv := New(steps[0], clk.now)
	for _, ks := range steps[1:] {
		recv.SetKeys(ks)
	}
	clk.add(time.Millisecond)
	old := New(steps[0], clk.now)
	if _, v := recv.Open(old.Seal(chainAck(2)), 2, from); v != OldKey {
		t.Fatalf("a retired key: %v, want old-key", v)
	}
	if d := recv.Drops(); d.OldKey != 1 {
		t.Fatalf("drops %+v, want one old-key", d)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	s1, s2 := GenerateSecret(), GenerateSecret()
	p := filepath.Join(dir, "key")
	if err := os.WriteFile(p, FormatKeys(s1, s2), 0o600); err != nil {
		t.Fatal(err)
	}
	ks, err := LoadKeys(p)
	if err != nil {
		t.Fatal(err)
	}
	if ks.Seal.ID != KeyID(s1) || ks.Next == nil || ks.Next.ID != KeyID(s2) {
		t.Fatalf("keys %v %v", ks.Seal.ID, ks.Next)
	}
	for _, bad := range []string{"", "key: 00", "key: zz", "kye: " + fmt.Sprintf("%x", s1), "key: " + fmt.Sprintf("%x", s1) + "\nnext: 12"} {
		if _, err := ParseKeys([]byte(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func BenchmarkSeal(b *testing.B) {
	for _, n := range []int{0, 100, 1024} {
		b.Run(fmt.Sprintf("value=%d", n), func(b *testing.B) {
			a := New(Keys{Seal: mustKey(b, 1)}, nil)
			s := a.NewSealer()
			h := wire.Header{Op: wire.OpChainWrite, Node: 2}
			op := wire.AppendNodeOp(nil, &h, []byte("key-000001"), make([]byte, n), nil)
			buf := make([]byte, 0, len(op)+TrailerLen)
			b.SetBytes(int64(len(op)))
			b.ReportAllocs()
			for b.Loop() {
				buf = s.Seal(append(buf[:0], op...))
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	a := New(Keys{Seal: mustKey(b, 1)}, nil)
	h := wire.Header{Op: wire.OpChainAck, Node: 2}
	op := wire.AppendNodeOp(nil, &h, []byte("key-000001"), nil, nil)
	pkts := make([][]byte, 4096)
	for i := range pkts {
		pkts[i] = a.Seal(append([]byte(nil), op...))
	}
	recv := New(Keys{Seal: mustKey(b, 1)}, func() time.Time { return time.Unix(0, 0) })
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		recv.Open(pkts[i%len(pkts)], 2, from) // past the first round: replays, refused after the MAC
		i++
	}
}

// FuzzOpen: any datagram is refused or opened without a panic, and only a
// sealed one opens.
func FuzzOpen(f *testing.F) {
	clk := newClock(time.Unix(1000, 0))
	k := mustKey(f, 1)
	sealed := New(Keys{Seal: k}, func() time.Time { return time.Unix(1001, 0) }).Seal(chainAck(2))
	f.Add(sealed)
	f.Add(chainAck(2))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		recv := New(Keys{Seal: k}, clk.now)
		body, v := recv.Open(b, 2, from)
		if v == OK && (string(b) != string(sealed) || len(body) != len(b)-TrailerLen) {
			t.Fatalf("opened a datagram that was not sealed: %x", b)
		}
	})
}

// TestWatchReloads: a changed key file is taken within a poll; one that
// does not parse leaves the keys in force.
func TestWatchReloads(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	s1, s2 := GenerateSecret(), GenerateSecret()
	if err := os.WriteFile(p, FormatKeys(s1, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloaded := make(chan struct{}, 4)
	a.OnSetKeys(func() { reloaded <- struct{}{} })
	go Watch(ctx, p, a, slog.New(slog.DiscardHandler))
	time.Sleep(50 * time.Millisecond) // Watch has read the file as it stands
	if err := os.WriteFile(p, FormatKeys(s2, s1), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reloaded:
	case <-time.After(5 * PollEvery):
		t.Fatal("the changed key file was not reloaded")
	}
	if a.SealID() != KeyID(s2) {
		t.Fatalf("sealing with %x, want the new key %x", a.SealID(), KeyID(s2))
	}
	if err := os.WriteFile(p, []byte("key: not hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * PollEvery)
	if a.SealID() != KeyID(s2) {
		t.Fatalf("a broken key file replaced the keys: sealing with %x", a.SealID())
	}
}
