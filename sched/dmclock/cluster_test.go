package dmclock

import (
	"fmt"
	"testing"
	"time"
)

// tally is a tenant's completions: all, and in the reservation phase.
type tally struct{ all, res uint64 }

// dataPlane keeps what issue 17's data planes keep: per tenant, its
// completions at every node, and, per tenant and node, how many it had
// completed elsewhere at its last request to that node; so it stamps each
// request's δ and ρ.
type dataPlane struct {
	done   map[uint16]tally
	doneAt map[[2]int]tally // (tenant, node)
	seen   map[[2]int]tally // elsewhere, at the last request to the node
}

func newDataPlane() *dataPlane {
	return &dataPlane{done: map[uint16]tally{}, doneAt: map[[2]int]tally{}, seen: map[[2]int]tally{}}
}

func (d *dataPlane) stamp(tenant uint16, node int) (delta, rho uint32) {
	k := [2]int{int(tenant), node}
	all, here := d.done[tenant], d.doneAt[k]
	elsewhere := tally{all.all - here.all, all.res - here.res}
	last := d.seen[k]
	d.seen[k] = elsewhere
	return uint32(elsewhere.all - last.all), uint32(elsewhere.res - last.res)
}

func (d *dataPlane) complete(tenant uint16, node int, phase Phase) {
	k := [2]int{int(tenant), node}
	all, here := d.done[tenant], d.doneAt[k]
	all.all++
	here.all++
	if phase == Reservation {
		all.res++
		here.res++
	}
	d.done[tenant], d.doneAt[k] = all, here
}

// spread is a tenant's policy and the nodes its keys live on.
type spread struct {
	tenant uint16
	policy Policy
	nodes  []int
}

// schedMode is how the nodes apply a cluster-wide policy.
type schedMode int

const (
	rankLocal      schedMode = iota // every node enforces the whole triple alone
	rankLocalSplit                  // every node enforces 1/n of it (a naive split)
	global                          // every node enforces it, with δ and ρ
)

func (m schedMode) String() string {
	return [...]string{"rank-local", "rank-local R,L/n", "global δ/ρ"}[m]
}

// runCluster runs n nodes that each pull rate ops/s for dur, with every
// tenant kept backlogged on its nodes, and returns each tenant's cluster-wide
// ops/s after the first second.
func runCluster(t *testing.T, n int, rate float64, dur time.Duration, mode schedMode, tenants []spread) map[uint16]float64 {
	t.Helper()
	queues := make([]*Queue[uint16], n)
	for i := range queues {
		queues[i] = newQueue(t, Policy{Weight: 1}, nil)
		for _, s := range tenants {
			p := s.policy
			if mode == rankLocalSplit {
				p.Reservation /= float64(n)
				p.Limit /= float64(n)
			}
			if err := queues[i].SetPolicy(s.tenant, p, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	dp := newDataPlane()
	served := map[uint16]int{}
	step := time.Duration(1e9 / rate)
	warm := time.Second
	for now := time.Duration(0); now < dur; now += step {
		for node, q := range queues {
			for _, s := range tenants {
				for _, at := range s.nodes {
					for at == node && q.TenantLen(s.tenant) < 4 {
						var delta, rho uint32
						if d, r := dp.stamp(s.tenant, node); mode == global {
							delta, rho = d, r
						}
						q.Add(s.tenant, 1, delta, rho, s.tenant, now)
					}
				}
			}
			if id, ph, _ := q.Pull(now); ph != None {
				dp.complete(id, node, ph)
				if now >= warm {
					served[id]++
				}
			}
		}
	}
	rates := map[uint16]float64{}
	for id, c := range served {
		rates[id] = float64(c) / (dur - warm).Seconds()
	}
	return rates
}

func nodesTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestGlobalQoS is the experiment of issue 17 in pure form: a tenant whose
// keys live on few of the nodes. Rank-local scheduling with the whole triple
// at every node overshoots its limit and reservation (it gets them once per
// node it reaches); split evenly over the nodes it undershoots; with δ and ρ
// every node enforces the whole triple and the cluster delivers it.
func TestGlobalQoS(t *testing.T) {
	const rate = 1000 // per node
	dur := 11 * time.Second
	// The goal for tenant, cluster-wide, is to get between lo and hi
	// times target ops/s (issue 17: reservation ≥ 0.95 R, limit ≤ 1.02 L,
	// weights within 5%).
	type want struct {
		tenant         uint16
		target, lo, hi float64
	}
	for _, c := range []struct {
		name    string
		n       int
		tenants []spread
		want    want
	}{
		// Tenant 1 would take most of its nodes by weight; its limit must
		// hold over the cluster.
		{"limit, 2 of 8", 8, []spread{
			{1, Policy{Weight: 10, Limit: 800}, []int{0, 1}},
			{2, Policy{Weight: 1}, nodesTo(8)},
			{3, Policy{Weight: 1}, nodesTo(8)},
		}, want{1, 800, 0.95, 1.02}},
		{"limit, 1 of 2", 2, []spread{
			{1, Policy{Weight: 10, Limit: 800}, []int{0}},
			{2, Policy{Weight: 1}, nodesTo(2)},
		}, want{1, 800, 0.95, 1.02}},
		// Tenant 1's weight is tiny; it lives on its reservation.
		{"reservation, 2 of 8", 8, []spread{
			{1, Policy{Reservation: 600, Weight: 1}, []int{0, 1}},
			{2, Policy{Weight: 10}, nodesTo(8)},
			{3, Policy{Weight: 10}, nodesTo(8)},
		}, want{1, 600, 0.95, 1.05}},
		{"reservation, 1 of 2", 2, []spread{
			{1, Policy{Reservation: 600, Weight: 1}, []int{0}},
			{2, Policy{Weight: 10}, nodesTo(2)},
		}, want{1, 600, 0.95, 1.05}},
		// Weights 1:3 over the cluster, tenant 2 on half the nodes: 2000
		// and 6000 of the 8000 ops/s, within 5%.
		{"weights, 4 of 8", 8, []spread{
			{2, Policy{Weight: 1}, []int{0, 1, 2, 3}},
			{3, Policy{Weight: 3}, nodesTo(8)},
		}, want{2, 2000, 0.95, 1.05}},
	} {
		t.Run(c.name, func(t *testing.T) {
			row := fmt.Sprintf("tenant %d, target %.0f ops/s:", c.want.tenant, c.want.target)
			for _, mode := range []schedMode{rankLocal, rankLocalSplit, global} {
				got := runCluster(t, c.n, rate, dur, mode, c.tenants)
				x := got[c.want.tenant] / c.want.target
				row += fmt.Sprintf(" %s %.3f×;", mode, x)
				meets := x >= c.want.lo && x <= c.want.hi
				if mode == global && !meets {
					t.Errorf("global: tenant %d got %.3f× its target, want [%.2f, %.2f]", c.want.tenant, x, c.want.lo, c.want.hi)
				}
				if mode != global && c.n == 8 && meets {
					t.Errorf("%s: tenant %d got %.3f× its target: rank-local should miss it here", mode, c.want.tenant, x)
				}
			}
			t.Log(row)
		})
	}
}
