package cluster

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// retryWait is a retry's wait: it doubles from min up to max.
type retryWait struct{ min, max, cur time.Duration }

// next is the wait before the next try.
func (b *retryWait) next() time.Duration {
	b.cur = min(max(2*b.cur, b.min), b.max)
	return b.cur
}

// reset starts again from min, after a success.
func (b *retryWait) reset() { b.cur = 0 }

// Link states, as a retry loop logs them.
const (
	linkWaiting = "waiting" // never answered yet
	linkUp      = "up"
	linkLost    = "lost" // answered before, not now
)

// link follows whether a peer answers, so that a retry loop logs once per
// change of state (waiting, up, lost, or failing in a new way), not once
// per try. It does no I/O.
type link struct {
	state string
	code  string // the failure's kind (failure)
	tries int    // failures since the last change to up
	since time.Time
}

// transition is what a retry loop logs.
type transition struct {
	State string
	Tries int           // failed tries before reaching up
	After time.Duration // how long the link was down, reaching up
}

// observe takes a try's outcome at now and returns the transition to log,
// if it is one.
func (l *link) observe(err error, now time.Time) (transition, bool) {
	if err == nil {
		if l.state == linkUp {
			return transition{}, false
		}
		t := transition{State: linkUp, Tries: l.tries}
		if !l.since.IsZero() {
			t.After = now.Sub(l.since)
		}
		*l = link{state: linkUp, since: now}
		return t, true
	}
	code := failure(err)
	l.tries++
	switch l.state {
	case linkUp:
		*l = link{state: linkLost, code: code, tries: 1, since: now}
	case "":
		*l = link{state: linkWaiting, code: code, tries: 1, since: now}
	default:
		if code == l.code {
			return transition{}, false
		}
		l.code = code // failing in a new way: say so once
	}
	return transition{State: l.state, Tries: l.tries}, true
}

// failure is the kind of a failed try: unreachable (nothing listening, no
// answer in time: both alternate while a peer is down), another gRPC
// code, or the text of another error.
func failure(err error) string {
	st, ok := status.FromError(err)
	switch {
	case !ok:
		return err.Error()
	case st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded:
		return "unreachable"
	}
	return st.Code().String()
}
