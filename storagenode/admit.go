package storagenode

import (
	"sync"
	"time"

	"github.com/netdir/netdir/wire"
)

// admission is the capacity emulation (Options.MaxOps). Client requests
// wait for a token here, in one goroutine in front of the shards, so a
// rate-limited node still handles chain writes, acks, version answers and
// copies as they arrive: were the wait inside a shard worker, they would
// queue behind rate-limited reads, and a saturated tail would slow every
// chain it ends. Writes are admitted before reads: while a write to a hot
// key waits, the data plane keeps that key's reads on its chain.
type admission struct {
	bucket *tokenBucket
	writes chan admitted
	reads  chan admitted
}

type admitted struct {
	it item
	s  *shard
}

func newAdmission(rate float64, queueLen int) *admission {
	return &admission{
		bucket: newTokenBucket(rate, max(1, rate/100)),
		writes: make(chan admitted, queueLen),
		reads:  make(chan admitted, queueLen),
	}
}

// queue takes a client request for shard s; false if its queue is full.
func (a *admission) queue(op wire.Op, it item, s *shard) bool {
	q := a.reads
	if op != wire.OpGet {
		q = a.writes
	}
	select {
	case q <- admitted{it, s}:
		return true
	default:
		return false
	}
}

func (a *admission) len() int { return len(a.writes) + len(a.reads) }

// run admits requests at the bucket's rate, writes first, handing each to
// its shard.
func (a *admission) run(stop <-chan struct{}) {
	for {
		a.bucket.wait(stop)
		var next admitted
		select {
		case next = <-a.writes:
		default:
			select {
			case next = <-a.writes:
			case next = <-a.reads:
			case <-stop:
				return
			}
		}
		select {
		case next.s.ch <- next.it:
		case <-stop:
			return
		}
	}
}

// tokenBucket is a small rate limiter for --max-ops.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newTokenBucket(rate, burst float64) *tokenBucket {
	return &tokenBucket{rate: rate, burst: burst, tokens: burst, last: time.Now()}
}

// wait blocks until a token is available or stop closes.
func (b *tokenBucket) wait(stop <-chan struct{}) {
	b.mu.Lock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	b.tokens--
	var d time.Duration
	if b.tokens < 0 {
		d = time.Duration(-b.tokens / b.rate * float64(time.Second))
	}
	b.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
		}
	}
}
