package device

import (
	"testing"
	"time"
)

func TestCPUNoneIsNil(t *testing.T) {
	if c := NewCPU(mustParse(t, "none")); c != nil {
		t.Fatalf("none has a processor: %+v", c)
	}
	for _, name := range []string{"ssd", "hdd"} {
		p := mustParse(t, name)
		c := NewCPU(p)
		if c == nil {
			t.Fatalf("%s has no processor", name)
		}
		// the processor keeps the real request time's ratio to the device's
		// read service: scaled alike
		real := map[string]realDevice{"ssd": p4500, "hdd": hdd7200}[name]
		got := float64(p.RequestService) / float64(p.ReadService)
		want := float64(realRequestService) / float64(real.readService)
		if got/want < 0.999 || got/want > 1.001 {
			t.Errorf("%s: request/read service %.5f, want %.5f", name, got, want)
		}
	}
}

// TestCPUBoundsAndFIFO books bursts and idle arrivals and checks that the
// processor never serves more than Cores requests per RequestService, never
// ends a request before its arrival plus its service, serves in booking
// order, and counts busy time and waits.
func TestCPUBoundsAndFIFO(t *testing.T) {
	const s = 2 * time.Millisecond
	for _, cores := range []int{1, 3} {
		c := NewCPU(Profile{RequestService: s, Cores: cores})
		if got, want := c.Rate(), float64(cores)/s.Seconds(); got != want {
			t.Errorf("cores %d: rate %.0f, want %.0f", cores, got, want)
		}
		// a burst of 30 at t0: the i-th ends at (i/cores+1) service times
		var prev time.Time
		var wait time.Duration
		for i := range 30 {
			done := c.Book(t0)
			want := t0.Add(time.Duration(i/cores+1) * s)
			if !done.Equal(want) {
				t.Fatalf("cores %d: request %d done at +%v, want +%v", cores, i, done.Sub(t0), want.Sub(t0))
			}
			if done.Before(prev) {
				t.Fatalf("cores %d: request %d ends before the one booked before it", cores, i)
			}
			prev = done
			wait += done.Sub(t0) - s
		}
		// an arrival after the burst drained starts at once
		late := t0.Add(time.Second)
		if done := c.Book(late); !done.Equal(late.Add(s)) {
			t.Errorf("cores %d: idle arrival done at +%v, want +%v", cores, done.Sub(late), s)
		}
		st := c.Stats()
		if st.Requests != 31 || st.Busy != 31*s || st.Wait != wait {
			t.Errorf("cores %d: stats %+v, want 31 requests, busy %v, wait %v", cores, st, 31*s, wait)
		}
	}
}
