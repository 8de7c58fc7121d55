package dmclock

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func randPolicy(r *rand.Rand) Policy {
	p := Policy{Weight: 0.1 + 10*r.Float64()}
	if r.IntN(2) == 0 {
		p.Reservation = 1 + 200*r.Float64()
	}
	if r.IntN(2) == 0 {
		p.Limit = p.Reservation + 1 + 300*r.Float64()
	}
	return p
}

// served is one request that a random schedule served.
type served struct {
	at          time.Duration
	units       float64 // δ + cost: what its tags account for
	limit       float64 // the tenant's limit when it was served
	policyEpoch int
}

// TestRandomSchedules checks the invariants on random arrivals, costs, δ/ρ,
// pull times and policy changes:
//   - every request is served once, in its tenant's order, and Pull serves
//     nothing only when nothing is due;
//   - Pull's choice is dmClock's: the earliest due R tag, else the lowest P
//     tag under the limit, never a request whose L tag is not due;
//   - tags never go back: each tenant's previous R, P and L tags and the
//     queue's virtual time are monotone;
//   - a limit holds: over any window that starts at one of a tenant's
//     services, it gets at most L × the window plus one request.
func TestRandomSchedules(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 1))
	for round := range 300 {
		q, err := New[int](randPolicy(r))
		if err != nil {
			t.Fatal(err)
		}
		ntenants := 1 + r.IntN(6)
		for id := range ntenants {
			if r.IntN(2) == 0 {
				if err := q.SetPolicy(uint16(id), randPolicy(r), 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		var (
			now       time.Duration
			next      int                  // next item
			queued    = map[uint16][]int{} // per tenant, in order
			units     = map[int]float64{}
			tenantOf  = map[int]uint16{}
			history   = map[uint16][]served{}
			epochs    = map[uint16]int{}
			policies  = map[uint16]Policy{}
			lastPrevs = map[uint16][3]float64{}
			lastV     = math.Inf(-1)
		)
		noteEpochs := func() {
			for id := range uint16(ntenants) {
				if p, _ := q.Policy(id); p != policies[id] {
					policies[id] = p
					epochs[id]++
				}
			}
		}
		noteEpochs()
		check := func() {
			q.tenants.each(func(id uint16, tn *tenant[int]) {
				prev := [3]float64{tn.prevR, tn.prevP, tn.prevL}
				if last, ok := lastPrevs[id]; ok {
					for i := range prev {
						if prev[i] < last[i] {
							t.Fatalf("round %d: tenant %d tag %d went back: %v -> %v", round, id, i, last[i], prev[i])
						}
					}
				}
				lastPrevs[id] = prev
			})
			if q.vtime < lastV {
				t.Fatalf("round %d: vtime went back", round)
			}
			lastV = q.vtime
		}
		pull := func() (until time.Duration, ok bool) {
			heads := append([]head[int](nil), q.heads...)
			item, ph, until := q.Pull(now)
			tnow := float64(now)
			var due, resDue bool
			minR, minP := math.Inf(1), math.Inf(1)
			for _, h := range heads {
				if h.l <= tnow {
					due = true
					minP = min(minP, h.p)
					if h.r <= tnow {
						resDue = true
						minR = min(minR, h.r)
					}
				}
			}
			if ph == None {
				if due {
					t.Fatalf("round %d at %v: nothing served, but a request was due", round, now)
				}
				if len(heads) > 0 && until <= now || len(heads) == 0 && until != 0 {
					t.Fatalf("round %d at %v: until %v with %d heads", round, now, until, len(heads))
				}
				return until, false
			}
			id := tenantOf[item]
			if len(queued[id]) == 0 || queued[id][0] != item {
				t.Fatalf("round %d: served item %d of tenant %d, queue %v", round, item, id, queued[id])
			}
			queued[id] = queued[id][1:]
			var h head[int]
			for _, x := range heads {
				if x.t == q.tenants.get(id) {
					h = x
				}
			}
			switch {
			case h.l > tnow:
				t.Fatalf("round %d: served tenant %d before its limit tag", round, id)
			case ph == Reservation && h.r != minR:
				t.Fatalf("round %d: reservation phase served R %v, earliest due %v", round, h.r, minR)
			case ph == Weight && (resDue || h.p != minP):
				t.Fatalf("round %d: weight phase served P %v (lowest %v), reservation due %v", round, h.p, minP, resDue)
			}
			history[id] = append(history[id], served{now, units[item], policies[id].Limit, epochs[id]})
			check()
			return 0, true
		}
		for range 200 + r.IntN(200) {
			now += time.Duration(r.IntN(int(5 * time.Millisecond)))
			switch x := r.IntN(20); {
			case x < 9:
				id := uint16(r.IntN(ntenants))
				cost := uint32(1 + r.IntN(4))
				delta := uint32(r.IntN(4))
				rho := uint32(r.IntN(int(delta) + 1))
				q.Add(id, cost, delta, rho, next, now)
				queued[id] = append(queued[id], next)
				units[next] = float64(delta + cost)
				tenantOf[next] = id
				next++
				check()
			case x < 18:
				pull()
			case x == 18:
				if err := q.SetPolicy(uint16(r.IntN(ntenants)), randPolicy(r), now); err != nil {
					t.Fatal(err)
				}
				noteEpochs()
				check()
			default:
				if r.IntN(2) == 0 {
					q.RemovePolicy(uint16(r.IntN(ntenants)), now)
				} else if err := q.SetDefault(randPolicy(r), now); err != nil {
					t.Fatal(err)
				}
				noteEpochs()
				check()
			}
		}
		// Drain: nothing is lost, whatever the limits.
		for q.Len() > 0 {
			if until, ok := pull(); !ok {
				now = until
			}
		}
		for id, left := range queued {
			if len(left) > 0 {
				t.Fatalf("round %d: tenant %d's %v never served", round, id, left)
			}
		}
		for id, h := range history {
			for i := range h {
				sum := 0.0
				for m := i + 1; m < len(h) && h[m].policyEpoch == h[i].policyEpoch; m++ {
					if h[i].limit == 0 {
						break
					}
					sum += h[m].units
					window := (h[m].at - h[i].at).Seconds()
					if sum > h[i].limit*window+h[i+1].units+1e-6 {
						t.Fatalf("round %d: tenant %d got %.1f units in %.4fs after a service, limit %.1f/s",
							round, id, sum, window, h[i].limit)
					}
				}
			}
		}
	}
}
