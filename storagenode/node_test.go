package storagenode_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// raw encodes a packet without the client-side limits.
func raw(h wire.Header, key, val []byte) []byte { return wire.AppendNodeOp(nil, &h, key, val, nil) }

// peer is a raw UDP endpoint for talking to nodes.
type peer struct {
	t    *testing.T
	conn *net.UDPConn
	auth *nodeauth.Auth // seals the node ops sent and opens those received (sealing)
}

// sealing makes p hold the cluster's key, as a controller or a node does.
func (p *peer) sealing(c *cluster.Cluster) *peer {
	p.auth = c.NewAuth()
	return p
}

func newPeer(t *testing.T) *peer {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &peer{t: t, conn: c}
}

func (p *peer) addr() netip.AddrPort { return p.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (p *peer) send(to netip.AddrPort, b []byte) {
	if p.auth != nil && len(b) >= wire.HeaderLen && wire.Frame(b).Op().IsNodeOp() {
		b = p.auth.Seal(slices.Clip(b))
	}
	if _, err := p.conn.WriteToUDPAddrPort(b, to); err != nil {
		p.t.Fatal(err)
	}
}

// recv waits for a packet whose request id is reqid (any, if 0).
func (p *peer) recv(reqid uint64) (wire.Packet, bool) {
	return p.recvWithin(reqid, 5*time.Second)
}

// recvWithin is recv waiting at most d.
func (p *peer) recvWithin(reqid uint64, d time.Duration) (wire.Packet, bool) {
	buf := make([]byte, 70000)
	deadline := time.Now().Add(d)
	for {
		p.conn.SetReadDeadline(deadline)
		n, _, err := p.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return wire.Packet{}, false
		}
		var pk wire.Packet
		if pk.DecodeHeader(buf[:n]) != nil {
			continue
		}
		if reqid != 0 && pk.ReqID != reqid {
			continue
		}
		b := append([]byte(nil), buf[:n]...)
		if p.auth != nil && pk.Op.IsNodeOp() {
			var v nodeauth.Verdict
			if b, v = p.auth.Open(b, pk.Node, netip.AddrPort{}); v != nodeauth.OK {
				continue
			}
		}
		_ = pk.Decode(b)
		return pk, true
	}
}

func (p *peer) call(to netip.AddrPort, b []byte) wire.Packet {
	var h wire.Header
	h.DecodeHeader(b)
	p.send(to, b)
	r, ok := p.recv(h.ReqID)
	if !ok {
		p.t.Fatalf("no reply to %s reqid %d", h.Op, h.ReqID)
	}
	return r
}

