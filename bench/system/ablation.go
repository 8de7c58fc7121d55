package system

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/netdir/netdir/bench"
)

// Defaults of FreshExperiment.
const (
	// DefaultAblationLoad is the ablation's offered load, as a fraction of
	// the static step's closed-loop capacity: every step stays below
	// saturation, so that p99 compares schedulers, not queues that grow
	// without bound.
	DefaultAblationLoad = 0.6
	// DefaultSLOLoad is the SLO sweep's first rate, as a fraction of c3's
	// closed-loop capacity; each further level is DefaultSLOGrowth times
	// the last.
	DefaultSLOLoad   = 0.4
	DefaultSLOGrowth = 1.3
	DefaultSLOLevels = 7
	// DefaultSLOFactor sets the SLO: this many times c3's p99 at the
	// sweep's first (lowest) rate.
	DefaultSLOFactor = 2
	// DefaultSLOPasses is how many times the SLO sweep runs, each pass
	// with its own SLO and stop decisions: where one run per level decides
	// where a policy stops, a single sweep's ratio is as noisy as one run's
	// p99 (BENCHMARKS.md, HATS (d)).
	DefaultSLOPasses = 2
	// DefaultProbe is the capacity probe's measured time (after a warm-up
	// of a third of it).
	DefaultProbe = 9 * time.Second
	// sloDelivered is the share of the offered rate a level must serve to
	// meet the SLO: an open loop that falls behind is saturated, whatever
	// its p99 says about the requests it did complete.
	sloDelivered = 0.9
)

// FreshExperiment is the ablation or the SLO sweep, each step on a fresh
// system (Fresh), at open-loop rates relative to a capacity probe run
// first.
type FreshExperiment struct {
	Name  string           // ExpAblation or ExpSLO
	Steps []ExperimentStep // ExperimentSteps
	// Run is every step's options; Run.Rate > 0 fixes the ablation's
	// offered load (or the sweep's first rate) and skips the probe.
	Run RunOptions
	// Load is the ablation's offered load, or the sweep's first rate, as a
	// fraction of the probed capacity (defaults DefaultAblationLoad,
	// DefaultSLOLoad).
	Load  float64
	Probe time.Duration // the probe's measured time (default DefaultProbe)
	// The sweep: at most Levels rates, each Growth times the last; the SLO
	// is SLOFactor × c3's p99 at the first; Passes sweeps (default
	// DefaultSLOPasses), each with its own SLO.
	Levels            int
	Growth, SLOFactor float64
	Passes            int
	// OnRun, if set, gets every run as it ends (the probe's too).
	OnRun func(st ExperimentStep, run bench.Run, pr PhaseResult)
}

func (x *FreshExperiment) defaults() {
	if x.Load <= 0 {
		x.Load = DefaultAblationLoad
		if x.Name == ExpSLO {
			x.Load = DefaultSLOLoad
		}
	}
	if x.Probe <= 0 {
		x.Probe = DefaultProbe
	}
	if x.Levels <= 0 {
		x.Levels = DefaultSLOLevels
	}
	if x.Growth <= 1 {
		x.Growth = DefaultSLOGrowth
	}
	if x.SLOFactor <= 0 {
		x.SLOFactor = DefaultSLOFactor
	}
	if x.Passes <= 0 {
		x.Passes = DefaultSLOPasses
	}
}

// Run runs the experiment: the probe (unless Run.Rate is set), then the
// ablation's steps at one offered load, or the sweep's levels.
func (f *Fresh) Run(ctx context.Context, x FreshExperiment) (ExperimentResults, error) {
	x.defaults()
	res := ExperimentResults{Experiment: x.Name, Summary: map[string]float64{}}
	if len(x.Steps) == 0 {
		return res, errors.New("system: experiment without steps")
	}
	rate := x.Run.Rate
	if rate <= 0 {
		pst, err := ProbeStep(x.Steps, x.Name)
		if err != nil {
			return res, err
		}
		o := x.Run
		o.Rate, o.Workers = 0, min(max(o.Workers, 1), 64)
		o.Warmup, o.Duration = x.Probe/3, x.Probe
		run, pr, err := f.RunStep(ctx, pst, o)
		if err != nil {
			return res, fmt.Errorf("system: capacity probe: %w", err)
		}
		run.Policy += " (probe)"
		if x.OnRun != nil {
			x.OnRun(pst, run, pr)
		}
		res.CapacityOps = run.ThroughputOps
		if res.CapacityOps <= 0 {
			return res, errors.New("system: the capacity probe served nothing")
		}
		rate = x.Load * res.CapacityOps
	}
	res.OfferedOps = rate
	if x.Name == ExpSLO && x.Steps[0].Policy != PolicyC3 {
		return res, errors.New("system: the SLO sweep's first step must be c3")
	}
	pass := 0
	step := func(st ExperimentStep, r float64) (bench.Run, error) {
		o := x.Run
		o.Rate = r
		run, pr, err := f.RunStep(ctx, st, o)
		if err != nil {
			return run, err
		}
		res.Runs = append(res.Runs, run)
		res.Phases = append(res.Phases, pr)
		res.Rates = append(res.Rates, r)
		if x.Name == ExpSLO {
			res.Passes = append(res.Passes, pass)
		}
		if x.OnRun != nil {
			x.OnRun(st, run, pr)
		}
		return run, nil
	}
	if x.Name != ExpSLO {
		for _, st := range x.Steps {
			if _, err := step(st, rate); err != nil {
				return res, err
			}
		}
		res.Summarise()
		return res, nil
	}
	// The sweep, Passes times: per level every policy still meeting the
	// pass's SLO, c3 first at the first level (it sets the SLO), then in
	// alternating order.
	for pass = range x.Passes {
		failed := make([]bool, len(x.Steps))
		res.SLOus = append(res.SLOus, 0)
		for lvl := range x.Levels {
			r := rate * math.Pow(x.Growth, float64(lvl))
			for _, i := range sweepOrder(x.Steps, lvl) {
				if failed[i] {
					continue
				}
				run, err := step(x.Steps[i], r)
				if err != nil {
					return res, err
				}
				if lvl == 0 && x.Steps[i].Policy == PolicyC3 {
					res.SLOus[pass] = x.SLOFactor * run.P99us
				}
				failed[i] = !meetsSLO(run, r, res.SLOus[pass])
			}
			if !slices.Contains(failed, false) {
				break
			}
		}
	}
	res.Summarise()
	return res, nil
}

