package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"
)

// Target is the system under test as the drivers see it: a client of the
// cluster, or anything else with a key-value interface.
type Target interface {
	Get(ctx context.Context, key []byte) (value []byte, version uint64, err error)
	Put(ctx context.Context, key, value []byte) (uint64, error)
}

// Clock is the drivers' source of time; tests inject a fake one.
type Clock interface {
	Now() time.Time
	// SleepUntil returns at t, or earlier with ctx's error.
	SleepUntil(ctx context.Context, t time.Time) error
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// SleepUntil sleeps until t or until ctx is done.
func (SystemClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Options bound and shape a driver run. At least one of Ops and Duration must
// be set; the context bounds the run as well.
type Options struct {
	// Closed loop: the number of workers, each with one operation in flight
	// (default 16). Open loop: the most operations in flight (default 64).
	Workers int
	// Open loop: the mean Poisson arrival rate in operations per second.
	Rate float64
	// Ops stops the run after this many operations are issued (0: no bound).
	Ops int64
	// Duration stops issuing operations after this long (0: no bound).
	Duration time.Duration
	// Open loop: arrivals that may wait for a free worker; an arrival beyond
	// that is dropped and counted in Result.Dropped, so that a slow target
	// cannot slow the arrival process down (default 1024).
	Backlog int
	// OpTimeout bounds each operation (0: only the run's context).
	OpTimeout time.Duration
	// Seed seeds the open-loop arrival process.
	Seed int64
	// Clock defaults to SystemClock.
	Clock Clock
	// Recorder receives every operation; pass one to read live intervals
	// while the run goes on (default: a fresh one).
	Recorder *Recorder
}

func (o *Options) defaults(open bool) error {
	if o.Ops <= 0 && o.Duration <= 0 {
		return errors.New("bench: set Ops or Duration to bound the run")
	}
	if o.Workers <= 0 {
		o.Workers = 16
		if open {
			o.Workers = 64
		}
	}
	if o.Backlog <= 0 {
		o.Backlog = 1024
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	if open && (o.Rate <= 0 || o.Rate > 1e9) {
		return fmt.Errorf("bench: open loop needs a Rate in (0, 1e9] ops/s, got %g", o.Rate)
	}
	return nil
}

// execute runs one operation against t.
func execute(ctx context.Context, t Target, op Op, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	switch op.Kind {
	case OpRead, OpScan:
		_, _, err := t.Get(ctx, op.Key)
		return err
	case OpUpdate, OpInsert:
		_, err := t.Put(ctx, op.Key, op.Value)
		return err
	case OpReadModifyWrite:
		if _, _, err := t.Get(ctx, op.Key); err != nil {
			return err
		}
		_, err := t.Put(ctx, op.Key, op.Value)
		return err
	}
	return fmt.Errorf("bench: unknown op kind %v", op.Kind)
}

// ClosedLoop runs o.Workers workers, each issuing its next operation as soon
// as the previous one completes, until o.Ops operations have been issued,
// o.Duration has passed or ctx is done. Worker i draws from src.Stream(i). If
// ctx ends the run, the partial result is returned with ctx's error.
func ClosedLoop(ctx context.Context, t Target, src *Source, o Options) (*Result, error) {
	if err := o.defaults(false); err != nil {
		return nil, err
	}
	clk := o.Clock
	start := clk.Now()
	rec := o.Recorder
	if rec == nil {
		rec = NewRecorder(start)
	}
	var end time.Time
	if o.Duration > 0 {
		end = start.Add(o.Duration)
	}
	var issued atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < o.Workers; w++ {
		st := src.Stream(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if o.Duration > 0 && !clk.Now().Before(end) {
					return
				}
				if o.Ops > 0 && issued.Add(1) > o.Ops {
					return
				}
				op := st.Next()
				t0 := clk.Now()
				err := execute(ctx, t, op, o.OpTimeout)
				rec.Record(op.Kind, clk.Now().Sub(t0), err)
				st.Done(op)
			}
		}()
	}
	wg.Wait()
	res := rec.Snapshot()
	res.Elapsed = clk.Now().Sub(start)
	return res, ctx.Err()
}

// Poisson is a Poisson arrival process: exponential inter-arrival times with
// mean 1/rate.
type Poisson struct {
	rate float64
	r    *rand.Rand
}

// NewPoisson returns a Poisson process of rate arrivals per second.
func NewPoisson(rate float64, seed int64) *Poisson {
	return &Poisson{rate: rate, r: rand.New(rand.NewSource(seed))}
}

// Next returns the time to the next arrival in seconds.
func (p *Poisson) Next() float64 { return p.r.ExpFloat64() / p.rate }

// OpenLoop issues operations at Poisson arrival times of mean rate o.Rate,
// independently of completions, with at most o.Workers in flight and
// o.Backlog waiting; latency runs from each arrival's scheduled time, so
// queueing in the driver counts (no coordinated omission). It stops issuing
// after o.Ops arrivals or o.Duration, then waits for the operations in flight
// and queued. If ctx ends the run, the partial result is returned with ctx's
// error.
func OpenLoop(ctx context.Context, t Target, src *Source, o Options) (*Result, error) {
	if err := o.defaults(true); err != nil {
		return nil, err
	}
	clk := o.Clock
	start := clk.Now()
	rec := o.Recorder
	if rec == nil {
		rec = NewRecorder(start)
	}
	jobs := make(chan time.Time, o.Backlog)
	var wg sync.WaitGroup
	for w := 0; w < o.Workers; w++ {
		st := src.Stream(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range jobs {
				if ctx.Err() != nil {
					continue // drain without issuing
				}
				op := st.Next()
				err := execute(ctx, t, op, o.OpTimeout)
				rec.Record(op.Kind, clk.Now().Sub(at), err)
				st.Done(op)
			}
		}()
	}
	arr := NewPoisson(o.Rate, o.Seed)
	var dropped int64
	offset := 0.0 // seconds since start, summed in float to avoid drift
	for i := int64(0); o.Ops <= 0 || i < o.Ops; i++ {
		offset += arr.Next()
		d := time.Duration(offset * 1e9)
		if o.Duration > 0 && d >= o.Duration {
			break
		}
		at := start.Add(d)
		if clk.SleepUntil(ctx, at) != nil {
			break
		}
		select {
		case jobs <- at:
		default:
			dropped++
		}
	}
	close(jobs)
	wg.Wait()
	res := rec.Snapshot()
	res.Dropped = dropped
	res.Elapsed = clk.Now().Sub(start)
	return res, ctx.Err()
}

// Load preloads the workload's Keys keys with values of the workload's
// sizes, using workers goroutines. It returns the number of puts that
// failed, the first failure's error, and ctx's error if ctx ended it.
func Load(ctx context.Context, t Target, src *Source, workers int, opTimeout time.Duration) (failed int64, first, err error) {
	if workers <= 0 {
		workers = 16
	}
	n := src.Workload().Keys
	var next, fails atomic.Int64
	var firstOnce sync.Once
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		st := src.Stream(-1 - w) // streams apart from the run's
		wg.Add(1)
		go func() {
			defer wg.Done()
			var key []byte
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				key = appendKey(key[:0], src.w.KeyPrefix, i)
				op := Op{Kind: OpInsert, Index: i, Key: key, Value: st.value(st.ValueSize())}
				if err := execute(ctx, t, op, opTimeout); err != nil {
					fails.Add(1)
					firstOnce.Do(func() { first = fmt.Errorf("key %s: %w", key, err) })
				}
			}
		}()
	}
	wg.Wait()
	return fails.Load(), first, ctx.Err()
}

