package storagenode_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/wire"
)

// TestVerifiedReadAtExtra: a read flagged wire.FlagVerify at an extra is
// answered with the tail's committed version (issue 18): the tail's value
// when the extra's copy is older, the copy itself (the tail sends no value)
// when it is current, and nothing at all while the tail cannot answer. A
// read without the flag is served from the copy as before.
func TestVerifiedReadAtExtra(t *testing.T) {
	c, _, extra, key := hotKeyCluster(t)
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	tail := ch[len(ch)-1]
	cl, _ := c.Client(client.Options{})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, v := range []string{"v1", "v2"} {
		if _, err := cl.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	p := newPeer(t).sealing(c)
	// copyAt gives the extra a copy of version ver, as the head would.
	copyAt := func(ver uint64, val string) {
		t.Helper()
		p.send(addrOf(c, extra), raw(wire.Header{Op: wire.OpCopy, KeyHash: h, Stamp: ver, Node: ch[0]}, key, []byte(val)))
		deadline := time.Now().Add(5 * time.Second)
		for c.Node(int(extra) - 1).Copies()[h] != ver {
			if time.Now().After(deadline) {
				t.Fatalf("the extra holds %v, not v%d", c.Node(int(extra)-1).Copies(), ver)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	get := func(reqid uint64, flags uint8) wire.Packet {
		t.Helper()
		return p.call(addrOf(c, extra), raw(wire.Header{Op: wire.OpGet, Flags: flags, ReqID: reqid, KeyHash: h}, key, nil))
	}
	stats := func(id wire.NodeID) (extraGets, verified, own, withValue, without uint64) {
		s := c.Node(int(id) - 1).Stats()
		return s.ExtraGets, s.VerifiedGets, s.VerifiedOwnCopy, s.VerAnswersValue, s.VerAnswersSame
	}

	// A stale copy (v1 of v2 committed).
	copyAt(1, "v1")
	if r := get(1, 0); r.Op != wire.OpGetReply || r.Stamp != 1 || string(r.Value) != "v1" {
		t.Fatalf("unflagged read at the extra: %s %s v%d %q, want its copy v1", r.Op, r.Code, r.Stamp, r.Value)
	}
	if r := get(2, wire.FlagVerify); r.Op != wire.OpGetReply || r.Stamp != 2 || string(r.Value) != "v2" || r.Node != extra {
		t.Fatalf("verified read of a stale copy: %s %s v%d %q from %d, want v2 %q from %d", r.Op, r.Code, r.Stamp, r.Value, r.Node, "v2", extra)
	}
	if eg, vg, own, _, _ := stats(extra); eg != 1 || vg != 1 || own != 0 {
		t.Fatalf("extra counters: extra gets %d, verified %d, own copy %d; want 1, 1, 0", eg, vg, own)
	}
	if _, _, _, with, without := stats(tail); with != 1 || without != 0 {
		t.Fatalf("tail answers: %d with value, %d without; want 1, 0", with, without)
	}

	// A current copy: the tail confirms it and sends no value.
	copyAt(2, "v2")
	if r := get(3, wire.FlagVerify); r.Op != wire.OpGetReply || r.Stamp != 2 || string(r.Value) != "v2" {
		t.Fatalf("verified read of a current copy: %s %s v%d %q", r.Op, r.Code, r.Stamp, r.Value)
	}
	if _, vg, own, _, _ := stats(extra); vg != 2 || own != 1 {
		t.Fatalf("extra counters: verified %d, own copy %d; want 2, 1", vg, own)
	}
	if _, _, _, with, without := stats(tail); with != 1 || without != 1 {
		t.Fatalf("tail answers: %d with value, %d without; want 1, 1", with, without)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Node(int(tail) - 1).Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "value" || l.GetName() == "kind" {
					series[mf.GetName()+"/"+l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if w, wo := series["netdir_node_ver_answers_total/with"], series["netdir_node_ver_answers_total/without"]; w != 1 || wo != 1 {
		t.Fatalf("tail's netdir_node_ver_answers_total: with %v, without %v; want 1, 1 (%v)", w, wo, series)
	}

	// The tail down, the copy stale again (v3 committed): the verified read
	// gets no answer, never the copy's v2.
	if _, err := cl.Put(ctx, key, []byte("v3")); err != nil {
		t.Fatal(err)
	}
	if err := c.Crash(int(tail) - 1); err != nil {
		t.Fatal(err)
	}
	p.send(addrOf(c, extra), raw(wire.Header{Op: wire.OpGet, Flags: wire.FlagVerify, ReqID: 4, KeyHash: h}, key, nil))
	if r, ok := p.recvWithin(4, 3*time.Second); ok && r.Op == wire.OpGetReply {
		t.Fatalf("verified read with the tail down answered %s v%d %q", r.Code, r.Stamp, r.Value)
	}
	if _, vg, _, _, _ := stats(extra); vg != 2 {
		t.Fatalf("verified reads %d with the tail down, want still 2", vg)
	}
}