// sweepOrder is the order of the steps at level lvl of the SLO sweep: c3
// first at level 0, then reversed every other level.
func sweepOrder(steps []ExperimentStep, lvl int) []int {
	var order []int
	for i, st := range steps {
		if st.Policy == PolicyC3 {
			order = append([]int{i}, order...)
		} else {
			order = append(order, i)
		}
	}
	if lvl%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// meetsSLO: a run at offered rate r met the SLO if its p99 is within it
// and it served the rate.
func meetsSLO(run bench.Run, r, slo float64) bool {
	return run.P99us <= slo && run.ThroughputOps >= sloDelivered*r
}

// stepMeans averages each step's headline figures over its repeats.
type stepMeans struct {
	n, p99, throughput, cov, offered float64
	p99s                             []float64
}

// summariseAblation puts, per workload, each step's p99, throughput and
// node latency CoV averaged over its passes in res.Summary, and the full
// system's p99 over c3's, from the means and per pass (the goal: at most
// 0.40 on YCSB-B).
func (res *ExperimentResults) summariseAblation() {
	s := res.Summary
	m := map[[2]string]*stepMeans{}
	for _, r := range res.Runs {
		k := [2]string{r.Workload, r.Policy}
		if m[k] == nil {
			m[k] = &stepMeans{}
		}
		x := m[k]
		x.n++
		x.p99 += r.P99us
		x.throughput += r.ThroughputOps
		x.cov += r.NodeLatencyCoV
		x.p99s = append(x.p99s, r.P99us)
	}
	for k, x := range m {
		s[k[0]+" "+k[1]+" p99 us"] = x.p99 / x.n
		s[k[0]+" "+k[1]+" throughput ops/s"] = x.throughput / x.n
		s[k[0]+" "+k[1]+" node latency CoV"] = x.cov / x.n
	}
	for k, full := range m {
		c3 := m[[2]string{k[0], PolicyC3}]
		if k[1] != AblationFull || c3 == nil || c3.p99 <= 0 {
			continue
		}
		s[k[0]+" p99 "+AblationFull+"/c3 x"] = full.p99 / c3.p99
		for i := range min(len(full.p99s), len(c3.p99s)) {
			if c3.p99s[i] > 0 {
				s[fmt.Sprintf("%s p99 %s/c3 x, pass %d", k[0], AblationFull, i+1)] = full.p99s[i] / c3.p99s[i]
			}
		}
	}
	if res.CapacityOps > 0 {
		s["probe capacity ops/s"] = res.CapacityOps
	}
	if res.OfferedOps > 0 {
		s["offered ops/s"] = res.OfferedOps
	}
}

// summariseSLO puts, per pass of the sweep and averaged over them, the
// SLO, each policy's highest throughput among the rates that met it, and
// the full system's over c3's in res.Summary. A policy that met the SLO at
// a pass's last rate gets "… (at the last rate)" too: its figure is then a
// lower bound.
func (res *ExperimentResults) summariseSLO() {
	s := res.Summary
	if res.CapacityOps > 0 {
		s["probe capacity ops/s"] = res.CapacityOps
	}
	passes := max(len(res.SLOus), 1)
	passOf := func(i int) int {
		if i < len(res.Passes) {
			return res.Passes[i]
		}
		return 0
	}
	slo := func(p int) float64 {
		if p < len(res.SLOus) {
			return res.SLOus[p]
		}
		return 0
	}
	mean := map[string]float64{}
	var meanSLO float64
	for p := range passes {
		best := map[string]float64{}
		var topRate float64
		for i, r := range res.Rates {
			if passOf(i) == p {
				topRate = max(topRate, r)
			}
		}
		top := map[string]bool{}
		for i, r := range res.Runs {
			if passOf(i) != p {
				continue
			}
			best[r.Policy] = max(best[r.Policy], 0)
			if i < len(res.Rates) && meetsSLO(r, res.Rates[i], slo(p)) {
				best[r.Policy] = max(best[r.Policy], r.ThroughputOps)
				top[r.Policy] = top[r.Policy] || res.Rates[i] == topRate
			}
		}
		prefix := fmt.Sprintf("pass %d ", p+1)
		s[prefix+"slo p99 us"] = slo(p)
		meanSLO += slo(p) / float64(passes)
		for pol, b := range best {
			s[prefix+pol+" throughput at SLO ops/s"] = b
			mean[pol] += b / float64(passes)
			if top[pol] {
				s[pol+" met the SLO at the last rate"] = 1
			}
		}
		if c3 := best[PolicyC3]; c3 > 0 {
			s[prefix+"throughput at SLO "+AblationFull+"/c3 x"] = best[AblationFull] / c3
		}
	}
	s["slo p99 us"] = meanSLO
	for pol, b := range mean {
		s[pol+" throughput at SLO ops/s"] = b
	}
	if c3 := mean[PolicyC3]; c3 > 0 {
		s["throughput at SLO "+AblationFull+"/c3 x"] = mean[AblationFull] / c3
	}
}
