package system

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/sched/dmclock"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// ExpQoS is issue 17's experiment: tenants with different dmClock triples
// on one cluster, one of them with its keys on 2 of the nodes, scheduled
// rank-local (every node enforces the cluster-wide triple alone, or 1/n of
// it) and globally (every node the whole triple, with the data plane's δ
// and ρ).
const ExpQoS = "qos"

// QoSMode is how the nodes apply the cluster-wide policies.
type QoSMode string

const (
	// QoSRankLocal: every node enforces the whole triple, alone (CephFS's
	// MDS QoS on every rank).
	QoSRankLocal QoSMode = "rank-local"
	// QoSRankLocalSplit: every node enforces R/n and L/n, alone: the
	// operator's workaround for rank-local.
	QoSRankLocalSplit QoSMode = "rank-local R,L/n"
	// QoSGlobal: every node enforces the whole triple with δ and ρ from
	// the data plane (dmClock's distributed form).
	QoSGlobal QoSMode = "global δ/ρ"
)

// QoSTenantSpec is a tenant of the experiment: its cluster-wide policy and
// on how many nodes its keys live (0: every node).
type QoSTenantSpec struct {
	Name   string
	Policy dmclock.Policy
	Nodes  int
}

// QoSTenants are the experiment's tenants. With 8 nodes of 500 ops/s
// (4000 in all): reservations take 1200, "capped" at most 400, and the rest
// is spare, shared by weight.
var QoSTenants = []QoSTenantSpec{
	{Name: "gold", Policy: dmclock.Policy{Reservation: 800, Weight: 1}},
	{Name: "silver", Policy: dmclock.Policy{Weight: 2}},
	{Name: "bronze", Policy: dmclock.Policy{Weight: 1}},
	{Name: "capped", Policy: dmclock.Policy{Weight: 1, Limit: 400}},
	{Name: "narrow", Policy: dmclock.Policy{Reservation: 400, Weight: 1}, Nodes: 2},
}

// QoSExperiment configures the experiment.
type QoSExperiment struct {
	Dir      string
	Nodes    int     // default 8
	NodeOps  float64 // each node's capacity (MaxOps), ops/s; default 500
	Workers  int     // closed-loop clients per tenant; default 64
	Warmup   time.Duration
	Duration time.Duration
	Modes    []QoSMode // default rank-local, rank-local split, global
	Tenants  []QoSTenantSpec
	// Live, if set, gets a line per mode as it starts.
	Live func(string)
}

// QoSTenantResult is a tenant's figures in one mode.
type QoSTenantResult struct {
	Tenant     string         `json:"tenant"`
	Policy     dmclock.Policy `json:"policy"` // cluster-wide
	Nodes      int            `json:"nodes"`
	Throughput float64        `json:"throughput_ops"`
	// ReservationMet is throughput/R (reservations only), LimitRatio
	// throughput/L (limits only).
	ReservationMet float64 `json:"reservation_met,omitempty"`
	LimitRatio     float64 `json:"limit_ratio,omitempty"`
	Throttled      uint64  `json:"throttled"`
	MeanDelayUs    float64 `json:"mean_delay_us"`
	Errors         uint64  `json:"errors"`
}

// QoSModeResult is one mode's run.
type QoSModeResult struct {
	Mode    QoSMode           `json:"mode"`
	Seconds float64           `json:"seconds"`
	Tenants []QoSTenantResult `json:"tenants"`
	// WeightError is, over the tenants with neither reservation nor limit,
	// the largest |share/weight share − 1|: how far
	// the spare capacity is from being shared by weight.
	WeightError float64 `json:"weight_error"`
}

