package system

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/wire"
)

// WarmupSuffix ends the policy label of live frames during the warm-up.
const WarmupSuffix = " (warm-up)"

// RunOptions shape one policy run.
type RunOptions struct {
	Workload bench.Workload
	// Workers: closed loop, the operations in flight; open loop, the most in
	// flight (bench.Options.Workers).
	Workers int
	// Rate > 0 runs open loop (Poisson arrivals at Rate ops/s); 0 closed loop.
	Rate float64
	// Warmup runs the workload unmeasured first, so that the controller can
	// promote the hot keys and caches warm up (default none).
	Warmup   time.Duration
	Duration time.Duration // measured time (required)
	// OpTimeout bounds each operation (default 5 s).
	OpTimeout time.Duration
	// Live, if set, gets a frame about once a second, during warm-up too
	// (Policy then ends in WarmupSuffix).
	Live func(bench.LiveStats)
	Note string
}

// Run runs one policy on the system and summarises it: a fresh plane
// (StartPlane), the warm-up, then the measured run, whose node loads,
// latencies and directory counters are the deltas over the measured run.
func (s *System) Run(ctx context.Context, policy string, o RunOptions) (bench.Run, error) {
	src, err := o.prepare()
	if err != nil {
		return bench.Run{}, err
	}
	p, err := s.StartPlane(ctx, policy)
	if err != nil {
		return bench.Run{}, err
	}
	defer p.Close()
	run, err := measure(ctx, p, policy, src, o)
	if err != nil {
		return bench.Run{}, err
	}
	run.CapacityOps = s.NodeCapacity(run.DeviceReadsPerGet)
	run.Device = s.cfg.Device.Name
	run.Control = s.controlName(policy)
	if d := s.drain(ctx, drainLimit); d != "" {
		run.Note = bench.JoinNote(run.Note, d)
	}
	if err := p.Close(); err != nil {
		return run, fmt.Errorf("system: after %s: %w", policy, err)
	}
	return run, nil
}

// drainLimit bounds how long Run waits for the nodes to empty their
// queues after a run.
const drainLimit = 2 * time.Minute

