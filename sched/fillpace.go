package sched

import "time"

// FillPace is the copy rate of a fill (a spare, or a node rejoining as
// tail, catching up from its predecessor while the chain serves clients).
// The fill is a scavenger, in the manner of LEDBAT (RFC 6817): every chunk
// it copies waits in the same queues as the chain's client requests (the
// predecessor's shards and socket, its own shards), so a chunk's delay
// above the least delay seen lately (the base: a chunk on idle queues) is
// queueing that the clients pay too. While that excess stays within
// Target the rate grows by Max/16 a chunk; above it the rate halves, at
// most once per Target, so one slow chunk is not counted twice. The rate
// stays within [Min, Max]: a fill always progresses, and never above the
// operator's limit.
//
// The base is the least delay over the current and the previous window of
// FillBaseWindow, so that it follows a change of machine (a node moved, a
// slower disk) but not the fill's own queueing, which lasts less.
type FillPace struct {
	Max, Min float64       // bytes/s
	Target   time.Duration // queueing tolerated above the base

	rate             float64
	base, prevBase   time.Duration // least delay of the current and the previous window
	windows          int           // windows begun
	windowStart, cut time.Time
}

// FillBaseWindow is the span of one base window.
const FillBaseWindow = 5 * time.Second

// NewFillPace starts at a quarter of max: the first chunks measure the
// base before the rate reaches the limit.
func NewFillPace(hi, lo float64, target time.Duration) *FillPace {
	lo = max(0, min(lo, hi))
	return &FillPace{Max: hi, Min: lo, Target: target, rate: max(lo, hi/4)}
}

// Rate is the current copy rate in bytes/s.
func (p *FillPace) Rate() float64 { return p.rate }

// Observe takes the delay of one chunk (its round trip and the time to
// store it) at now and returns the new rate.
func (p *FillPace) Observe(now time.Time, delay time.Duration) float64 {
	if delay < 0 {
		delay = 0
	}
	if p.windows == 0 || now.Sub(p.windowStart) >= FillBaseWindow {
		p.prevBase, p.base, p.windowStart = p.base, delay, now
		p.windows++
	}
	p.base = min(p.base, delay)
	base := p.base
	if p.windows > 1 {
		base = min(base, p.prevBase)
	}
	if delay-base > p.Target {
		if p.cut.IsZero() || now.Sub(p.cut) >= p.Target {
			p.rate = max(p.Min, p.rate/2)
			p.cut = now
		}
		return p.rate
	}
	p.rate = min(p.Max, p.rate+p.Max/16)
	return p.rate
}
