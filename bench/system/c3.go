package system

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// C3 (Suresh et al., "C3: Cutting Tail Latency in Cloud Data Stores via
// Adaptive Replica Selection", NSDI'15) ranks the replicas of a key on the
// client. Per server s the client keeps exponentially weighted moving
// averages (α = 0.9 on the old value, as in the paper) of the response time
// R̄_s, the queue size q̄_s the server reports and its service time 1/μ̄_s, and
// the number os_s of its own requests outstanding at s. It estimates the
// queue a new request would meet as q̂_s = 1 + os_s·n + q̄_s (n: the number of
// clients; concurrency compensation) and sends the request to the replica of
// least score
//
//	Ψ_s = R̄_s − 1/μ̄_s + q̂_s³/μ̄_s
//
// (the cubic penalty on queue size).
//
// Here:
//   - the replicas are the key's CRAQ chain, all of which serve linearizable
//     reads; writes go to the chain head as in every policy;
//   - q_s is the load (queue depth) every netdir reply carries;
//   - netdir replies do not carry a service time, so 1/μ_s is estimated from
//     each reply as R/(1+q): the response time shared by the requests the
//     server had queued when it answered;
//   - all workers of the process are one C3 client (n = 1): os_s counts every
//     worker's requests outstanding at s;
//   - C3's second half, cubic rate control with backpressure, is omitted:
//     the bench's own concurrency and rate bound what each client sends.
const (
	c3Alpha   = 0.9 // weight of the old value in every EWMA
	c3Clients = 1   // n
	// c3Timeout bounds the direct read before the fallback through the
	// client library; as long as the other clients' first timeout, since a
	// read queued at a busy node is still served, and a resend would only add
	// to that node's queue.
	c3Timeout = clientTimeout
)

type c3Server struct {
	outstanding atomic.Int64

	mu      sync.Mutex
	learnt  bool
	r, q, s float64 // EWMA response time (ns), queue size, service time (ns)
}

func (c *c3Server) score() float64 {
	c.mu.Lock()
	r, q, s, ok := c.r, c.q, c.s, c.learnt
	c.mu.Unlock()
	if !ok {
		return math.Inf(-1) // unexplored servers first
	}
	qh := 1 + float64(c.outstanding.Load())*c3Clients + q
	return r - s + qh*qh*qh*s
}

func (c *c3Server) learn(rt time.Duration, queue uint16) {
	r := float64(rt)
	q := float64(queue)
	s := r / (1 + q)
	c.mu.Lock()
	if !c.learnt {
		c.r, c.q, c.s, c.learnt = r, q, s, true
	} else {
		c.r = c3Alpha*c.r + (1-c3Alpha)*r
		c.q = c3Alpha*c.q + (1-c3Alpha)*q
		c.s = c3Alpha*c.s + (1-c3Alpha)*s
	}
	c.mu.Unlock()
}

// c3Target is the bench.Target of policy c3: reads go straight to the chain
// member C3 ranks best, writes to the head through a direct-mode client
// (which also serves as the fallback for any read that fails).
type c3Target struct {
	lay     *layout.Map
	cl      *client.Client
	acct    *accounting
	servers []c3Server
	conn    *client.Conn // reads to the member C3 picks
}

func newC3Target(lay *layout.Map, cl *client.Client, acct *accounting) (*c3Target, error) {
	conn, err := client.Listen()
	if err != nil {
		return nil, err
	}
	return &c3Target{lay: lay, cl: cl, acct: acct, servers: make([]c3Server, len(lay.Nodes())), conn: conn}, nil
}

func (t *c3Target) server(id wire.NodeID) *c3Server {
	i := int(id) - 1
	if i < 0 || i >= len(t.servers) {
		return nil
	}
	return &t.servers[i]
}

// choose returns the chain member of least score, ties broken at random.
func (t *c3Target) choose(chain []wire.NodeID) wire.NodeID {
	best, bestScore, ties := chain[0], math.Inf(1), 0
	for _, id := range chain {
		sv := t.server(id)
		if sv == nil {
			continue
		}
		sc := sv.score()
		switch {
		case sc < bestScore:
			best, bestScore, ties = id, sc, 1
		case sc == bestScore:
			ties++
			if rand.IntN(ties) == 0 {
				best = id
			}
		}
	}
	return best
}

func (t *c3Target) Get(ctx context.Context, key []byte) ([]byte, uint64, error) {
	h := wire.HashKey(key)
	chain := t.lay.ChainOf(h)
	if len(chain) > 0 {
		id := t.choose(chain)
		if sv := t.server(id); sv != nil {
			addr, _ := t.lay.Addr(id)
			sv.outstanding.Add(1)
			t0 := time.Now()
			req := wire.Packet{Header: wire.Header{Op: wire.OpGet, ReqID: rand.Uint64() | 1, KeyHash: h, Epoch: t.lay.Epoch()}, Key: key}
			p, err := t.conn.Call(ctx, addr, &req, client.Retry{Timeout: c3Timeout, Tries: 1})
			rt := time.Since(t0)
			sv.outstanding.Add(-1)
			if err == nil && p.Op == wire.OpGetReply {
				sv.learn(rt, p.Load)
				t.acct.read(key, p.Node, rt)
				if p.Code == wire.CodeNotFound {
					return nil, p.Stamp, client.ErrNotFound
				}
				return p.Value, p.Stamp, nil
			}
			if err == nil {
				sv.learn(rt, p.Load) // an error reply still tells the queue
			} else if ctx.Err() != nil {
				return nil, 0, err
			} else {
				sv.learn(c3Timeout, 0) // timed out: a response time of the timeout
			}
		}
	}
	t0 := time.Now()
	r, err := t.cl.GetResult(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	t.acct.read(key, r.Node, time.Since(t0))
	if r.Code == wire.CodeNotFound {
		return nil, r.Version, client.ErrNotFound
	}
	return r.Value, r.Version, nil
}

func (t *c3Target) Put(ctx context.Context, key, val []byte) (uint64, error) {
	v, err := t.cl.Put(ctx, key, val)
	return v, err
}

func (t *c3Target) Close() {
	t.conn.Close()
	t.cl.Close()
}
