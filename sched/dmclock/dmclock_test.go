package dmclock

import (
	"math"
	"strings"
	"testing"
	"time"
)

// backlog is a tenant that keeps depth requests of cost queued at one
// server from start until end (0: the run's end).
type backlog struct {
	tenant     uint16
	cost       uint32
	depth      int
	start, end time.Duration
}

// service is one request served in a run.
type service struct {
	at     time.Duration
	tenant uint16
	phase  Phase
}

// serve runs one server that pulls every 1/rate seconds from 0 until dur
// and keeps each backlog queued; events run before the pull of their time.
// It returns what the server served.
func serve(q *Queue[uint16], rate float64, dur time.Duration, loads []backlog, events map[time.Duration]func(now time.Duration)) []service {
	step := time.Duration(1e9 / rate)
	var out []service
	for now := time.Duration(0); now < dur; now += step {
		if ev := events[now]; ev != nil {
			ev(now)
		}
		for _, l := range loads {
			if now < l.start || (l.end > 0 && now >= l.end) {
				continue
			}
			for q.TenantLen(l.tenant) < max(l.depth, 1) {
				q.Add(l.tenant, l.cost, 0, 0, l.tenant, now)
			}
		}
		if t, ph, _ := q.Pull(now); ph != None {
			out = append(out, service{now, t, ph})
		}
	}
	return out
}

