package system

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/storagenode"
)

// The named experiments of `netdir bench --experiment` (issue 8, HATS).
const (
	// ExpCompactionBalance: request balance against latency balance while
	// one node compacts (HATS: 4.24× latency spread at 18.9% request
	// spread).
	ExpCompactionBalance = "compaction-balance"
	// ExpCompactionPacing: read throughput with compaction unthrottled
	// against paced by read share (HATS: 3.6× drop when unchecked).
	ExpCompactionPacing = "compaction-pacing"
	// ExpAblation: static → coarse → +fine → +compaction on each workload,
	// beside c3 and replicas, with compaction live (HATS: P99 −59% against
	// C3 on YCSB-B with compaction).
	ExpAblation = "ablation"
	// ExpSLO: the throughput at the same P99 SLO, c3 against the full
	// system: open-loop rates rising until p99 exceeds the SLO (HATS:
	// 2.41–2.90× c3's).
	ExpSLO = "slo"
)

// AblationRepeat is the ablation's default passes over its steps: forward,
// then in reverse (ABBA), each step on a fresh system.
const AblationRepeat = 2

// AblationStep is one run of the ablation per workload: its name in the
// results, its data path's policy (StartPlane) and whether the nodes pace
// compaction by read share at the experiment's budget (else unthrottled).
type AblationStep struct {
	Name, Policy string
	Paced        bool
}

// AblationSteps are the ablation's runs per workload, in order: the steps
// that add one HATS scheduler each, then the baselines.
var AblationSteps = []AblationStep{
	{"static", "static", false},                // the chain head only
	{"coarse", "coarse", false},                // directory and coarse epoch weights, the first weighted choice
	{"coarse+fine", "netdir", false},           // and the fine score
	{"coarse+fine+compaction", "netdir", true}, // and compaction paced by read share
	{"c3", PolicyC3, false},                    // C3 on the client, over the chain
	{"replicas", "replicas", false},            // uniform over the chain
}

// AblationFull is the step with every scheduler, set against c3 in the
// summary.
const AblationFull = "coarse+fine+compaction"

// ExperimentConfig is a named experiment.
type ExperimentConfig struct {
	Name  string
	Nodes int
	// Workloads: the ablation runs its steps on each; the compaction
	// experiments on the first.
	Workloads []bench.Workload
	// Policy is the compaction experiments' policy (default replicas); the
	// ablation runs its own steps and takes none.
	Policy string
	// Repeat runs the compared phases this many times in ABBA order
	// (compaction experiments only).
	Repeat int
	// FillRate is the background writes per compacting node (bytes/s;
	// default DefaultFillBudgets × DeviceBudget) to chain positions
	// FillTrees (default every tree), starting Lead before the workload;
	// Compactors is how many nodes write (default 1 for
	// compaction-balance, every node for compaction-pacing, half of them
	// for the ablation).
	FillRate   float64
	FillTrees  []int
	Lead       time.Duration
	Compactors int
	// Budget is the nodes' compaction budget in paced phases (bytes/s;
	// default DeviceBudget).
	Budget int64
	// DeviceBudget is the nodes' device's compaction budget
	// (device.Profile.CompactionBudget: HATS's 64 MiB/s scaled like the
	// device), which the defaults are relative to.
	DeviceBudget int64
}

// DefaultFillBudgets is the default background write rate of a compacting
// node, in compaction budgets: with the LSM's write amplification its
// compactions need several budgets of device bandwidth, so unthrottled
// they take device time from reads and paced they fall behind into debt.
const DefaultFillBudgets = 1

// ExperimentStep is one policy run of an experiment: a compaction phase of
// a policy on a workload.
type ExperimentStep struct {
	Name     string // the run's policy in the results: the policy, or the ablation's step
	Policy   string
	Workload bench.Workload
	Phase    CompactionPhase
}

