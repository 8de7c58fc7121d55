package cluster

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRetryWaitCapped(t *testing.T) {
	b := retryWait{min: 100 * time.Millisecond, max: 5 * time.Second}
	var got []time.Duration
	for range 9 {
		got = append(got, b.next())
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
	b.reset()
	if d := b.next(); d != 100*time.Millisecond {
		t.Fatalf("after reset %v", d)
	}
}

// TestLinkLogsOncePerChange: a hundred refused tries log once, reaching
// the peer once, losing it once, and a new kind of failure once.
func TestLinkLogsOncePerChange(t *testing.T) {
	refused := status.Error(codes.Unavailable, "connection refused")
	var l link
	var logged []string
	now := time.Unix(0, 0)
	try := func(err error) {
		now = now.Add(100 * time.Millisecond)
		if tr, ok := l.observe(err, now); ok {
			logged = append(logged, tr.State)
		}
	}
	for i := range 100 {
		if i%2 == 0 {
			try(refused)
		} else {
			try(status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
		}
	}
	try(nil)
	try(nil)
	for range 10 {
		try(refused)
	}
	try(status.Error(codes.NotFound, "node 9 is not in the configuration"))
	try(errors.New("other"))
	try(errors.New("other"))
	try(nil)
	want := []string{linkWaiting, linkUp, linkLost, linkLost, linkLost, linkUp}
	if len(logged) != len(want) {
		t.Fatalf("logged %v, want %v", logged, want)
	}
	for i := range want {
		if logged[i] != want[i] {
			t.Fatalf("logged %v, want %v", logged, want)
		}
	}
	var w link
	w.observe(refused, time.Unix(0, 0))
	tr, _ := w.observe(nil, time.Unix(3, 0))
	if tr.Tries != 1 || tr.After != 3*time.Second {
		t.Fatalf("reached after %d tries in %v", tr.Tries, tr.After)
	}
}