// ErrNotFound is returned by MemTarget.Get for a missing key.
var ErrNotFound = errors.New("bench: key not found")

// MemTarget is an in-memory Target: a map with versions. It measures the
// harness itself and serves tests.
type MemTarget struct {
	mu   sync.RWMutex
	m    map[string]memEntry
	gets atomic.Int64
	puts atomic.Int64
}

type memEntry struct {
	val []byte
	ver uint64
}

// NewMemTarget returns an empty in-memory target.
func NewMemTarget() *MemTarget { return &MemTarget{m: make(map[string]memEntry)} }

// Get returns the value and version of key.
func (m *MemTarget) Get(ctx context.Context, key []byte) ([]byte, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	m.gets.Add(1)
	m.mu.RLock()
	e, ok := m.m[string(key)]
	m.mu.RUnlock()
	if !ok {
		return nil, 0, ErrNotFound
	}
	return e.val, e.ver, nil
}

// Put stores a copy of value under key with the next version.
func (m *MemTarget) Put(ctx context.Context, key, value []byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.puts.Add(1)
	v := append([]byte(nil), value...)
	m.mu.Lock()
	e := m.m[string(key)]
	e.ver++
	e.val = v
	m.m[string(key)] = e
	m.mu.Unlock()
	return e.ver, nil
}

// Len is the number of keys stored.
func (m *MemTarget) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.m)
}

// Counts returns the number of Get and Put calls served.
func (m *MemTarget) Counts() (gets, puts int64) { return m.gets.Load(), m.puts.Load() }