// rate is tenant's served ops/s over [from, to), in phase (None: all).
func rate(s []service, tenant uint16, phase Phase, from, to time.Duration) float64 {
	n := 0
	for _, x := range s {
		if x.tenant == tenant && x.at >= from && x.at < to && (phase == None || x.phase == phase) {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

func newQueue(t *testing.T, defaults Policy, policies map[uint16]Policy) *Queue[uint16] {
	t.Helper()
	q, err := New[uint16](defaults)
	if err != nil {
		t.Fatal(err)
	}
	for id, p := range policies {
		if err := q.SetPolicy(id, p, 0); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// near fails unless got is within frac of want.
func near(t *testing.T, what string, got, want, frac float64) {
	t.Helper()
	if math.Abs(got-want) > frac*want {
		t.Errorf("%s: %.1f, want %.1f ± %.0f%%", what, got, want, frac*100)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, c := range []struct {
		p   Policy
		err string // "" for valid
	}{
		{Policy{Weight: 1}, ""},
		{Policy{Reservation: 100, Weight: 0.5, Limit: 100}, ""},
		{Policy{Reservation: 100, Weight: 2}, ""},
		{Policy{}, "weight"},
		{Policy{Weight: -1}, "weight"},
		{Policy{Weight: math.NaN()}, "weight"},
		{Policy{Weight: math.Inf(1)}, "weight"},
		{Policy{Reservation: -1, Weight: 1}, "reservation"},
		{Policy{Reservation: math.Inf(1), Weight: 1}, "reservation"},
		{Policy{Weight: 1, Limit: -5}, "limit"},
		{Policy{Weight: 1, Limit: math.NaN()}, "limit"},
		{Policy{Reservation: 200, Weight: 1, Limit: 100}, "above limit"},
	} {
		err := c.p.Validate()
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%+v: err %v, want %q", c.p, err, c.err)
		}
	}
	if _, err := New[int](Policy{}); err == nil {
		t.Error("New accepted zero defaults")
	}
	q := newQueue(t, Policy{Weight: 1}, nil)
	if err := q.SetPolicy(3, Policy{Reservation: 10, Weight: 1, Limit: 5}, 0); err == nil {
		t.Error("SetPolicy accepted R > L")
	}
	if err := q.SetDefault(Policy{Weight: 0}, 0); err == nil {
		t.Error("SetDefault accepted W = 0")
	}
	if p, def := q.Policy(3); !def || p != (Policy{Weight: 1}) {
		t.Errorf("after refused SetPolicy: %+v default=%v", p, def)
	}
}

func TestCost(t *testing.T) {
	for _, c := range []struct {
		write bool
		size  int
		want  uint32
	}{{false, 1 << 20, 1}, {true, 0, 1}, {true, CostUnit - 1, 1}, {true, CostUnit, 2}, {true, 10 * CostUnit, 11}} {
		if got := Cost(c.write, c.size); got != c.want {
			t.Errorf("Cost(%v, %d) = %d, want %d", c.write, c.size, got, c.want)
		}
	}
	// Tags advance by cost: equal weights share cost units, not ops;
	// a limit caps cost units.
	q := newQueue(t, Policy{Weight: 1}, map[uint16]Policy{3: {Weight: 1, Limit: 400}})
	s := serve(q, 1000, 20*time.Second, []backlog{{tenant: 1, cost: 4, depth: 4}, {tenant: 2, cost: 1, depth: 4}}, nil)
	near(t, "cost-4 tenant ops/s", rate(s, 1, None, time.Second, 20*time.Second), 200, 0.02)
	near(t, "cost-1 tenant ops/s", rate(s, 2, None, time.Second, 20*time.Second), 800, 0.02)
	q = newQueue(t, Policy{Weight: 1}, map[uint16]Policy{1: {Weight: 10, Limit: 400}})
	s = serve(q, 1000, 20*time.Second, []backlog{{tenant: 1, cost: 4, depth: 4}, {tenant: 2, cost: 1, depth: 4}}, nil)
	near(t, "limited cost-4 tenant ops/s", rate(s, 1, None, time.Second, 20*time.Second), 100, 0.02)
}

func TestReservationsMetUnderContention(t *testing.T) {
	// C's weight would take 98% of the server; A and B still get their
	// reservations, and C the rest.
	q := newQueue(t, Policy{Weight: 1}, map[uint16]Policy{
		1: {Reservation: 100, Weight: 1},
		2: {Reservation: 250, Weight: 1},
		3: {Weight: 100},
	})
	loads := []backlog{{tenant: 1, depth: 8}, {tenant: 2, depth: 8}, {tenant: 3, depth: 8}}
	s := serve(q, 1000, 21*time.Second, loads, nil)
	from, to := time.Second, 21*time.Second
	for id, r := range map[uint16]float64{1: 100, 2: 250} {
		if got := rate(s, id, None, from, to); got < 0.98*r {
			t.Errorf("tenant %d: %.1f ops/s, reservation %.0f", id, got, r)
		}
	}
	near(t, "tenant 3", rate(s, 3, None, from, to), 650, 0.02)
	if st := q.Stats(1); st.ServedReservation == 0 || st.Default {
		t.Errorf("tenant 1 stats %+v", st)
	}

	// Weight-phase service does not count against the reservation: tenant
	// 1 has the server to itself for 5 s, far above its reservation; when
	// 3 arrives, 1 still gets its reservation at once.
	q = newQueue(t, Policy{Weight: 1}, map[uint16]Policy{1: {Reservation: 300, Weight: 1}, 3: {Weight: 100}})
	loads = []backlog{{tenant: 1, depth: 8}, {tenant: 3, depth: 8, start: 5 * time.Second}}
	s = serve(q, 1000, 7*time.Second, loads, nil)
	if got := rate(s, 1, None, 5*time.Second, 7*time.Second); got < 0.98*300 {
		t.Errorf("after weight service: %.1f ops/s, reservation 300", got)
	}
}

func TestSpareSharedByWeight(t *testing.T) {
	from, to := time.Second, 31*time.Second
	for _, c := range []struct {
		name     string
		policies map[uint16]Policy
		want     map[uint16]float64 // ops/s
	}{
		{"weights only", map[uint16]Policy{1: {Weight: 1}, 2: {Weight: 2}, 3: {Weight: 3}},
			map[uint16]float64{1: 1000.0 / 6, 2: 2000.0 / 6, 3: 3000.0 / 6}},
		// A reservation below the tenant's share changes nothing.
		{"reservation inside share", map[uint16]Policy{1: {Reservation: 100, Weight: 1}, 2: {Weight: 2}, 3: {Weight: 3}},
			map[uint16]float64{1: 1000.0 / 6, 2: 2000.0 / 6, 3: 3000.0 / 6}},
		// Above it, the tenant gets its reservation, and the others share
		// what is left by weight (mClock: max(reservation, share)).
		{"reservation above share", map[uint16]Policy{1: {Reservation: 600, Weight: 1}, 2: {Weight: 1}, 3: {Weight: 2}},
			map[uint16]float64{1: 600, 2: 400.0 / 3, 3: 800.0 / 3}},
		// A capped tenant's unused share goes to the others by weight.
		{"limit below share", map[uint16]Policy{1: {Weight: 4, Limit: 100}, 2: {Weight: 1}, 3: {Weight: 2}},
			map[uint16]float64{1: 100, 2: 300, 3: 600}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := newQueue(t, Policy{Weight: 1}, c.policies)
			loads := []backlog{{tenant: 1, depth: 8}, {tenant: 2, depth: 8}, {tenant: 3, depth: 8}}
			s := serve(q, 1000, to, loads, nil)
			for id, want := range c.want {
				near(t, "tenant "+string(rune('0'+id)), rate(s, id, None, from, to), want, 0.03)
			}
		})
	}
}

func TestLimitCaps(t *testing.T) {
	q := newQueue(t, Policy{Weight: 1}, map[uint16]Policy{1: {Weight: 10, Limit: 200}})
	loads := []backlog{{tenant: 1, depth: 8}, {tenant: 2, depth: 8}}
	s := serve(q, 1000, 10*time.Second, loads, nil)
	if n := rate(s, 1, None, 0, 10*time.Second) * 10; n > 200*10+1 {
		t.Errorf("limited tenant served %.0f in 10 s, limit 200/s", n)
	}
	near(t, "limited tenant", rate(s, 1, None, time.Second, 10*time.Second), 200, 0.02)
	near(t, "other tenant takes the rest", rate(s, 2, None, time.Second, 10*time.Second), 800, 0.02)
	if st := q.Stats(1); st.Throttled == 0 {
		t.Errorf("no throttle counted: %+v", st)
	}

	// Alone, a limited tenant waits: Pull says until when, and drops nothing.
	q = newQueue(t, Policy{Weight: 1}, map[uint16]Policy{1: {Weight: 1, Limit: 100}})
	for i := range 3 {
		q.Add(1, 1, 0, 0, uint16(i), 0)
	}
	now := time.Duration(0)
	for i := range 3 {
		item, ph, until := q.Pull(now)
		if ph == None {
			if until <= now {
				t.Fatalf("pull %d at %v: none, until %v", i, now, until)
			}
			if _, ph, _ := q.Pull(until - 1); ph != None {
				t.Fatalf("served before %v", until)
			}
			now = until
			item, ph, _ = q.Pull(now)
		}
		if ph != Weight || item != uint16(i) {
			t.Fatalf("pull %d at %v: item %d phase %v", i, now, item, ph)
		}
		if want := time.Duration(i) * 10 * time.Millisecond; now != want {
			t.Errorf("item %d served at %v, want %v", i, now, want)
		}
	}
	if _, ph, until := q.Pull(now); ph != None || until != 0 || q.Len() != 0 {
		t.Errorf("empty queue: phase %v until %v len %d", ph, until, q.Len())
	}
}

func TestIdleTenantBanksNoCredit(t *testing.T) {
	// Tenant 1 is idle for 10 s while 2 runs, then returns with a deep
	// backlog: it gets its share from the start, not 10 s of reservation or
	// weight credit.
	q := newQueue(t, Policy{Weight: 1}, map[uint16]Policy{1: {Reservation: 100, Weight: 1}})
	loads := []backlog{{tenant: 1, depth: 64, start: 10 * time.Second}, {tenant: 2, depth: 8}}
	s := serve(q, 1000, 12*time.Second, loads, nil)
	ret := 10 * time.Second
	near(t, "first 100 ms back", rate(s, 1, None, ret, ret+100*time.Millisecond), 500, 0.05)
	near(t, "first second back", rate(s, 1, None, ret, ret+time.Second), 500, 0.02)
	if r := rate(s, 1, Reservation, ret, ret+time.Second); r > 101 {
		t.Errorf("reservation phase served %.0f ops/s after idle, reservation 100", r)
	}
}

func TestPolicyChangesAtRuntime(t *testing.T) {
	q := newQueue(t, Policy{Weight: 1}, map[uint16]Policy{1: {Weight: 1, Limit: 100}})
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	events := map[time.Duration]func(time.Duration){
		sec(5): func(now time.Duration) {
			if err := q.SetPolicy(1, Policy{Weight: 1, Limit: 400}, now); err != nil {
				t.Error(err)
			}
		},
		sec(10): func(now time.Duration) {
			if err := q.SetDefault(Policy{Weight: 1, Limit: 300}, now); err != nil {
				t.Error(err)
			}
		},
		sec(15): func(now time.Duration) { q.RemovePolicy(1, now) },
	}
	loads := []backlog{{tenant: 1, depth: 8}, {tenant: 2, depth: 8}}
	s := serve(q, 1000, sec(20), loads, events)
	for _, c := range []struct {
		from   int
		t1, t2 float64
	}{{1, 100, 900}, {6, 400, 600}, {11, 400, 300}, {16, 300, 300}} {
		near(t, "tenant 1 from "+sec(c.from).String(), rate(s, 1, None, sec(c.from), sec(c.from+4)), c.t1, 0.02)
		near(t, "tenant 2 from "+sec(c.from).String(), rate(s, 2, None, sec(c.from), sec(c.from+4)), c.t2, 0.02)
	}
	if p, def := q.Policy(1); !def || p.Limit != 300 {
		t.Errorf("after RemovePolicy: %+v default=%v", p, def)
	}
	if got := q.Tenants(nil); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("Tenants = %v", got)
	}
}

func TestStats(t *testing.T) {
	q := newQueue(t, Policy{Weight: 1}, nil)
	q.Add(7, 1, 0, 0, 1, 0)
	q.Add(7, 1, 0, 0, 2, 0)
	if st := q.Stats(7); st.Queued != 2 || !st.Default {
		t.Errorf("stats %+v", st)
	}
	q.Pull(10 * time.Millisecond)
	q.Pull(30 * time.Millisecond)
	st := q.Stats(7)
	if st.Queued != 0 || st.ServedWeight != 2 || st.MeanDelay() != 20*time.Millisecond {
		t.Errorf("stats %+v mean %v", st, st.MeanDelay())
	}
	if st := q.Stats(9); st.Policy != q.Default() || !st.Default || st.Queued != 0 {
		t.Errorf("unknown tenant stats %+v", st)
	}
}
