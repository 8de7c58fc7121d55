package dmclock

import (
	"fmt"
	"math"
)

// Policy is a tenant's QoS triple. Rates are in cost units per second
// (a GET costs 1, see Cost).
type Policy struct {
	Reservation float64 // guaranteed rate; 0 means none
	Weight      float64 // share of the capacity left after reservations; > 0
	Limit       float64 // rate cap; 0 means none
}

// Validate refuses triples the scheduler cannot honour: a weight that is not
// positive, a negative or non-finite rate, or a reservation above the limit.
func (p Policy) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(p.Weight) || p.Weight <= 0:
		return fmt.Errorf("dmclock: weight %v must be a positive number", p.Weight)
	case !finite(p.Reservation) || p.Reservation < 0:
		return fmt.Errorf("dmclock: reservation %v must be a rate ≥ 0 (0: none)", p.Reservation)
	case !finite(p.Limit) || p.Limit < 0:
		return fmt.Errorf("dmclock: limit %v must be a rate ≥ 0 (0: none)", p.Limit)
	case p.Limit > 0 && p.Reservation > p.Limit:
		return fmt.Errorf("dmclock: reservation %v above limit %v", p.Reservation, p.Limit)
	}
	return nil
}

// CostUnit is the value size that one cost unit buys: a GET costs 1, a write
// 1 plus one unit per CostUnit bytes, until a device model prices ops by
// device time.
const CostUnit = 4096

// Cost is an op's cost: 1 for a read, 1 + size/CostUnit for a write.
func Cost(write bool, size int) uint32 {
	if !write || size <= 0 {
		return 1
	}
	return 1 + uint32(min(size/CostUnit, math.MaxUint32-1))
}

// spacing is the tag spacing per cost unit at rate ops/s, in nanoseconds;
// 0 when the rate is 0 (no reservation, or no limit).
func spacing(rate float64) float64 {
	if rate == 0 {
		return 0
	}
	return 1e9 / rate
}
