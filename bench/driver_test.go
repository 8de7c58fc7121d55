package bench

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock jumps to whatever time the dispatcher sleeps until, and logs
// those times. Now can also tick forward on every call.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	tick    time.Duration
	sleeps  []time.Time
	onSleep func(n int)
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.tick)
	return c.now
}

func (c *fakeClock) SleepUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	c.sleeps = append(c.sleeps, t)
	n := len(c.sleeps)
	f := c.onSleep
	c.mu.Unlock()
	if f != nil {
		f(n)
	}
	return ctx.Err()
}

func TestOpenLoopPoisson(t *testing.T) {
	const rate, secs = 1000.0, 100
	src := build(t, Workload{Name: "B", Keys: 1000, Seed: 1})
	clk := newFakeClock()
	start := clk.now
	mem := NewMemTarget()
	res, err := OpenLoop(context.Background(), mem, src, Options{
		Rate: rate, Duration: secs * time.Second, Workers: 4, Backlog: 1 << 20, Clock: clk, Seed: 99,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := len(clk.sleeps)
	// The count of arrivals in the window is Poisson(λT).
	mu := rate * secs
	if math.Abs(float64(n)-mu) > 4.5*math.Sqrt(mu) {
		t.Errorf("%d arrivals in %ds at %g/s, want %g ± %.0f", n, secs, rate, mu, 4.5*math.Sqrt(mu))
	}
	if int64(n) != res.Ops+res.Errors+res.Dropped {
		t.Errorf("%d arrivals but ops %d + errors %d + dropped %d", n, res.Ops, res.Errors, res.Dropped)
	}
	if res.Dropped != 0 {
		t.Errorf("dropped %d with a large backlog", res.Dropped)
	}
	// Inter-arrival times are exponential: mean 1/λ, variance 1/λ².
	gaps := make([]float64, n)
	prev := start
	for i, at := range clk.sleeps {
		if at.Before(prev) {
			t.Fatalf("arrival %d scheduled before the previous one", i)
		}
		if at.Sub(start) >= secs*time.Second {
			t.Fatalf("arrival %d at %v, after the duration", i, at.Sub(start))
		}
		gaps[i] = at.Sub(prev).Seconds()
		prev = at
	}
	m := Mean(gaps)
	v := 0.0
	for _, g := range gaps {
		v += (g - m) * (g - m)
	}
	v /= float64(n - 1)
	if math.Abs(m*rate-1) > 4.5/math.Sqrt(float64(n)) {
		t.Errorf("mean gap %.6fs, want %.6fs", m, 1/rate)
	}
	// Var of the sample variance of Exp is 8σ⁴/n.
	if cv2 := v / (m * m); math.Abs(cv2-1) > 4.5*math.Sqrt(8/float64(n)) {
		t.Errorf("gap variance/mean² = %.4f, want 1 (exponential)", cv2)
	}
	// Counts per 1 s window: index of dispersion ≈ 1 (a fixed-interval
	// ticker would give 0). Its sampling sd is about √(2/(W−1)).
	counts := make([]float64, secs)
	for _, at := range clk.sleeps {
		counts[int(at.Sub(start)/time.Second)]++
	}
	cm := Mean(counts)
	cv := 0.0
	for _, c := range counts {
		cv += (c - cm) * (c - cm)
	}
	cv /= secs - 1
	if d := cv / cm; math.Abs(d-1) > 4.5*math.Sqrt(2.0/(secs-1)) {
		t.Errorf("index of dispersion %.3f, want 1", d)
	}
	// Every arrival reached the target.
	g, p := mem.Counts()
	if g+p != int64(n) {
		t.Errorf("target saw %d calls for %d arrivals", g+p, n)
	}
}

func TestPoissonGaps(t *testing.T) {
	p := NewPoisson(250, 3)
	const n = 100_000
	sum, sq := 0.0, 0.0
	for i := 0; i < n; i++ {
		g := p.Next()
		if g < 0 {
			t.Fatal("negative gap")
		}
		sum += g
		sq += g * g
	}
	m := sum / n
	v := sq/n - m*m
	if math.Abs(m*250-1) > 0.02 || math.Abs(v*250*250-1) > 0.05 {
		t.Errorf("mean %g var %g, want %g and %g", m, v, 1/250.0, 1/62500.0)
	}
}

func TestOpenLoopOpsBound(t *testing.T) {
	src := build(t, Workload{Name: "A", Keys: 100})
	clk := newFakeClock()
	res, err := OpenLoop(context.Background(), NewMemTarget(), src, Options{Rate: 1e4, Ops: 500, Clock: clk, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(clk.sleeps) != 500 || res.Ops+res.Errors+res.Dropped != 500 {
		t.Errorf("%d arrivals, ops %d errors %d dropped %d", len(clk.sleeps), res.Ops, res.Errors, res.Dropped)
	}
}

// blockTarget blocks every call until release is closed.
type blockTarget struct {
	release chan struct{}
	calls   atomic.Int64
}

func (b *blockTarget) Get(ctx context.Context, key []byte) ([]byte, uint64, error) {
	b.calls.Add(1)
	select {
	case <-b.release:
		return nil, 1, nil
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

func (b *blockTarget) Put(ctx context.Context, key, value []byte) (uint64, error) {
	_, v, err := b.Get(ctx, key)
	return v, err
}

func TestOpenLoopDropsInsteadOfBlocking(t *testing.T) {
	src := build(t, Workload{Name: "C", Keys: 100})
	clk := newFakeClock()
	bt := &blockTarget{release: make(chan struct{})}
	clk.onSleep = func(n int) {
		if n == 20 {
			close(bt.release)
		}
	}
	res, err := OpenLoop(context.Background(), bt, src, Options{
		Rate: 1000, Ops: 20, Workers: 1, Backlog: 2, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	// One in flight, two queued while the target blocks; the arrival
	// process goes on and drops the rest (at most one more slot frees when
	// the target is released at the last arrival).
	if res.Ops+res.Errors+res.Dropped != 20 || res.Dropped < 16 || res.Ops > 4 {
		t.Errorf("ops %d errors %d dropped %d", res.Ops, res.Errors, res.Dropped)
	}
	// Latency runs from the scheduled arrival: queued ops waited.
	if res.Latency.TotalCount() != res.Ops {
		t.Errorf("latencies %d for %d ops", res.Latency.TotalCount(), res.Ops)
	}
}

func TestClosedLoopOpsBound(t *testing.T) {
	for _, name := range []string{"A", "F"} {
		src := build(t, Workload{Name: name, Keys: 200, Seed: 1})
		mem := NewMemTarget()
		if failed, first, err := Load(context.Background(), mem, src, 3, 0); failed != 0 || first != nil || err != nil {
			t.Fatalf("load: %d failed (first: %v), %v", failed, first, err)
		}
		if mem.Len() != 200 {
			t.Fatalf("loaded %d keys", mem.Len())
		}
		g0, p0 := mem.Counts()
		res, err := ClosedLoop(context.Background(), mem, src, Options{Workers: 4, Ops: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if res.Ops != 1000 || res.Errors != 0 {
			t.Errorf("%s: ops %d errors %d", name, res.Ops, res.Errors)
		}
		g, p := mem.Counts()
		g, p = g-g0, p-p0
		rmw := res.Kinds["rmw"].Ops
		// Each op is one call, except read-modify-write, which is two.
		if g+p != 1000+rmw {
			t.Errorf("%s: %d gets + %d puts for 1000 ops with %d rmw", name, g, p, rmw)
		}
		if name == "F" && (rmw == 0 || p != rmw) {
			t.Errorf("F: rmw %d, puts %d", rmw, p)
		}
		if res.Latency.TotalCount() != 1000 {
			t.Errorf("%s: %d latencies", name, res.Latency.TotalCount())
		}
	}
}

func TestClosedLoopDurationBound(t *testing.T) {
	src := build(t, Workload{Name: "C", Keys: 100})
	clk := newFakeClock()
	clk.tick = time.Millisecond // every Now advances the clock
	res, err := ClosedLoop(context.Background(), NewMemTarget(), src, Options{
		Workers: 2, Duration: 5 * time.Second, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each op reads the clock three times: about 5000/3 ops in all.
	if res.Ops+res.Errors < 1000 || res.Ops+res.Errors > 2000 {
		t.Errorf("%d ops in 5 s of 1 ms clock ticks", res.Ops+res.Errors)
	}
	if res.Elapsed < 5*time.Second || res.Elapsed > 5*time.Second+10*time.Millisecond {
		t.Errorf("elapsed %v", res.Elapsed)
	}
	if res.Errors != res.Ops+res.Errors { // keys never loaded: reads miss
		t.Errorf("reads of absent keys succeeded: ops %d", res.Ops)
	}
}

func TestDriversNeedBounds(t *testing.T) {
	src := build(t, Workload{Name: "C", Keys: 100})
	if _, err := ClosedLoop(context.Background(), NewMemTarget(), src, Options{}); err == nil {
		t.Error("unbounded closed loop accepted")
	}
	if _, err := OpenLoop(context.Background(), NewMemTarget(), src, Options{Ops: 10}); err == nil {
		t.Error("open loop without a rate accepted")
	}
}

func TestContextStops(t *testing.T) {
	src := build(t, Workload{Name: "C", Keys: 100})
	bt := &blockTarget{release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var res *Result
	var err error
	go func() {
		defer close(done)
		res, err = ClosedLoop(ctx, bt, src, Options{Workers: 3, Ops: 1 << 40})
	}()
	for i := 0; i < 1000 && bt.calls.Load() < 3; i++ {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("closed loop did not stop on cancel")
	}
	if !errors.Is(err, context.Canceled) || res == nil || res.Errors != 3 {
		t.Errorf("res %+v err %v", res, err)
	}
}

func TestOpTimeout(t *testing.T) {
	src := build(t, Workload{Name: "C", Keys: 100})
	bt := &blockTarget{release: make(chan struct{})}
	res, err := ClosedLoop(context.Background(), bt, src, Options{Workers: 2, Ops: 4, OpTimeout: time.Millisecond})
	if err != nil || res.Errors != 4 || res.Ops != 0 {
		t.Errorf("res %+v err %v", res, err)
	}
}

func TestMemTarget(t *testing.T) {
	m := NewMemTarget()
	ctx := context.Background()
	val := []byte("v1")
	if v, err := m.Put(ctx, []byte("k"), val); v != 1 || err != nil {
		t.Fatalf("put: %d %v", v, err)
	}
	val[0] = 'X' // the target keeps a copy
	if v, err := m.Put(ctx, []byte("k"), []byte("v2")); v != 2 || err != nil {
		t.Fatalf("put: %d %v", v, err)
	}
	got, ver, err := m.Get(ctx, []byte("k"))
	if string(got) != "v2" || ver != 2 || err != nil {
		t.Errorf("get %q %d %v", got, ver, err)
	}
	if _, _, err := m.Get(ctx, []byte("nope")); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing key: %v", err)
	}
}