// drain waits, up to limit, until no node has a request queued or in
// service, and says how long that took if it took more than a second. A
// run that overloaded a node leaves it a backlog (requests the clients
// gave up on and resent): the plane's clean-up (demotes at the chain
// heads) queues behind it, and the next run would start against it.
func (s *System) drain(ctx context.Context, limit time.Duration) string {
	start := time.Now()
	most := 0
	for {
		backlog := 0
		for i := range s.N() {
			if n := s.Node(i); n != nil {
				backlog += int(n.Stats().Load)
			}
		}
		most = max(most, backlog)
		waited := time.Since(start)
		switch {
		case backlog == 0 && waited < time.Second:
			return ""
		case backlog == 0:
			return fmt.Sprintf("after the run the nodes took %.1f s to serve a backlog of %d requests", waited.Seconds(), most)
		case waited >= limit || ctx.Err() != nil:
			return fmt.Sprintf("after the run the nodes still held %d requests after %.0f s", backlog, waited.Seconds())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// prepare checks o, fills in its defaults and builds its workload.
func (o *RunOptions) prepare() (*bench.Source, error) {
	if o.Duration <= 0 {
		return nil, errors.New("system: RunOptions.Duration must be set")
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 5 * time.Second
	}
	return o.Workload.Build()
}

// sampledTarget is what a measured run drives and reads: a policy's plane
// on the in-process system, or a running deployment (Remote).
type sampledTarget interface {
	Target() bench.Target
	Sample() Sample
	trackHot(key []byte)
}

// measure runs the warm-up and then the measured run of o on p, and
// summarises the measured run: node loads, latencies and directory counters
// are the deltas over it.
func measure(ctx context.Context, p sampledTarget, policy string, src *bench.Source, o RunOptions) (bench.Run, error) {
	var (
		cur   atomic.Pointer[liveState]
		stop  = make(chan struct{})
		liveW sync.WaitGroup
	)
	if o.Live != nil {
		liveW.Add(1)
		go func() {
			defer liveW.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			prev := p.Sample()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-t.C:
				}
				ls := cur.Load()
				if ls == nil {
					continue
				}
				now := p.Sample()
				dt := now.At.Sub(prev.At).Seconds()
				loads := make([]float64, len(now.Requests))
				for i := range loads {
					if dt > 0 {
						loads[i] = float64(now.Requests[i]-prev.Requests[i]) / dt
					}
				}
				iv := ls.rec.Interval(now.At)
				o.Live(bench.LiveStats{
					Policy: ls.label, Elapsed: now.At.Sub(ls.start), NodeLoads: loads,
					Throughput: iv.Throughput, P99: iv.P99, DirSize: now.DirSize,
				})
				prev = now
			}
		}()
	}
	defer func() {
		close(stop)
		liveW.Wait()
	}()
	drive := func(label string, d time.Duration) (*bench.Result, error) {
		now := time.Now()
		rec := bench.NewRecorder(now)
		cur.Store(&liveState{label: label, start: now, rec: rec})
		bo := bench.Options{Workers: o.Workers, Rate: o.Rate, Duration: d, OpTimeout: o.OpTimeout,
			Seed: o.Workload.Seed, Recorder: rec}
		if o.Rate > 0 {
			return bench.OpenLoop(ctx, p.Target(), src, bo)
		}
		return bench.ClosedLoop(ctx, p.Target(), src, bo)
	}
	p.trackHot(src.Key(0))
	if o.Warmup > 0 {
		if _, err := drive(policy+WarmupSuffix, o.Warmup); err != nil {
			return bench.Run{}, err
		}
	}
	before := p.Sample()
	cpu0, _ := bench.ReadProcStats()
	res, err := drive(policy, o.Duration)
	after := p.Sample()
	cpu1, _ := bench.ReadProcStats()
	if err != nil {
		return bench.Run{}, err
	}
	nodes := make([]bench.NodeStat, len(after.Requests))
	for i := range nodes {
		nodes[i].Requests = float64(after.Requests[i] - before.Requests[i])
		if r := after.Reads[i] - before.Reads[i]; r > 0 {
			nodes[i].MeanLatency = time.Duration((after.LatSum[i] - before.LatSum[i]) / r)
		}
		if i < min(len(after.NodeTime), len(before.NodeTime)) {
			after.NodeTime[i].stat(before.NodeTime[i], after.At.Sub(before.At), &nodes[i])
		}
	}
	info := bench.RunInfo{
		Policy: policy, Workload: src.Workload(), Nodes: nodes, DirSize: after.DirSize,
		CPU: cpu1.Since(cpu0), Note: o.Note,
	}
	if h, m := after.Hits-before.Hits, after.Misses-before.Misses; h+m > 0 {
		info.DirHitRate = float64(h) / float64(h+m)
		info.SwitchedFraction = float64(after.Switched-before.Switched) / float64(h+m)
	}
	if la := loadAvg(); la != "" {
		info.Note = bench.JoinNote(info.Note, "load average "+la)
	}
	if d := vsbNote(before, after); d != "" {
		info.Note = bench.JoinNote(info.Note, d)
	}
	run := bench.Summarize(info, res)
	hotKeyFigures(&run, before, after)
	var gets, reads uint64
	for i := range min(len(after.Gets), len(before.Gets), len(after.DeviceReads), len(before.DeviceReads)) {
		gets += after.Gets[i] - before.Gets[i]
		reads += after.DeviceReads[i] - before.DeviceReads[i]
	}
	if gets > 0 {
		run.DeviceReadsPerGet = float64(reads) / float64(gets)
	}
	return run, nil
}

// hotKeyFigures sets run's figures of the hottest key's reads over its
// locations, from the measured run's samples: the locations are the key's
// at the end (after.HotLocs) and any other node that served it meanwhile
// (an extra since dropped), counted as an extra.
func hotKeyFigures(run *bench.Run, before, after Sample) {
	if len(after.HotLocs) == 0 || len(before.HotReads) != len(after.HotReads) {
		return
	}
	delta := func(id wire.NodeID) float64 {
		i := int(id) - 1
		if i < 0 || i >= len(after.HotReads) {
			return 0
		}
		return float64(after.HotReads[i] - before.HotReads[i])
	}
	locs := slices.Clone(after.HotLocs)
	for i := range after.HotReads {
		if id := wire.NodeID(i + 1); !slices.Contains(locs, id) && delta(id) > 0 {
			locs = append(locs, id)
		}
	}
	reads := make([]float64, len(locs))
	var total, extras float64
	for j, id := range locs {
		reads[j] = delta(id)
		total += reads[j]
		if j >= after.HotR {
			extras += reads[j]
		}
	}
	run.HotKeyLocations = len(locs)
	run.HotKeyReadMaxOverMean = bench.MaxOverMean(reads)
	if total > 0 {
		run.HotKeyExtraShare = extras / total
	}
}

type liveState struct {
	label string
	start time.Time
	rec   *bench.Recorder
}

// controlName says how the run's data plane was programmed.
func (s *System) controlName(policy string) string {
	switch {
	case policy == PolicyC3:
		return "client"
	case s.schema != nil:
		return "p4runtime"
	default:
		return "control-api"
	}
}

// loadAvg is the machine's 1-minute load average at the end of a run, for the
// run's note: the system shares the machine, and its figures move with it.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}