func startCluster(t *testing.T, o cluster.Options) *cluster.Cluster {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	c, err := cluster.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func addrOf(c *cluster.Cluster, id wire.NodeID) netip.AddrPort {
	a, _ := c.Layout.Addr(id)
	return a
}

// keyNotOn finds a key whose chain leaves out node id (N > R).
func keyNotOn(c *cluster.Cluster, id wire.NodeID) []byte {
	for i := 0; ; i++ {
		k := []byte(fmt.Sprintf("key-%d", i))
		if !slices.Contains(c.Layout.ChainOf(wire.HashKey(k)), id) {
			return k
		}
	}
}

func TestErrCodes(t *testing.T) {
	c := startCluster(t, cluster.Options{N: 4, R: 3, Epoch: 1})
	p := newPeer(t).sealing(c)
	key := []byte("some-key")
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	head, mid := addrOf(c, ch[0]), addrOf(c, ch[1])
	var outsider wire.NodeID
	for _, id := range c.Layout.Nodes() {
		if !slices.Contains(ch, id) {
			outsider = id
		}
	}
	big := make([]byte, wire.MaxKey+1)
	cases := []struct {
		name string
		to   netip.AddrPort
		pkt  []byte
		want wire.Code
	}{
		{"key over 1 KiB", head, raw(wire.Header{Op: wire.OpPut, ReqID: 1, KeyHash: wire.HashKey(big)}, big, nil), wire.CodeKeyTooLarge},
		{"value over MaxValue", head, raw(wire.Header{Op: wire.OpPut, ReqID: 2, KeyHash: h}, key, make([]byte, wire.MaxValue+1)), wire.CodeValTooLarge},
		{"unknown op", head, raw(wire.Header{Op: 0x55, ReqID: 3, KeyHash: h}, key, nil), wire.CodeUnknownOp},
		{"write at a non-head", mid, raw(wire.Header{Op: wire.OpPut, ReqID: 4, KeyHash: h}, key, []byte("v")), wire.CodeWrongNode},
		{"read at a non-member", addrOf(c, outsider), raw(wire.Header{Op: wire.OpGet, ReqID: 5, KeyHash: h}, key, nil), wire.CodeWrongNode},
		{"hash mismatch", head, raw(wire.Header{Op: wire.OpGet, ReqID: 6, KeyHash: wire.HashKey([]byte("other"))}, key, nil), wire.CodeHashMismatch},
		{"stale epoch", head, raw(wire.Header{Op: wire.OpGet, ReqID: 7, KeyHash: h, Epoch: 9}, key, nil), wire.CodeStaleEpoch},
		{"lengths past the packet", head, raw(wire.Header{Op: wire.OpGet, ReqID: 8, KeyHash: h}, key, nil)[:wire.PrefixLen+2], wire.CodeMalformed},
		{"trailing bytes", head, append(raw(wire.Header{Op: wire.OpGet, ReqID: 9, KeyHash: h}, key, nil), 0), wire.CodeMalformed},
	}
	for _, tc := range cases {
		r := p.call(tc.to, tc.pkt)
		if r.Op != wire.OpErr || r.Code != tc.want {
			t.Errorf("%s: got %s code %s, want err %s", tc.name, r.Op, r.Code, tc.want)
		}
	}
	// Garbage never crashes a node and gets no answer.
	for _, junk := range [][]byte{nil, {1, 2, 3}, make([]byte, 100), raw(wire.Header{Op: wire.OpChainWrite, KeyHash: h}, key, nil)} {
		p.send(head, junk)
	}
	// Epoch 0 is accepted, and the node still serves.
	r := p.call(head, raw(wire.Header{Op: wire.OpGet, ReqID: 10, KeyHash: h}, key, nil))
	if r.Op != wire.OpGetReply || r.Code != wire.CodeNotFound || r.Node != ch[0] {
		t.Fatalf("get: %s %s node %d", r.Op, r.Code, r.Node)
	}
}

func TestQueueFull(t *testing.T) {
	c := startCluster(t, cluster.Options{N: 1, R: 1, Node: func(o *storagenode.Options) {
		o.Workers, o.QueueLen, o.MaxOps = 1, 2, 20
	}})
	p := newPeer(t).sealing(c)
	key := []byte("k")
	to := addrOf(c, 1)
	for i := range 40 {
		p.send(to, raw(wire.Header{Op: wire.OpGet, ReqID: uint64(100 + i), KeyHash: wire.HashKey(key)}, key, nil))
	}
	full, maxLoad := 0, uint16(0)
	for range 40 {
		r, ok := p.recv(0)
		if !ok {
			break
		}
		if r.Op == wire.OpErr && r.Code == wire.CodeQueueFull {
			full++
		}
		maxLoad = max(maxLoad, r.Load)
	}
	if full == 0 {
		t.Fatal("no ERR queue-full from a node with a queue of 2 and 20 ops/s")
	}
	if maxLoad == 0 {
		t.Fatal("replies never carried a non-zero load")
	}
}

// TestAdmissionLimitsClientsOnly: with an emulated capacity (MaxOps), client
// requests wait for tokens in front of the shards, writes before reads, and
// node ops (here a controller's promote) are handled at once, not behind
// the queued reads on the same shard worker.
func TestAdmissionLimitsClientsOnly(t *testing.T) {
	c := startCluster(t, cluster.Options{N: 1, R: 1, Node: func(o *storagenode.Options) {
		o.Workers, o.MaxOps = 1, 2
	}})
	p := newPeer(t).sealing(c)
	key := []byte("k")
	h := wire.HashKey(key)
	to := addrOf(c, 1)
	const gets = 5
	for i := range gets {
		p.send(to, raw(wire.Header{Op: wire.OpGet, ReqID: uint64(100 + i), KeyHash: h}, key, nil))
	}
	p.send(to, raw(wire.Header{Op: wire.OpPut, ReqID: 200, KeyHash: h}, key, []byte("v")))
	p.send(to, raw(wire.Header{Op: wire.OpPromote, ReqID: 300, KeyHash: h}, key, nil))
	var order []uint64
	for range gets + 2 {
		r, ok := p.recv(0)
		if !ok {
			t.Fatalf("replies so far %v, then none", order)
		}
		order = append(order, r.ReqID)
	}
	at := func(id uint64) int { return slices.Index(order, id) }
	if at(300) < 0 || at(300) > 2 {
		t.Errorf("reply order %v: the promote's answer waited behind rate-limited reads", order)
	}
	if at(200) < 0 || at(200) > at(100+gets-1) {
		t.Errorf("reply order %v: the write was admitted after later reads", order)
	}
}

func TestStampsAndDedup(t *testing.T) {
	dir := t.TempDir()
	c := startCluster(t, cluster.Options{N: 3, Dir: dir})
	p := newPeer(t).sealing(c)
	key := []byte("stamped")
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	head := addrOf(c, ch[0])
	put := func(id uint64, flags uint8, stamp uint64, val string) wire.Packet {
		return p.call(head, raw(wire.Header{Op: wire.OpPut, Flags: flags, ReqID: id, KeyHash: h, Stamp: stamp, Timestamp: 12345}, key, []byte(val)))
	}
	if r := put(1, 0, 0, "a"); r.Op != wire.OpPutReply || r.Stamp != 1 || r.Node != ch[2] || r.Timestamp != 12345 {
		t.Fatalf("unstamped put: %s v%d node %d ts %d", r.Op, r.Stamp, r.Node, r.Timestamp)
	}
	if r := put(2, wire.FlagStamped, 10, "b"); r.Op != wire.OpPutReply || r.Stamp != 10 {
		t.Fatalf("stamped put: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	if r := put(3, wire.FlagStamped, 10, "c"); r.Op != wire.OpErr || r.Code != wire.CodeStaleVersion || r.Stamp != 10 {
		t.Fatalf("stale stamp: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	// The refusal is remembered under its id. Its resend's stamp 11 is
	// above the latest version: it becomes a no-op version (the latest
	// value, "b", again), so the data plane's ver_next is not left behind.
	if r := put(3, wire.FlagStamped, 11, "c"); r.Op != wire.OpErr || r.Code != wire.CodeStaleVersion {
		t.Fatalf("refused id retried: %s %s", r.Op, r.Code)
	}
	if r := put(4, 0, 0, "d"); r.Stamp != 12 {
		t.Fatalf("next unstamped: v%d", r.Stamp)
	}
	// A duplicate is answered with the original outcome, not applied again;
	// its stamp 20 is made a no-op version of "d".
	if r := put(2, wire.FlagStamped, 20, "zzz"); r.Op != wire.OpPutReply || r.Stamp != 10 {
		t.Fatalf("duplicate: %s v%d", r.Op, r.Stamp)
	}
	cl, _ := c.Client(client.Options{})
	defer cl.Close()
	ctx := context.Background()
	waitGet := func(what, val string, ver uint64) { // val "": not found
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, got, err := cl.Get(ctx, key)
			if got == ver && (err == nil && string(v) == val || val == "" && errors.Is(err, client.ErrNotFound)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q v%d %v, want %q v%d", what, v, got, err, val, ver)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitGet("get", "d", 20)
	if n := c.Node(int(ch[0]) - 1).Stats().Noops; n != 2 {
		t.Fatalf("%d no-op versions, want 2", n)
	}
	// The dedup table survives a restart of the head.
	hi := int(ch[0]) - 1
	if err := c.Crash(hi); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(hi); err != nil {
		t.Fatal(err)
	}
	if r := put(4, 0, 0, "again"); r.Op != wire.OpPutReply || r.Stamp != 12 {
		t.Fatalf("duplicate after restart: %s v%d", r.Op, r.Stamp)
	}
	waitGet("get after restart", "d", 20)
	// Delete, then get not-found with the delete's version.
	if r := p.call(head, raw(wire.Header{Op: wire.OpDel, ReqID: 5, KeyHash: h}, key, nil)); r.Op != wire.OpDelReply || r.Stamp != 21 {
		t.Fatalf("del: %s v%d", r.Op, r.Stamp)
	}
	if _, ver, err := cl.Get(ctx, key); !errors.Is(err, client.ErrNotFound) || ver != 21 {
		t.Fatalf("get deleted: v%d %v", ver, err)
	}
	// A stamped duplicate of the delete: its no-op version is a tombstone.
	if r := p.call(head, raw(wire.Header{Op: wire.OpDel, Flags: wire.FlagStamped, Stamp: 22, ReqID: 5, KeyHash: h}, key, nil)); r.Op != wire.OpDelReply || r.Stamp != 21 {
		t.Fatalf("duplicate del: %s v%d", r.Op, r.Stamp)
	}
	waitGet("get after a duplicate del", "", 22)
}

// promotedKey is hotKeyCluster's key, written ("v1", v1) and promoted to
// the extra, with a peer to drive its head and a wait for its VSBs at the
// data plane.
type promotedKey struct {
	c       *cluster.Cluster
	extra   wire.NodeID
	key     []byte
	h       wire.KeyHash
	ch      []wire.NodeID
	head    netip.AddrPort
	p       *peer
	waitVSB func(node wire.NodeID, ver uint64)
}

func promotedHotKey(t *testing.T) promotedKey {
	c, dp, extra, key := hotKeyCluster(t)
	cl, _ := c.Client(client.Options{})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, key, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Promote(ctx, key, []wire.NodeID{extra}); err != nil {
		t.Fatal(err)
	}
	h := wire.HashKey(key)
	waitVSB := vsbWatcher(t, dp, h)
	waitVSB(extra, 1)
	ch := c.Layout.ChainOf(h)
	return promotedKey{c: c, extra: extra, key: key, h: h, ch: ch, head: addrOf(c, ch[0]), p: newPeer(t).sealing(c), waitVSB: waitVSB}
}

// TestStampedDuplicateNoop: a client's write that timed out is resent with
// the same request id; the data plane stamps the resend again. The head
// answers it from its dedup table with the write's first version and makes
// the second stamp a no-op version: the latest value under that stamp,
// committed down the chain with no client reply and announced by the tail's
// VSB, which completes the stamp at the data plane (spec/README.md, flaw F).
func TestStampedDuplicateNoop(t *testing.T) {
	k := promotedHotKey(t)
	c, extra, key, h, ch, head, p, waitVSB := k.c, k.extra, k.key, k.h, k.ch, k.head, k.p, k.waitVSB
	put := func(reqid, stamp uint64, val string) wire.Packet {
		return p.call(head, raw(wire.Header{Op: wire.OpPut, Flags: wire.FlagStamped, Stamp: stamp, ReqID: reqid, KeyHash: h, Timestamp: 777}, key, []byte(val)))
	}
	get := func(id wire.NodeID, reqid uint64) wire.Packet {
		return p.call(addrOf(c, id), raw(wire.Header{Op: wire.OpGet, ReqID: reqid, KeyHash: h}, key, nil))
	}
	if r := put(10, 2, "v2"); r.Op != wire.OpPutReply || r.Code != wire.CodeOK || r.Stamp != 2 {
		t.Fatalf("stamped write: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	waitVSB(ch[2], 2)
	// The resend, stamped 3: answered with the first version, not applied.
	if r := put(10, 3, "resent"); r.Op != wire.OpPutReply || r.Code != wire.CodeOK || r.Stamp != 2 {
		t.Fatalf("stamped duplicate: %s %s v%d, want the first version 2", r.Op, r.Code, r.Stamp)
	}
	// Version 3 commits with the latest value, the tail announces it, and
	// the extra gets it.
	waitVSB(ch[2], 3)
	waitVSB(extra, 3)
	for i, id := range []wire.NodeID{ch[2], ch[1], ch[0], extra} {
		if r := get(id, uint64(100+i)); r.Op != wire.OpGetReply || string(r.Value) != "v2" || r.Stamp != 3 {
			t.Fatalf("read at node %d: %s %s %q v%d, want \"v2\" v3", id, r.Op, r.Code, r.Value, r.Stamp)
		}
	}
	// Nothing answers a client for version 3 (a repeat of v2's reply may
	// come, from a retransmission of v2 that the resend caught in flight).
	for {
		r, ok := p.recvWithin(10, 300*time.Millisecond)
		if !ok {
			break
		}
		if r.Stamp != 2 {
			t.Fatalf("a reply for the no-op version: %s %s v%d", r.Op, r.Code, r.Stamp)
		}
	}
	// A resend stamped at or below the latest version makes nothing.
	if r := put(10, 3, "again"); r.Op != wire.OpPutReply || r.Stamp != 2 {
		t.Fatalf("duplicate at the latest stamp: %s v%d", r.Op, r.Stamp)
	}
	// A refused write's resend with a higher stamp: the refusal again, and
	// a no-op version of the stamp.
	if r := put(11, 3, "x"); r.Op != wire.OpErr || r.Code != wire.CodeStaleVersion || r.Stamp != 3 {
		t.Fatalf("stale stamp: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	if r := put(11, 4, "x"); r.Op != wire.OpErr || r.Code != wire.CodeStaleVersion {
		t.Fatalf("refused write resent: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	waitVSB(ch[2], 4)
	waitVSB(extra, 4)
	if r := get(extra, 200); string(r.Value) != "v2" || r.Stamp != 4 {
		t.Fatalf("extra after the second no-op: %s %q v%d", r.Op, r.Value, r.Stamp)
	}
	if n := c.Node(int(ch[0]) - 1).Stats().Noops; n != 2 {
		t.Fatalf("%d no-op versions, want 2", n)
	}
	// The next write follows the no-op versions.
	if r := put(12, 5, "v5"); r.Op != wire.OpPutReply || r.Stamp != 5 {
		t.Fatalf("write after no-ops: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
}

// TestStampedDuplicateStorm: while a key's no-op version is in flight (its
// chain's middle is down, so nothing acks it), a storm of stamped resends
// makes no further no-op version: each owes its stamp, and once the no-op
// in flight is acked one no-op at the highest stamp covers them all. Before,
// each resend made a synced no-op version of its own, all held dirty in the
// record each of them rewrote: at N=16 that kept a hot key's head in a
// Pebble write stall for minutes after the clients stopped.
func TestStampedDuplicateStorm(t *testing.T) {
	k := promotedHotKey(t)
	c, key, h, ch, head, p, waitVSB := k.c, k.key, k.h, k.ch, k.head, k.p, k.waitVSB
	put := func(stamp uint64, val string) wire.Packet {
		return p.call(head, raw(wire.Header{Op: wire.OpPut, Flags: wire.FlagStamped, Stamp: stamp, ReqID: 10, KeyHash: h}, key, []byte(val)))
	}
	if r := put(2, "v2"); r.Op != wire.OpPutReply || r.Stamp != 2 {
		t.Fatalf("stamped write: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	waitVSB(ch[2], 2)
	// v2's ack reaches the head through the middle: the middle goes down
	// once it has, else the resends would repeat v2 itself, uncommitted.
	for deadline := time.Now().Add(5 * time.Second); c.Node(int(ch[0])-1).Stats().Pending != 0; {
		if time.Now().After(deadline) {
			t.Fatal("v2 not acked at the head")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mid := int(ch[1]) - 1
	if err := c.Crash(mid); err != nil {
		t.Fatal(err)
	}
	const resends = 20
	for stamp := uint64(3); stamp < 3+resends; stamp++ {
		if r := put(stamp, "resent"); r.Op != wire.OpPutReply || r.Stamp != 2 {
			t.Fatalf("resend stamped %d: %s %s v%d, want the first version 2", stamp, r.Op, r.Code, r.Stamp)
		}
	}
	hs := c.Node(int(ch[0]) - 1).Stats()
	if hs.Noops != 1 || hs.NoopsOwed != resends-1 {
		t.Fatalf("%d no-op versions and %d owed stamps after %d resends, want 1 and %d", hs.Noops, hs.NoopsOwed, resends, resends-1)
	}
	if err := c.Restart(mid); err != nil {
		t.Fatal(err)
	}
	// The first no-op (v3) is acked, then the one owed at the highest stamp
	// commits: the tail announces it and every member reads it.
	last := uint64(2 + resends)
	waitVSB(ch[2], last)
	for i, id := range []wire.NodeID{ch[2], ch[1], ch[0]} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			r := p.call(addrOf(c, id), raw(wire.Header{Op: wire.OpGet, ReqID: uint64(100 + i), KeyHash: h}, key, nil))
			if r.Op == wire.OpGetReply && string(r.Value) == "v2" && r.Stamp == last {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("read at node %d: %s %s %q v%d, want \"v2\" v%d", id, r.Op, r.Code, r.Value, r.Stamp, last)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n := c.Node(int(ch[0]) - 1).Stats().Noops; n != 2 {
		t.Fatalf("%d no-op versions, want 2: the one in flight and the owed one", n)
	}
}

// TestDirtyVersionsBounded: while a key's chain cannot commit (its middle
// is down), its head takes at most maxDirtyPerKey (32) versions of it and
// refuses the next write as unavailable, applying nothing; once the chain
// commits again the key takes writes again. Before, the versions piled up
// in the key's record, which every write rewrites whole.
func TestDirtyVersionsBounded(t *testing.T) {
	c := startCluster(t, cluster.Options{N: 3})
	key := []byte("bounded")
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	head := addrOf(c, ch[0])
	p := newPeer(t).sealing(c)
	put := func(id uint64) []byte {
		return raw(wire.Header{Op: wire.OpPut, ReqID: id, KeyHash: h}, key, []byte(fmt.Sprintf("v%d", id)))
	}
	mid := int(ch[1]) - 1
	if err := c.Crash(mid); err != nil {
		t.Fatal(err)
	}
	const bound = 32
	for id := uint64(1); id <= bound; id++ {
		p.send(head, put(id))
	}
	if r := p.call(head, put(bound+1)); r.Op != wire.OpErr || r.Code != wire.CodeUnavailable {
		t.Fatalf("write beyond %d uncommitted versions: %s %s v%d, want unavailable", bound, r.Op, r.Code, r.Stamp)
	}
	if n := c.Node(int(ch[0]) - 1).Stats().DirtyKeyFull; n != 1 {
		t.Fatalf("%d writes refused at the bound, want 1", n)
	}
	if err := c.Restart(mid); err != nil {
		t.Fatal(err)
	}
	// The versions taken commit (the tail answers each), then the key
	// takes the refused write as the next version.
	committed := map[uint64]bool{}
	for deadline := time.Now().Add(10 * time.Second); len(committed) < bound; {
		r, ok := p.recvWithin(0, time.Until(deadline))
		if !ok {
			t.Fatalf("%d of the %d writes committed after the restart", len(committed), bound)
		}
		if r.Op != wire.OpPutReply || r.Stamp != r.ReqID {
			t.Fatalf("write %d after the restart: %s %s v%d", r.ReqID, r.Op, r.Code, r.Stamp)
		}
		committed[r.ReqID] = true
	}
	if r := p.call(head, put(bound+1)); r.Op != wire.OpPutReply || r.Stamp != bound+1 {
		t.Fatalf("the refused write again: %s %s v%d, want v%d", r.Op, r.Code, r.Stamp, bound+1)
	}
}

// TestStampedDuplicateSwitch: the same through the software data plane.
// Without the no-op version the slot kept ver_next = 3 > ver_done = 2 after
// the resend, every VSB of the extra was refused as vsb-pending, and the hot
// key's extra served no reads until the key's next write.
func TestStampedDuplicateSwitch(t *testing.T) {
	c := startCluster(t, cluster.Options{N: 4, R: 3, Switch: true})
	sw := c.Switch()
	extra := wire.NodeID(4)
	key := keyNotOn(c, extra)
	h := wire.HashKey(key)
	cl, _ := c.Client(client.Options{}) // to the nodes: Put before promotion, Promote
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, key, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Promote(ctx, cl, key, []wire.NodeID{extra}); err != nil {
		t.Fatal(err)
	}
	// Every read bucket names the extra (LocationList index 3): a read is
	// served there while it is fresh, else by the chain.
	buckets := make([]uint8, 32)
	for i := range buckets {
		buckets[i] = 3
	}
	if err := sw.SetSlotBuckets(h, buckets); err != nil {
		t.Fatal(err)
	}
	waitSlot := func(what string, next, done uint64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			s, ok := sw.Lookup(h)
			if ok && s.VerNext == next && s.VerDone == done && s.Fresh&(1<<3) != 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: slot ver_next %d ver_done %d fresh %b (cached %v), want %d/%d with the extra fresh",
					what, s.VerNext, s.VerDone, s.Fresh, ok, next, done)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitSlot("after promotion", 1, 1)
	p := newPeer(t).sealing(c)
	svc := sw.Addr()
	put := func(val string) wire.Packet {
		return p.call(svc, raw(wire.Header{Op: wire.OpPut, ReqID: 20, KeyHash: h}, key, []byte(val)))
	}
	if r := put("v2"); r.Op != wire.OpPutReply || r.Code != wire.CodeOK || r.Stamp != 2 {
		t.Fatalf("write: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	// The client "times out" and resends request 20: the switch stamps it 3.
	if r := put("v2"); r.Op != wire.OpPutReply || r.Code != wire.CodeOK || r.Stamp != 2 {
		t.Fatalf("resend: %s %s v%d, want the first version 2", r.Op, r.Code, r.Stamp)
	}
	waitSlot("after the resend", 3, 3)
	// Reads reach the extra again.
	deadline := time.Now().Add(5 * time.Second)
	for i := uint64(0); ; i++ {
		r := p.call(svc, raw(wire.Header{Op: wire.OpGet, ReqID: 1000 + i, KeyHash: h}, key, nil))
		if r.Op != wire.OpGetReply || string(r.Value) != "v2" || r.Stamp != 3 {
			t.Fatalf("read: %s %s %q v%d, want \"v2\" v3", r.Op, r.Code, r.Value, r.Stamp)
		}
		if r.Node == extra {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no read reached the extra (last from node %d)", r.Node)
		}
	}
}

// hotKeyCluster starts four nodes whose data plane is dp, a stand-in that
// receives VSBs, and picks a key whose chain leaves out node 4, the extra.
func hotKeyCluster(t *testing.T) (c *cluster.Cluster, dp *peer, extra wire.NodeID, key []byte) {
	dp = newPeer(t)
	c = startCluster(t, cluster.Options{N: 4, R: 3, DataPlane: dp.addr().String()})
	extra = wire.NodeID(4)
	return c, dp, extra, keyNotOn(c, extra)
}

// vsbWatcher returns a wait for VSB(node, v) of h at the stand-in data plane
// dp; VSBs seen on the way are remembered. Extras re-send theirs, so it waits
// up to a deadline rather than for silence.
func vsbWatcher(t *testing.T, dp *peer, h wire.KeyHash) func(node wire.NodeID, ver uint64) {
	vsbs := map[[2]uint64]bool{} // (node, version)
	return func(node wire.NodeID, ver uint64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !vsbs[[2]uint64{uint64(node), ver}] {
			r, ok := dp.recvWithin(0, time.Until(deadline))
			if !ok {
				t.Fatalf("no VSB(node %d, v%d); got %v", node, ver, vsbs)
			}
			if r.Op == wire.OpVSB && r.KeyHash == h {
				vsbs[[2]uint64{uint64(r.Node), r.Stamp}] = true
			}
		}
	}
}

func TestHotKeyCopies(t *testing.T) {
	c, dp, extra, key := hotKeyCluster(t)
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	cl, _ := c.Client(client.Options{})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, key, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	p := newPeer(t).sealing(c)
	get := func(id wire.NodeID, reqid uint64) wire.Packet {
		return p.call(addrOf(c, id), raw(wire.Header{Op: wire.OpGet, ReqID: reqid, KeyHash: h}, key, nil))
	}
	if r := get(extra, 1); r.Op != wire.OpErr || r.Code != wire.CodeWrongNode {
		t.Fatalf("extra before promotion: %s %s", r.Op, r.Code)
	}
	if _, err := cl.Promote(ctx, key, []wire.NodeID{extra}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Promote(ctx, key, []wire.NodeID{ch[1]}); !errors.Is(err, wire.CodeMalformed) {
		t.Fatalf("promoting onto a chain member: %v", err)
	}
	waitVSB := vsbWatcher(t, dp, h)
	waitVSB(extra, 1)
	if r := get(extra, 2); r.Op != wire.OpGetReply || string(r.Value) != "v1" || r.Stamp != 1 || r.Node != extra {
		t.Fatalf("extra serves: %s %q v%d", r.Op, r.Value, r.Stamp)
	}
	// Unstamped writes to a promoted key are refused with retry; stamped
	// ones commit, the tail announces them, and the extra gets the version.
	r := p.call(addrOf(c, ch[0]), raw(wire.Header{Op: wire.OpPut, ReqID: 3, KeyHash: h}, key, []byte("x")))
	if r.Op != wire.OpErr || r.Code != wire.CodeRetry {
		t.Fatalf("unstamped write to promoted key: %s %s", r.Op, r.Code)
	}
	r = p.call(addrOf(c, ch[0]), raw(wire.Header{Op: wire.OpPut, Flags: wire.FlagStamped, Stamp: 2, ReqID: 4, KeyHash: h}, key, []byte("v2")))
	if r.Op != wire.OpPutReply || r.Stamp != 2 {
		t.Fatalf("stamped write: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	waitVSB(ch[2], 2)
	waitVSB(extra, 2)
	if r := get(extra, 5); string(r.Value) != "v2" || r.Stamp != 2 {
		t.Fatalf("extra after push: %q v%d", r.Value, r.Stamp)
	}
	if err := cl.Demote(ctx, key); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.Node(int(extra)-1).Copies()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("extra kept its copy after demotion")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := get(extra, 6); r.Op != wire.OpErr || r.Code != wire.CodeWrongNode {
		t.Fatalf("extra after demotion: %s %s", r.Op, r.Code)
	}
	// Spin's flaw C: a copy of v1 from the first promotion, delayed past
	// the demote, must not come back to life at the extra (it held v2).
	// Sent from p, so the node's one shard for key takes it before the get.
	p.send(addrOf(c, extra), raw(wire.Header{Op: wire.OpCopy, KeyHash: h, Stamp: 1, Node: ch[0]}, key, []byte("v1")))
	if r := get(extra, 8); r.Op != wire.OpErr || r.Code != wire.CodeWrongNode {
		t.Fatalf("extra after a stale copy: %s %s %q", r.Op, r.Code, r.Value)
	}
	if n := len(c.Node(int(extra) - 1).Copies()); n != 0 {
		t.Fatalf("a stale copy came back: %d copies", n)
	}
	if _, err := cl.Put(ctx, key, []byte("v3")); err != nil {
		t.Fatalf("unstamped write after demotion: %v", err)
	}
	// Promote again: the extra's reply to the head's demote push must not
	// demote the key at the head (replies are never taken as requests).
	if _, err := cl.Promote(ctx, key, []wire.NodeID{extra}); err != nil {
		t.Fatal(err)
	}
	waitVSB(extra, 3)
	if err := cl.Demote(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Promote(ctx, key, []wire.NodeID{extra}); err != nil {
		t.Fatal(err)
	}
	waitVSB(extra, 3)
	if _, ok := c.Node(int(ch[0]) - 1).Promoted()[h]; !ok {
		t.Fatal("the head lost its promotion")
	}
	if r := p.call(addrOf(c, ch[0]), raw(wire.Header{Op: wire.OpPut, ReqID: 7, KeyHash: h}, key, []byte("x"))); r.Code != wire.CodeRetry {
		t.Fatalf("unstamped write after re-promotion: %s %s", r.Op, r.Code)
	}
}

func TestRecoveryAfterDiskLoss(t *testing.T) {
	dir := t.TempDir()
	c := startCluster(t, cluster.Options{N: 3, Dir: dir})
	cl, _ := c.Client(client.Options{})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const keys = 300
	for i := range keys {
		if _, err := cl.Put(ctx, []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Node 2 loses its disk and comes back empty: it pulls every partition
	// from its chain neighbours before it serves reads.
	if err := c.Crash(1); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "node-2")); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(1); err != nil {
		t.Fatal(err)
	}
	if got := c.Node(1).Stats().SyncedKeys; got < keys {
		t.Fatalf("synced %d keys, want every one of %d", got, keys)
	}
	p := newPeer(t).sealing(c)
	for i := range keys {
		k := []byte(fmt.Sprintf("k%d", i))
		r := p.call(addrOf(c, 2), raw(wire.Header{Op: wire.OpGet, ReqID: uint64(i + 1), KeyHash: wire.HashKey(k)}, k, nil))
		if r.Op != wire.OpGetReply || string(r.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("node 2 after recovery: %s = %s %q", k, r.Op, r.Value)
		}
	}
}

func TestStatsAndMetrics(t *testing.T) {
	c := startCluster(t, cluster.Options{N: 3})
	cl, _ := c.Client(client.Options{})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 50 {
		k := []byte(fmt.Sprintf("k%d", i))
		cl.Put(ctx, k, []byte("v"))
		cl.Get(ctx, k)
	}
	var st storagenode.Stats
	if err := cl.NodeStats(ctx, 1, &st); err != nil {
		t.Fatal(err)
	}
	if st.ID != 1 || !st.Ready || len(st.Trees) != 3 {
		t.Fatalf("stats: %+v", st)
	}
	var reads uint64
	for _, tr := range st.Trees {
		reads += tr.Reads
	}
	if reads == 0 {
		t.Fatal("no tree reads counted")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Node(0).Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	for _, want := range []string{"netdir_node_tree_reads_total", "netdir_node_tree_read_latency_seconds", "netdir_node_tree_l0_files", "netdir_node_tree_compaction_bytes_total", "netdir_node_op_drops_total", "netdir_node_write_groups_total", "netdir_node_grouped_writes_total"} {
		if !slices.Contains(names, want) {
			t.Errorf("metric %s missing from %s", want, strings.Join(names, ","))
		}
	}
}

// TestPromoteWithoutStamping: a controller with host agents only promotes
// with promoteNoStamp; the head then keeps taking unstamped writes to the
// key, also after a restart.
func TestPromoteWithoutStamping(t *testing.T) {
	dp := newPeer(t)
	c := startCluster(t, cluster.Options{N: 4, R: 3, DataPlane: dp.addr().String()})
	extra := wire.NodeID(4)
	key := keyNotOn(c, extra)
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	p := newPeer(t).sealing(c)
	head := addrOf(c, ch[0])
	promote := func(reqid uint64, flags uint8) wire.Packet {
		ids := wire.AppendNodeIDs(nil, []wire.NodeID{extra})
		return p.call(head, raw(wire.Header{Op: wire.OpPromote, Flags: flags, ReqID: reqid, KeyHash: h}, key, ids))
	}
	// The answer carries the head's latest version (0: never written), which
	// the controller seeds the agents' slots with.
	if r := promote(1, wire.FlagPromoteNoStamp); r.Code != wire.CodeOK || r.Stamp != 0 {
		t.Fatalf("promote: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	put := func(reqid uint64) wire.Packet {
		return p.call(head, raw(wire.Header{Op: wire.OpPut, ReqID: reqid, KeyHash: h}, key, []byte("x")))
	}
	if r := put(10); r.Op != wire.OpPutReply || r.Code != wire.CodeOK {
		t.Fatalf("unstamped write to a key promoted without stamping: %s %s", r.Op, r.Code)
	}
	headIdx := int(ch[0]) - 1
	if err := c.Crash(headIdx); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(headIdx); err != nil {
		t.Fatal(err)
	}
	if r := put(11); r.Op != wire.OpPutReply || r.Code != wire.CodeOK {
		t.Fatalf("after restart: %s %s", r.Op, r.Code)
	}
	// Promoted again by a controller whose data plane stamps: refused.
	if r := promote(2, 0); r.Code != wire.CodeOK || r.Stamp != 2 {
		t.Fatalf("promote after two writes: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	if r := put(12); r.Code != wire.CodeRetry {
		t.Fatalf("unstamped write after a stamping promotion: %s %s", r.Op, r.Code)
	}
	// The same promotion again (a controller's re-sync) changes nothing on
	// disk: after a restart the head still refuses unstamped writes, as the
	// stamping promotion it persisted says.
	if r := promote(3, 0); r.Code != wire.CodeOK || r.Stamp != 2 {
		t.Fatalf("promote again: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	if err := c.Crash(headIdx); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(headIdx); err != nil {
		t.Fatal(err)
	}
	if r := put(13); r.Code != wire.CodeRetry {
		t.Fatalf("unstamped write after a restart: %s %s", r.Op, r.Code)
	}
}

// TestStaleIncarnation: the head of a key promoted in incarnation 2 refuses
// a write stamped in incarnation 1 (a data plane that lost its state since:
// spec/README.md, flaw G) as stale, whatever its version, also after the
// head restarts; the same version stamped in incarnation 2 is applied. A
// key demoted has no incarnation to compare with.
func TestStaleIncarnation(t *testing.T) {
	dp := newPeer(t)
	c := startCluster(t, cluster.Options{N: 4, R: 3, DataPlane: dp.addr().String()})
	extra := wire.NodeID(4)
	key := keyNotOn(c, extra)
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	p := newPeer(t).sealing(c)
	head := addrOf(c, ch[0])
	ids := wire.AppendNodeIDs(nil, []wire.NodeID{extra})
	if r := p.call(head, raw(wire.Header{Op: wire.OpPromote, ReqID: 1, KeyHash: h, Stamp: wire.MakeStamp(2, 0)}, key, ids)); r.Code != wire.CodeOK || r.Stamp != 0 {
		t.Fatalf("promote in incarnation 2: %s %s v%d", r.Op, r.Code, r.Stamp)
	}
	put := func(reqid uint64, inc uint16, ver uint64) wire.Packet {
		return p.call(head, raw(wire.Header{Op: wire.OpPut, Flags: wire.FlagStamped, ReqID: reqid, KeyHash: h, Stamp: wire.MakeStamp(inc, ver)}, key, []byte("x")))
	}
	if r := put(10, 1, 1); r.Op != wire.OpErr || r.Code != wire.CodeStaleVersion {
		t.Fatalf("write stamped 1 in incarnation 1: %s %s v%d, want err stale-version", r.Op, r.Code, r.Stamp)
	}
	headIdx := int(ch[0]) - 1
	if err := c.Crash(headIdx); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(headIdx); err != nil {
		t.Fatal(err)
	}
	if r := put(11, 1, 5); r.Op != wire.OpErr || r.Code != wire.CodeStaleVersion {
		t.Fatalf("after the head's restart, write stamped 5 in incarnation 1: %s %s v%d, want err stale-version", r.Op, r.Code, r.Stamp)
	}
	if r := put(12, 2, 1); r.Op != wire.OpPutReply || r.Code != wire.CodeOK || r.Stamp != 1 {
		t.Fatalf("write stamped 1 in incarnation 2: %s %s v%d, want put-reply v1", r.Op, r.Code, r.Stamp)
	}
	if got := c.Node(headIdx).Stats().StaleIncarnation; got != 1 {
		t.Fatalf("stale-incarnation refusals since the restart: %d, want 1", got)
	}
	if r := p.call(head, raw(wire.Header{Op: wire.OpDemote, ReqID: 2, KeyHash: h}, key, nil)); r.Code != wire.CodeOK {
		t.Fatalf("demote: %s %s", r.Op, r.Code)
	}
	if r := put(13, 1, 2); r.Op != wire.OpPutReply || r.Code != wire.CodeOK || r.Stamp != 2 {
		t.Fatalf("demoted, write stamped 2 in incarnation 1: %s %s v%d, want put-reply v2", r.Op, r.Code, r.Stamp)
	}
}

// TestHashMismatchStoredKey: a GET naming a stored key under another key's
// KeyHash is answered HashMismatch, although GETs of stored keys are served
// without the hash check (fastGet); the true hash still reads the value.
func TestHashMismatchStoredKey(t *testing.T) {
	c := startCluster(t, cluster.Options{N: 1, R: 1})
	cl, err := c.Client(client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	key := []byte("stored")
	if _, err := cl.Put(context.Background(), key, []byte("v")); err != nil {
		t.Fatal(err)
	}
	h := wire.HashKey(key)
	other := h
	for i := 0; c.Layout.Partition(other) == c.Layout.Partition(h); i++ {
		other = wire.HashKey(fmt.Appendf(nil, "other-%d", i))
	}
	p := newPeer(t).sealing(c)
	to := addrOf(c, 1)
	if r := p.call(to, raw(wire.Header{Op: wire.OpGet, ReqID: 1, KeyHash: other}, key, nil)); r.Op != wire.OpErr || r.Code != wire.CodeHashMismatch {
		t.Fatalf("wrong hash: got %s code %s, want err %s", r.Op, r.Code, wire.CodeHashMismatch)
	}
	if r := p.call(to, raw(wire.Header{Op: wire.OpGet, ReqID: 2, KeyHash: h}, key, nil)); r.Op != wire.OpGetReply || r.Code != wire.CodeOK || string(r.Value) != "v" {
		t.Fatalf("true hash: got %s code %s value %q", r.Op, r.Code, r.Value)
	}
}