// ExperimentSteps lays out an experiment's runs.
func ExperimentSteps(e ExperimentConfig) ([]ExperimentStep, error) {
	if len(e.Workloads) == 0 {
		return nil, errors.New("system: experiment without a workload")
	}
	if e.Budget == 0 {
		e.Budget = e.DeviceBudget
	}
	if e.FillRate == 0 {
		e.FillRate = DefaultFillBudgets * float64(e.DeviceBudget)
	}
	if e.Budget <= 0 || e.FillRate <= 0 {
		return nil, errors.New("system: experiment without a compaction budget or fill rate")
	}
	fill := e.fill
	compactors := e.Compactors
	if compactors == 0 && (e.Name == ExpAblation || e.Name == ExpSLO) {
		compactors = (e.Nodes + 1) / 2
	}
	var steps []ExperimentStep
	switch e.Name {
	case ExpCompactionBalance, ExpCompactionPacing:
		policy := e.Policy
		if policy == "" {
			policy = "replicas"
		}
		var phases []CompactionPhase
		if e.Name == ExpCompactionBalance {
			if compactors == 0 {
				compactors = 1
			}
			busy := fill(compactors)
			busy.Name, busy.Budget = "compacting", storagenode.Unthrottled
			phases = abba(e.Repeat, CompactionPhase{Name: "idle", Budget: storagenode.Unthrottled}, busy)
		} else {
			if compactors == 0 {
				compactors = e.Nodes
			}
			un, paced := fill(compactors), fill(compactors)
			un.Name, un.Budget = "unthrottled", storagenode.Unthrottled
			paced.Name, paced.Budget = "paced", e.Budget
			phases = append([]CompactionPhase{{Name: "idle", Budget: e.Budget}}, abba(e.Repeat, un, paced)...)
		}
		for _, ph := range phases {
			steps = append(steps, ExperimentStep{Name: policy, Policy: policy, Workload: e.Workloads[0], Phase: ph})
		}
	case ExpAblation:
		if e.Policy != "" {
			return nil, errors.New("--experiment " + ExpAblation + ": runs its own steps (no --policies)")
		}
		for _, w := range e.Workloads {
			passes := e.Repeat
			if passes <= 0 {
				passes = AblationRepeat
			}
			for pass := range passes {
				for i := range AblationSteps {
					st := AblationSteps[i]
					if pass%2 == 1 { // ABBA: every other pass in reverse
						st = AblationSteps[len(AblationSteps)-1-i]
					}
					steps = append(steps, e.ablationStep(st, w, compactors))
				}
			}
		}
	case ExpSLO:
		if e.Policy != "" {
			return nil, errors.New("--experiment " + ExpSLO + ": compares its own policies (no --policies)")
		}
		for _, name := range []string{PolicyC3, AblationFull} { // c3 first: it sets the SLO
			for _, st := range AblationSteps {
				if st.Name == name {
					steps = append(steps, e.ablationStep(st, e.Workloads[0], compactors))
				}
			}
		}
	default:
		return nil, fmt.Errorf("--experiment %q: want %s, %s, %s or %s", e.Name, ExpCompactionBalance, ExpCompactionPacing, ExpAblation, ExpSLO)
	}
	return steps, nil
}

// fill is the phase with background writes on the first k nodes.
func (e ExperimentConfig) fill(k int) CompactionPhase {
	return CompactionPhase{Fill: firstNodes(k, e.Nodes), FillRate: e.FillRate, FillTrees: e.FillTrees, Lead: e.Lead}
}

// ablationStep is step st of the ablation on w, compaction live on the
// first k nodes, paced at the experiment's budget and staggered in turns
// (sched.DefaultTurn) where st says so.
func (e ExperimentConfig) ablationStep(st AblationStep, w bench.Workload, k int) ExperimentStep {
	ph := e.fill(k)
	ph.Name, ph.Budget = st.Name, storagenode.Unthrottled
	if st.Paced {
		ph.Budget, ph.Turn = e.Budget, sched.DefaultTurn
	}
	return ExperimentStep{Name: st.Name, Policy: st.Policy, Workload: w, Phase: ph}
}

// ProbeStep is the capacity probe of the ablation and the SLO sweep: the
// step run closed loop, before the others and on a fresh system of its own,
// whose throughput sets their offered load: static for the ablation (the
// step that loads its busiest node most, so an offered load below its
// capacity saturates no step), c3 for the SLO sweep (the baseline the
// sweep's rates are relative to).
func ProbeStep(steps []ExperimentStep, name string) (ExperimentStep, error) {
	want := "static"
	if name == ExpSLO {
		want = PolicyC3
	}
	for _, st := range steps {
		if st.Name == want {
			st.Phase.Name = "probe"
			return st, nil
		}
	}
	return ExperimentStep{}, fmt.Errorf("system: %s has no %s step to probe with", name, want)
}

