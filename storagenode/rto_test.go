package storagenode

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/netdir/netdir/storagenode/device"
	"github.com/netdir/netdir/wire"
)

const ms = time.Millisecond

// TestRTOFromAckTimes: the first ack time sets SRTT and RTTVAR = SRTT/2
// (RTO = 3·SRTT); steady ack times shrink RTTVAR towards 0 and the RTO
// towards the ack time; the RTO stays within [the start, 16× the start].
func TestRTOFromAckTimes(t *testing.T) {
	e := newRTOEstimator(100 * ms)
	if e.rto != 100*ms {
		t.Fatalf("before any ack: RTO %v, want the start, 100ms", e.rto)
	}
	e.sample(300 * ms)
	if e.srtt != 300*ms || e.rttvar != 150*ms || e.rto != 900*ms {
		t.Fatalf("after an ack in 300ms: SRTT %v RTTVAR %v RTO %v, want 300ms 150ms 900ms", e.srtt, e.rttvar, e.rto)
	}
	e.sample(500 * ms) // RTTVAR (3·150+200)/4, SRTT (7·300+500)/8
	if e.srtt != 325*ms || e.rttvar != 162500*time.Microsecond || e.rto != 975*ms {
		t.Fatalf("after 300ms, 500ms: SRTT %v RTTVAR %v RTO %v, want 325ms 162.5ms 975ms", e.srtt, e.rttvar, e.rto)
	}
	for range 60 {
		e.sample(300 * ms)
	}
	if e.rto < 300*ms || e.rto > 310*ms {
		t.Fatalf("after steady 300ms acks: RTO %v, want just above 300ms", e.rto)
	}
	for range 60 {
		e.sample(time.Millisecond)
	}
	if e.rto != 100*ms {
		t.Fatalf("after 1ms acks: RTO %v, want the floor, the start 100ms", e.rto)
	}
	e.sample(time.Minute)
	if e.rto != 1600*ms {
		t.Fatalf("after a minute's ack: RTO %v, want the ceiling 1.6s", e.rto)
	}
}

// TestRTOBackoff: a timeout doubles the RTO once per RTO, however many
// writes time out together, up to the ceiling; the next ack time sets it
// again from the estimate. A write's own wait doubles with its resends.
func TestRTOBackoff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := newRTOEstimator(100 * ms)
	e.timedOut(t0)
	e.timedOut(t0) // another write, the same tick
	e.timedOut(t0.Add(150 * ms))
	if e.rto != 200*ms {
		t.Fatalf("timeouts at 0, 0, 150ms: RTO %v, want 200ms (once per RTO)", e.rto)
	}
	e.timedOut(t0.Add(200 * ms))
	if e.rto != 400*ms {
		t.Fatalf("a timeout an RTO later: RTO %v, want 400ms", e.rto)
	}
	for i := range 10 {
		e.timedOut(t0.Add(time.Duration(i+1) * 10 * time.Second))
	}
	if e.rto != 1600*ms {
		t.Fatalf("after many timeouts: RTO %v, want the ceiling 1.6s", e.rto)
	}
	e.sample(40 * ms)
	if e.rto != 120*ms {
		t.Fatalf("an ack in 40ms after the timeouts: RTO %v, want 120ms", e.rto)
	}
	for _, c := range []struct {
		tries int
		after time.Duration
		due   bool
	}{{0, 119 * ms, false}, {0, 120 * ms, true}, {1, 239 * ms, false}, {1, 240 * ms, true},
		{4, 1599 * ms, false}, {9, 1600 * ms, true}} {
		if got := e.due(t0, t0.Add(c.after), c.tries); got != c.due {
			t.Errorf("RTO 120ms, %d resends, %v after the last send: due %v, want %v", c.tries, c.after, got, c.due)
		}
	}
}

// TestSlowTailResendsStop: the tail acks every chain write 300 ms after
// the head sent it, one write at a time; the head's clock is faked and its
// timer run every 50 ms of it. The fixed 100 ms timer resent every write
// once before its ack (each ack arriving for a resent write). Now the
// first two writes are resent, backing the link's timeout off (200 ms,
// then 400 ms), the third is acked before its timeout, its ack time sets
// the RTO to 900 ms, and no later write is resent. The test plays the
// tail and the client.
func TestSlowTailResendsStop(t *testing.T) {
	tail, cl := newUDPEnd(t), newUDPEnd(t)
	clock := device.NewFakeClock(time.Unix(1_000_000, 0))
	n, m, headAddr := startAmong(t, 2, []*udpEnd{tail}, func(o *Options) { o.clock = clock })
	key := keyAt(t, m, 0)
	h := wire.HashKey(key)
	s := n.admit.shards[0]
	housekeep := func() {
		done := make(chan struct{})
		s.ch <- item{fn: func() { s.housekeep(); s.flush(); close(done) }}
		<-done
	}
	var resent []uint64
	for i := range uint64(8) {
		id := 100 + i
		cl.send(headAddr, wire.Header{Op: wire.OpPut, ReqID: id, KeyHash: h}, key, []byte("v"))
		w := tail.recv(fmt.Sprintf("write %d's chain-write", i), func(p *wire.NodePacket) bool { return p.Op == wire.OpChainWrite && p.ReqID == id })
		before := n.ctr.retransmits.Load()
		for range 5 {
			clock.Advance(50 * ms)
			housekeep()
		}
		resent = append(resent, n.ctr.retransmits.Load()-before)
		clock.Advance(50 * ms)
		tail.send(headAddr, wire.Header{Op: wire.OpChainAck, KeyHash: h, Stamp: w.Stamp, Node: 2, Epoch: m.Epoch()}, key, nil)
		waitFor(t, fmt.Sprintf("write %d acked at the head", i), func() bool {
			housekeep() // updates npend
			return s.npend.Load() == 0
		})
	}
	if want := []uint64{1, 1, 0, 0, 0, 0, 0, 0}; !slices.Equal(resent, want) {
		t.Fatalf("resends per write, acks in 300ms: %v, want %v", resent, want)
	}
	st := n.Stats()
	if len(st.ChainRTO) != 1 || st.ChainRTO[0].Next != 2 {
		t.Fatalf("chain RTO in Stats: %+v, want the link to node 2", st.ChainRTO)
	}
	// Six acks in 300ms: RTTVAR 150ms·(3/4)^5, RTO SRTT + 4·RTTVAR.
	if l := st.ChainRTO[0]; l.SRTT != 300*ms || l.RTO < 442*ms || l.RTO > 443*ms {
		t.Fatalf("link to node 2: %+v, want SRTT 300ms, RTO 442.4ms", l)
	}
}