// RunQoS runs the experiment: one cluster, one run per mode.
func RunQoS(ctx context.Context, e QoSExperiment) ([]QoSModeResult, error) {
	if e.Nodes == 0 {
		e.Nodes = 8
	}
	if e.NodeOps == 0 {
		e.NodeOps = 500
	}
	if e.Workers == 0 {
		e.Workers = 64
	}
	if e.Duration == 0 {
		e.Duration = 10 * time.Second
	}
	if e.Tenants == nil {
		e.Tenants = QoSTenants
	}
	if e.Modes == nil {
		e.Modes = []QoSMode{QoSRankLocal, QoSRankLocalSplit, QoSGlobal}
	}
	var out []QoSModeResult
	for i, mode := range e.Modes {
		if e.Live != nil {
			e.Live(fmt.Sprintf("%s: %d tenants on %d nodes of %.0f ops/s, %d clients each", mode, len(e.Tenants), e.Nodes, e.NodeOps, e.Workers))
		}
		r, err := runQoSMode(ctx, e, mode, filepath.Join(e.Dir, fmt.Sprintf("qos-%d", i)))
		if err != nil {
			return out, fmt.Errorf("%s: %w", mode, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// runQoSMode starts a cluster and its plane, sets the policies as the mode
// applies them, waits until every node has them, and drives every tenant
// backlogged.
func runQoSMode(ctx context.Context, e QoSExperiment, mode QoSMode, dir string) (QoSModeResult, error) {
	res := QoSModeResult{Mode: mode}
	c, err := cluster.Start(cluster.Options{N: e.Nodes, R: 2, PartitionBits: 6, Dir: dir,
		Controller: true, Round: 100 * time.Millisecond, Node: func(o *storagenode.Options) {
			o.MaxOps = e.NodeOps
			o.QoSRankLocal = mode != QoSGlobal
		}})
	if err != nil {
		return res, err
	}
	defer c.Close()
	p, err := c.StartPlane(ctx, cluster.PlaneConfig{
		Directory:  directory.Config{Policy: directory.PolicyReplicas}, // no promotions: keys stay on their chains
		Controller: cluster.ControllerConfig{Round: 100 * time.Millisecond, ProgramOnly: true},
	})
	if err != nil {
		return res, err
	}
	defer p.Close()
	ctl := p.Controller
	ids := make([]uint16, len(e.Tenants))
	for i, t := range e.Tenants {
		pol := t.Policy
		if mode == QoSRankLocalSplit {
			pol.Reservation /= float64(e.Nodes)
			pol.Limit /= float64(e.Nodes)
		}
		tn, err := ctl.SetQoS(t.Name, 0, pol)
		if err != nil {
			return res, err
		}
		ids[i] = tn.ID
	}
	gen := ctl.QoS().Generation
	for i := range c.N() {
		for c.Node(i).QoSGeneration() != gen {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	done := make([]atomic.Uint64, len(e.Tenants))
	errs := make([]atomic.Uint64, len(e.Tenants))
	var measuring atomic.Bool
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, t := range e.Tenants {
		keys := qosKeys(c, t, i)
		cl, err := c.Client(client.Options{Service: c.DataPlane(), Tenant: ids[i],
			Timeout: 2 * time.Second, MaxTimeout: 4 * time.Second})
		if err != nil {
			stop()
			return res, err
		}
		defer cl.Close()
		for w := range e.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := w; runCtx.Err() == nil; k += e.Workers {
					_, _, err := cl.Get(runCtx, keys[k%len(keys)])
					if !measuring.Load() {
						continue
					}
					switch {
					case err == nil || err == client.ErrNotFound:
						done[i].Add(1)
					case runCtx.Err() == nil:
						errs[i].Add(1)
					}
				}
			}()
		}
	}
	time.Sleep(e.Warmup)
	measuring.Store(true)
	start := time.Now()
	mid := qosTotals(c)
	select {
	case <-time.After(e.Duration):
	case <-ctx.Done():
	}
	measuring.Store(false)
	res.Seconds = time.Since(start).Seconds()
	end := qosTotals(c)
	stop()
	wg.Wait()
	for i, t := range e.Tenants {
		tr := QoSTenantResult{Tenant: t.Name, Policy: t.Policy, Nodes: t.Nodes, Errors: errs[i].Load(),
			Throughput: float64(done[i].Load()) / res.Seconds}
		if tr.Nodes == 0 {
			tr.Nodes = e.Nodes
		}
		if t.Policy.Reservation > 0 {
			tr.ReservationMet = tr.Throughput / t.Policy.Reservation
		}
		if t.Policy.Limit > 0 {
			tr.LimitRatio = tr.Throughput / t.Policy.Limit
		}
		a, b := mid[ids[i]], end[ids[i]]
		tr.Throttled = b.Throttled - a.Throttled
		if n := b.served() - a.served(); n > 0 {
			tr.MeanDelayUs = float64(b.Delay-a.Delay) / float64(n) / 1e3
		}
		res.Tenants = append(res.Tenants, tr)
	}
	res.WeightError = weightError(res.Tenants)
	return res, nil
}

// weightError compares the throughput of the tenants that have only a
// weight with their shares of it by weight.
func weightError(ts []QoSTenantResult) float64 {
	weightOnly := func(t QoSTenantResult) bool { return t.Policy.Reservation == 0 && t.Policy.Limit == 0 }
	var sumW, sumX float64
	for _, t := range ts {
		if weightOnly(t) {
			sumW += t.Policy.Weight
			sumX += t.Throughput
		}
	}
	worst := 0.0
	for _, t := range ts {
		if weightOnly(t) && sumX > 0 {
			share := t.Throughput / sumX / (t.Policy.Weight / sumW)
			worst = max(worst, abs(share-1))
		}
	}
	return worst
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// qosKeys are a tenant's keys: on every node, or on its first Nodes nodes
// only (keys whose chain lies within them).
func qosKeys(c *cluster.Cluster, t QoSTenantSpec, i int) [][]byte {
	var within []wire.NodeID
	if t.Nodes > 0 {
		within = c.Layout.Nodes()[:t.Nodes]
	}
	var keys [][]byte
	for k := 0; len(keys) < 256; k++ {
		key := []byte(fmt.Sprintf("/volumes/qos/%s/%d", t.Name, k))
		ok := true
		for _, n := range c.Layout.ChainOf(wire.HashKey(key)) {
			ok = ok && (within == nil || slices.Contains(within, n))
		}
		if ok {
			keys = append(keys, key)
		}
	}
	return keys
}

// qosTotal is a tenant's scheduling summed over the nodes.
type qosTotal struct {
	ServedReservation, ServedWeight, Throttled uint64
	Delay                                      time.Duration
}

func (t qosTotal) served() uint64 { return t.ServedReservation + t.ServedWeight }

func qosTotals(c *cluster.Cluster) map[uint16]qosTotal {
	out := map[uint16]qosTotal{}
	for i := range c.N() {
		for _, q := range c.Node(i).QoSStats() {
			t := out[q.Tenant]
			t.ServedReservation += q.ServedReservation
			t.ServedWeight += q.ServedWeight
			t.Throttled += q.Throttled
			t.Delay += q.Delay
			out[q.Tenant] = t
		}
	}
	return out
}