// RunStep runs one step of an experiment (RunCompactionPhase); a step named
// other than its policy (the ablation's) gets its name as the run's policy.
func (s *System) RunStep(ctx context.Context, st ExperimentStep, o RunOptions) (bench.Run, PhaseResult, error) {
	o.Workload = st.Workload
	run, pr, err := s.RunCompactionPhase(ctx, st.Policy, o, st.Phase)
	if err != nil {
		return run, pr, err
	}
	if st.Name != st.Policy {
		run.Note = fmt.Sprintf("data path %s; %s", st.Policy, run.Note)
		run.Policy = st.Name
	}
	return run, pr, nil
}

// ExperimentResults is the JSON of an experiment: the runs as `netdir
// bench` writes them, and each phase's per-node figures.
type ExperimentResults struct {
	Experiment string             `json:"experiment"`
	Command    string             `json:"command"`
	Runs       []bench.Run        `json:"runs"`
	Phases     []PhaseResult      `json:"phases"`
	Summary    map[string]float64 `json:"summary"`
	// The ablation and the SLO sweep (FreshExperiment): the capacity
	// probe's closed-loop ops/s, the ablation's offered load, the sweep's
	// SLO per pass, each run's offered rate and, in the sweep, its pass
	// (0-based).
	CapacityOps float64   `json:"capacity_ops,omitempty"`
	OfferedOps  float64   `json:"offered_ops,omitempty"`
	SLOus       []float64 `json:"slo_us,omitempty"`
	Rates       []float64 `json:"rates,omitempty"`
	Passes      []int     `json:"passes,omitempty"`
}

// Summarise puts the experiment's headline figures in res.Summary.
func (res *ExperimentResults) Summarise() {
	if res.Summary == nil {
		res.Summary = map[string]float64{}
	}
	switch res.Experiment {
	case ExpAblation:
		res.summariseAblation()
	case ExpSLO:
		res.summariseSLO()
	default:
		res.summarisePhases()
	}
}

func firstNodes(k, n int) []int {
	out := make([]int, min(k, n))
	for i := range out {
		out[i] = i
	}
	return out
}

// abba repeats phases a and b n times in ABBA order.
func abba(n int, a, b CompactionPhase) []CompactionPhase {
	var out []CompactionPhase
	for i := range max(n, 1) {
		if i%2 == 0 {
			out = append(out, a, b)
		} else {
			out = append(out, b, a)
		}
	}
	return out
}

// phaseMeans averages the headline figures of the phases of each name.
type phaseMeans struct {
	n                                      float64
	throughput, p99, reqSpread, latSpread  float64
	pebbleSpread, compactionMiB, throttled float64
	compactionRate                         float64
}

// summarisePhases puts the headline figures of the experiment, averaged
// over the phases of each name, in res.Summary.
func (res *ExperimentResults) summarisePhases() {
	ph := map[string]*phaseMeans{}
	for _, p := range res.Phases {
		m := ph[p.Phase]
		if m == nil {
			m = &phaseMeans{}
			ph[p.Phase] = m
		}
		m.n++
		m.throughput += p.ThroughputOps
		m.p99 += p.P99us
		m.reqSpread += p.RequestSpread
		m.latSpread += p.LatencySpread
		m.pebbleSpread += p.PebbleLatSpread
		m.compactionRate += p.CompactionMiBps
		for i := range p.NodeCompactionMiB {
			m.compactionMiB += p.NodeCompactionMiB[i]
			m.throttled += p.NodeThrottledS[i]
		}
	}
	for _, m := range ph {
		for _, x := range []*float64{&m.throughput, &m.p99, &m.reqSpread, &m.latSpread, &m.pebbleSpread, &m.compactionMiB, &m.throttled, &m.compactionRate} {
			*x /= m.n
		}
	}
	s := res.Summary
	for name, m := range ph {
		s[name+" throughput ops/s"] = m.throughput
		s[name+" p99 us"] = m.p99
		s[name+" request spread %"] = (m.reqSpread - 1) * 100
		s[name+" latency spread x"] = m.latSpread
		s[name+" Pebble read latency spread x"] = m.pebbleSpread
		s[name+" compaction MiB"] = m.compactionMiB
		s[name+" throttled s"] = m.throttled
		s[name+" compaction MiB/s"] = m.compactionRate
	}
	if idle, un, paced := ph["idle"], ph["unthrottled"], ph["paced"]; idle != nil && un != nil && paced != nil {
		if un.throughput > 0 {
			s["drop idle/unthrottled x"] = idle.throughput / un.throughput
			s["gain paced/unthrottled x"] = paced.throughput / un.throughput
		}
		if paced.throughput > 0 {
			s["drop idle/paced x"] = idle.throughput / paced.throughput
		}
	}
}
