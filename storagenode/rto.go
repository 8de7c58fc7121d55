package storagenode

import (
	"time"

	"github.com/netdir/netdir/wire"
)

// maxRTOShift bounds the doubling: a chain link's resend timeout is at
// most 16× RetransmitAfter, the old fixed timer's longest backoff.
const maxRTOShift = 4

// rtoEstimator times the head's resends of chain writes down one chain
// link (head → successor) from the acks that come back, as TCP does
// (RFC 6298): SRTT and RTTVAR from the ack times of writes sent once
// (Karn: an ack of a resent write may answer either copy), RTO = SRTT +
// 4·RTTVAR within [RetransmitAfter, 16× RetransmitAfter]. A timeout
// doubles the RTO, once per RTO however many writes time out together
// (TCP has one timer), until the next valid sample: without that, a chain
// whose acks all take longer than the starting RTO would have every write
// resent, no valid sample, and the fixed timer's resends for ever.
// Before the first sample the RTO is RetransmitAfter. Pure state: the
// caller passes the time.
//
// The floor is RetransmitAfter, not TCP's few RTTs: the estimate only
// lengthens the wait where acks are slower than the configured timer. A
// floor of 20 ms (then 50 ms) resent 2.6× (2.3×) as many writes as the
// fixed timer in the demo (BENCHMARKS.md, stall16): at moderate load the
// ack times of a quiet link are a few ms, and a WAL sync or a scheduling
// pause on a busy machine takes longer than their RTTVAR allows.
//
// One per chain link, not per node: the ack time is the successor's and
// the members' below it (their queues, their syncs), and a head heads
// partitions down several successors; a slow chain (stall16's hot key)
// must not stretch the fast chains' resends, nor a fast one shorten the
// slow one's. Kept per shard (owned by its worker, no lock): a key's
// writes are one shard's, so a hot chain's samples are where its resends
// are decided.
type rtoEstimator struct {
	srtt, rttvar time.Duration
	sampled      bool
	rto          time.Duration // the current timeout, doubled by timeouts since the last sample
	backedOff    time.Time     // when a timeout last doubled rto (zero: not since the last sample)
	floor, ceil  time.Duration
}

func newRTOEstimator(start time.Duration) *rtoEstimator {
	return &rtoEstimator{rto: start, floor: start, ceil: start << maxRTOShift}
}

// sample takes the ack time of a write sent once.
func (e *rtoEstimator) sample(rtt time.Duration) {
	rtt = max(rtt, 0)
	if !e.sampled {
		e.srtt, e.rttvar, e.sampled = rtt, rtt/2, true
	} else {
		e.rttvar = (3*e.rttvar + (e.srtt - rtt).Abs()) / 4
		e.srtt = (7*e.srtt + rtt) / 8
	}
	e.rto = min(max(e.srtt+4*e.rttvar, e.floor), e.ceil)
	e.backedOff = time.Time{}
}

// timedOut doubles the RTO at now, a write's wait having run out, unless
// a timeout did within the last RTO.
func (e *rtoEstimator) timedOut(now time.Time) {
	if !e.backedOff.IsZero() && now.Sub(e.backedOff) < e.rto {
		return
	}
	e.rto, e.backedOff = min(2*e.rto, e.ceil), now
}

// due reports whether a write sent at sent and resent tries times so far
// is to be resent at now: its wait doubles with each resend.
func (e *rtoEstimator) due(sent, now time.Time, tries int) bool {
	return now.Sub(sent) >= min(e.rto<<min(tries, maxRTOShift), e.ceil)
}

// LinkRTO is a chain link's resend timeout at this head (rtoEstimator):
// the largest over the node's shards.
type LinkRTO struct {
	Next wire.NodeID   `json:"next"` // the successor the writes go to
	RTO  time.Duration `json:"rto_ns"`
	SRTT time.Duration `json:"srtt_ns"` // 0: no ack timed yet
}

// linkRTO is the estimator of the link to next, made on first use.
func (s *shard) linkRTO(next wire.NodeID) *rtoEstimator {
	e := s.rto[next]
	if e == nil {
		e = newRTOEstimator(s.n.opts.RetransmitAfter)
		s.rto[next] = e
	}
	return e
}

// publishRTO makes the shard's link timeouts readable by Stats.
func (s *shard) publishRTO() {
	links := make([]LinkRTO, 0, len(s.rto))
	for next, e := range s.rto {
		links = append(links, LinkRTO{Next: next, RTO: e.rto, SRTT: e.srtt})
	}
	s.rtoSnap.Store(&links)
}
