package storagenode_test

import (
	"testing"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/sched/dmclock"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// TestQoSAdmission: with a QoS configuration, a node of emulated capacity
// serves a tenant's reservation ahead of a limited tenant, holds the
// limited one to its limit (throttled, never refused), and reports both;
// turned off, requests bypass the scheduler again.
func TestQoSAdmission(t *testing.T) {
	c := startCluster(t, cluster.Options{N: 1, R: 1, Node: func(o *storagenode.Options) {
		o.Workers, o.MaxOps = 2, 400
	}})
	n := c.Node(0)
	if err := n.SetQoS(storagenode.QoS{Generation: 1, Tenants: map[uint16]dmclock.Policy{1: {Reservation: -1, Weight: 1}}}); err == nil {
		t.Fatal("a negative reservation was applied")
	}
	if n.QoSGeneration() != 0 || n.Stats().QoSOn {
		t.Fatal("a refused configuration turned QoS on")
	}
	const reserved, limited = 1, 2
	err := n.SetQoS(storagenode.QoS{Generation: 7, Tenants: map[uint16]dmclock.Policy{
		reserved: {Reservation: 100, Weight: 1},
		limited:  {Weight: 1, Limit: 50},
	}})
	if err != nil || n.QoSGeneration() != 7 {
		t.Fatalf("SetQoS: %v, generation %d", err, n.QoSGeneration())
	}
	p := newPeer(t)
	key := []byte("k")
	h := wire.HashKey(key)
	to := addrOf(c, 1)
	const each = 40
	for i := range each {
		p.send(to, raw(wire.Header{Op: wire.OpGet, Tenant: limited, ReqID: uint64(1000 + i), KeyHash: h}, key, nil))
		p.send(to, raw(wire.Header{Op: wire.OpGet, Tenant: reserved, ReqID: uint64(2000 + i), KeyHash: h}, key, nil))
	}
	got, flagged := map[uint16]int{}, map[uint16]int{}
	limitedWhenReservedDone := -1
	for range 2 * each {
		r, ok := p.recv(0)
		if !ok {
			t.Fatalf("replies so far %v, then none", got)
		}
		if r.Op != wire.OpGetReply {
			t.Fatalf("tenant %d: %s %s: QoS refused a request", r.Tenant, r.Op, r.Code)
		}
		got[r.Tenant]++
		if r.Flags&wire.FlagReservation != 0 {
			flagged[r.Tenant]++
		}
		if r.Tenant == reserved && got[reserved] == each {
			limitedWhenReservedDone = got[limited]
		}
	}
	// At 400 ops/s the reserved tenant's 40 take about 0.1 s, in which the
	// limited one may have about 5 (plus the bucket's burst).
	if limitedWhenReservedDone < 0 || limitedWhenReservedDone > each/2 {
		t.Errorf("the limited tenant had %d of %d served when the other finished", limitedWhenReservedDone, each)
	}
	st := map[uint16]storagenode.TenantQoS{}

	for _, q := range n.Stats().QoS {
		st[q.Tenant] = q
	}
	if s := st[limited]; s.Throttled == 0 || s.Default || s.Policy.Limit != 50 || len(s.Clients) != 1 || s.Clients[0] != p.addr() {
		t.Errorf("limited tenant's stats %+v", s)
	}
	if s := st[reserved]; s.ServedReservation == 0 || s.ServedReservation+s.ServedWeight != each || s.Queued != 0 || s.Inflight != 0 {
		t.Errorf("reserved tenant's stats %+v", s)
	}
	// Replies say which requests the reservation served (the data plane
	// counts them into ρ); the limited tenant has no reservation.
	if flagged[limited] != 0 || uint64(flagged[reserved]) != st[reserved].ServedReservation {
		t.Errorf("replies flagged reservation: %v; the reserved tenant's served in that phase: %d", flagged, st[reserved].ServedReservation)
	}
	if err := n.SetQoS(storagenode.QoS{Generation: 8}); err != nil || n.Stats().QoSOn {
		t.Fatalf("turning QoS off: %v", err)
	}
	r := p.call(to, raw(wire.Header{Op: wire.OpGet, Tenant: limited, ReqID: 3000, KeyHash: h}, key, nil))
	if r.Op != wire.OpGetReply {
		t.Fatalf("with QoS off: %s %s", r.Op, r.Code)
	}
	if s := n.Stats().QoS; len(s) != 2 || !s[1].Default || s[1].ServedReservation+s[1].ServedWeight != each {
		t.Errorf("with QoS off the request went through the scheduler, or tenants kept overrides: %+v", s)
	}
}

// TestQoSReservationOnWriteReplies: the head's dmClock decides a write's
// phase and the tail replies, so the phase travels down the chain; a
// client's own FlagReservation is never echoed, with QoS on or off.
func TestQoSReservationOnWriteReplies(t *testing.T) {
	c := startCluster(t, cluster.Options{N: 3})
	p := newPeer(t)
	key := []byte("reserved-write")
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	if len(ch) != 3 {
		t.Fatalf("chain %v", ch)
	}
	head := addrOf(c, ch[0])
	const reserved, other = 5, 6
	err := c.Node(int(ch[0]) - 1).SetQoS(storagenode.QoS{Generation: 1, Tenants: map[uint16]dmclock.Policy{
		reserved: {Reservation: 1000, Weight: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	req := func(op wire.Op, tenant uint16, id uint64, flags uint8) wire.Packet {
		var val []byte
		if op == wire.OpPut {
			val = []byte("v")
		}
		return p.call(head, raw(wire.Header{Op: op, Flags: flags, Tenant: tenant, ReqID: id, KeyHash: h}, key, val))
	}
	if r := req(wire.OpPut, reserved, 1, 0); r.Op != wire.OpPutReply || r.Node != ch[2] || r.Flags&wire.FlagReservation == 0 {
		t.Errorf("write in the reservation phase: %s from node %d, flags %#x", r.Op, r.Node, r.Flags)
	}
	if r := req(wire.OpDel, reserved, 2, 0); r.Op != wire.OpDelReply || r.Node != ch[2] || r.Flags&wire.FlagReservation == 0 {
		t.Errorf("delete in the reservation phase: %s from node %d, flags %#x", r.Op, r.Node, r.Flags)
	}
	if r := req(wire.OpPut, other, 3, wire.FlagReservation); r.Op != wire.OpPutReply || r.Flags&wire.FlagReservation != 0 {
		t.Errorf("write in the weight phase, flag forged: %s, flags %#x", r.Op, r.Flags)
	}
	var st storagenode.TenantQoS
	for _, q := range c.Node(int(ch[0]) - 1).QoSStats() {
		if q.Tenant == reserved {
			st = q
		}
	}
	if st.ServedReservation != 2 {
		t.Errorf("the head served %d of the reserved tenant's writes in the reservation phase, want 2", st.ServedReservation)
	}
	if err := c.Node(int(ch[0]) - 1).SetQoS(storagenode.QoS{Generation: 2}); err != nil {
		t.Fatal(err)
	}
	if r := req(wire.OpPut, reserved, 4, wire.FlagReservation); r.Op != wire.OpPutReply || r.Flags&wire.FlagReservation != 0 {
		t.Errorf("QoS off, write with a forged flag: %s, flags %#x", r.Op, r.Flags)
	}
	if r := req(wire.OpGet, reserved, 5, wire.FlagReservation); r.Op != wire.OpGetReply || r.Flags&wire.FlagReservation != 0 {
		t.Errorf("QoS off, read with a forged flag: %s, flags %#x", r.Op, r.Flags)
	}
}
