// Package client is netdir's Go client: Get, Put and Delete with a context,
// each returning the key's version.
//
// A client talks to the service address (a data plane, which routes by its
// directory and partition table) or, when it has no service address, to the
// storage nodes directly, computing each key's chain from the layout.
//
// Request ids are random. Retries are safe because the chain head
// deduplicates writes by request id:
//   - a GET retry draws a fresh id (reads are idempotent, and a fresh id
//     gives the data plane a fresh split bucket);
//   - a write retry after a timeout, queue-full or unavailable keeps its id,
//     so that a write that was applied but whose reply was lost is answered
//     from the head's dedup table and never applied twice;
//   - a write refused with stale-version or retry draws a NEW id: the head
//     remembers the refusal under the old id and would repeat it, and nothing
//     was applied under it, so a new id cannot double-apply;
//   - wrong-node (a key the chosen node does not hold, e.g. a hash
//     collision in the directory or a dropped extra copy) retries on the
//     home path: straight to the chain (head for writes), bypassing the data
//     plane's directory.
//
// When the context ends before a write's outcome is known, the error is the
// context's: the write may or may not have been applied.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/wire"
)

// ErrNotFound is returned by Get for an absent (or deleted) key.
var ErrNotFound = errors.New("netdir: not found")

// Options configure a client. At least one of Service and Layout is needed.
type Options struct {
	// Service is the data plane's address. Empty: talk to nodes directly.
	Service string
	// Layout is the node table and partition map: needed for direct mode
	// and for retrying wrong-node answers on the home path.
	Layout *layout.Map
	// Timeout is the first attempt's timeout; later attempts double it up to
	// MaxTimeout. Defaults 50 ms and 800 ms.
	Timeout    time.Duration
	MaxTimeout time.Duration
	// Backoff after queue-full, unavailable or stale-epoch; doubles up to
	// 16×. Default 2 ms.
	Backoff time.Duration
	// Tenant is stamped on every request (the id `netdir ctl qos set`
	// registered), except on keys under one of Subvolumes.
	Tenant uint16
	// Subvolumes maps key prefixes to tenants, like CephFS subvolume
	// roots: {"/volumes/grp/a/": 3} stamps tenant 3 on every key under
	// that root. The longest matching prefix wins.
	Subvolumes map[string]uint16
	// Epoch sent on requests (0: the layout's, or none).
	Epoch uint32
	// Refresh, if set, returns the newest layout: the client calls it when
	// a node answers stale-epoch or wrong-node, or does not answer (it may
	// have been spliced out of its chains), at most every RefreshEvery,
	// and takes a layout of a newer epoch.
	Refresh func(context.Context) (*layout.Map, error)
	// StaleOK asks for bounded-staleness reads (FlagStaleOK).
	StaleOK bool
	// Auth is the cluster key, for the control ops (Promote, Demote,
	// NodeStats): nodes that hold a key refuse them unsealed. GET, PUT
	// and DEL need none.
	Auth *nodeauth.Auth
}

// Client is safe for concurrent use.
type Client struct {
	opts    Options
	lay     atomic.Pointer[layout.Map] // Options.Layout, then Refresh's newer ones
	epoch   atomic.Uint32              // sent on requests
	service netip.AddrPort
	// refreshing is held by the one goroutine calling Options.Refresh;
	// refreshed is when it last returned.
	refreshing sync.Mutex
	refreshed  time.Time
	conn       *Conn
	roots      []string  // Subvolumes' prefixes, longest first
	scratch    sync.Pool // *[]byte: reply buffers, so that an operation allocates nothing
}

// New opens a client socket on an ephemeral loopback-or-any port.
func New(o Options) (*Client, error) {
	if o.Service == "" && o.Layout == nil {
		return nil, errors.New("client: need a service address or a layout")
	}
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = 800 * time.Millisecond
	}
	if o.Backoff <= 0 {
		o.Backoff = 2 * time.Millisecond
	}
	if o.Epoch == 0 && o.Layout != nil {
		o.Epoch = o.Layout.Epoch()
	}
	c := &Client{opts: o, roots: slices.Collect(maps.Keys(o.Subvolumes))}
	slices.SortFunc(c.roots, func(a, b string) int { return len(b) - len(a) })
	c.lay.Store(o.Layout)
	c.epoch.Store(o.Epoch)
	if o.Service != "" {
		ap, err := netip.ParseAddrPort(o.Service)
		if err != nil {
			return nil, fmt.Errorf("client: service: %w", err)
		}
		c.service = ap
	}
	conn, err := Listen()
	if err != nil {
		return nil, err
	}
	conn.SetAuth(o.Auth)
	c.conn = conn
	return c, nil
}

// RefreshEvery is the least time between two calls of Options.Refresh.
const RefreshEvery = 100 * time.Millisecond

// layout is the newest layout the client has, nil in service-only mode.
func (c *Client) layout() *layout.Map { return c.lay.Load() }

// refresh takes a newer layout from Options.Refresh, unless another
// goroutine is at it or it was asked within RefreshEvery.
func (c *Client) refresh(ctx context.Context) {
	if c.opts.Refresh == nil || !c.refreshing.TryLock() {
		return
	}
	defer c.refreshing.Unlock()
	if time.Since(c.refreshed) < RefreshEvery {
		return
	}
	m, err := c.opts.Refresh(ctx)
	c.refreshed = time.Now()
	if err != nil || m == nil {
		return
	}
	if cur := c.layout(); cur == nil || m.Epoch() > cur.Epoch() {
		c.lay.Store(m)
		c.epoch.Store(m.Epoch())
	}
}

// Close closes the socket.
func (c *Client) Close() error { return c.conn.Close() }

// Result is what a reply said.
type Result struct {
	Code    wire.Code
	Version uint64
	Node    wire.NodeID
	Load    uint16
	Value   []byte
}

func newID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

func (c *Client) packet(op wire.Op, reqid uint64, key, val []byte, h wire.KeyHash) wire.Packet {
	p := wire.Packet{Header: wire.Header{Op: op, Tenant: c.tenantOf(key), ReqID: reqid, KeyHash: h, Epoch: c.epoch.Load()}, Key: key, Value: val}
	if op == wire.OpGet && c.opts.StaleOK {
		p.Flags |= wire.FlagStaleOK
	}
	return p
}

// tenantOf is the tenant of key: its subvolume's, or Options.Tenant.
func (c *Client) tenantOf(key []byte) uint16 {
	for _, r := range c.roots {
		if len(key) >= len(r) && string(key[:len(r)]) == r {
			return c.opts.Subvolumes[r]
		}
	}
	return c.opts.Tenant
}

// chain is the key's chain from the layout, or nil.
func (c *Client) chain(h wire.KeyHash) []wire.NodeID {
	if c.layout() == nil {
		return nil
	}
	return c.layout().ChainOf(h)
}

// readSet is the chain members that serve the key's reads (a spare still
// filling does not), or nil.
func (c *Client) readSet(h wire.KeyHash) []wire.NodeID {
	m := c.layout()
	if m == nil {
		return nil
	}
	return m.ReadSet(m.Partition(h))
}

func (c *Client) nodeAddr(id wire.NodeID) netip.AddrPort {
	a, _ := c.layout().Addr(id)
	return a
}

// permanent reports codes that no retry can fix.
func permanent(code wire.Code) bool {
	switch code {
	case wire.CodeMalformed, wire.CodeUnknownOp, wire.CodeKeyTooLarge, wire.CodeValTooLarge,
		wire.CodeHashMismatch, wire.CodeInternal:
		return true
	}
	return false
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	d = time.Duration(rand.Int64N(int64(d)) + int64(d)/2)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func checkSizes(key, val []byte) error {
	if len(key) > wire.MaxKey {
		return wire.CodeKeyTooLarge
	}
	if len(val) > wire.MaxValue {
		return wire.CodeValTooLarge
	}
	return nil
}

// Get reads key. It returns the value and its version, or ErrNotFound (with
// the version of the deletion, or 0 for a key never written).
func (c *Client) Get(ctx context.Context, key []byte) ([]byte, uint64, error) {
	v, ver, err := c.AppendGet(ctx, []byte{}, key)
	if err != nil {
		return nil, ver, err
	}
	return v, ver, nil
}

// AppendGet is Get appending the value to dst; it returns dst unchanged on
// an error. It allocates nothing when dst has room for the value.
func (c *Client) AppendGet(ctx context.Context, dst, key []byte) ([]byte, uint64, error) {
	bp := c.borrow()
	defer c.scratch.Put(bp)
	var p wire.Packet
	var err error
	*bp, err = c.get(ctx, key, &p, *bp)
	if err != nil {
		return dst, 0, err
	}
	if p.Code == wire.CodeNotFound {
		return dst, p.Stamp, ErrNotFound
	}
	return append(dst, p.Value...), p.Stamp, nil
}

// GetResult is Get returning the whole reply (node, load).
func (c *Client) GetResult(ctx context.Context, key []byte) (*Result, error) {
	var p wire.Packet
	if _, err := c.get(ctx, key, &p, nil); err != nil {
		return nil, err
	}
	return &Result{Code: p.Code, Version: p.Stamp, Node: p.Node, Load: p.Load, Value: p.Value}, nil
}

func (c *Client) borrow() *[]byte {
	if bp, ok := c.scratch.Get().(*[]byte); ok {
		return bp
	}
	return new([]byte)
}

// get runs a GET to its reply, decoded into p, whose Key and Value point into
// the returned buffer (buf's storage when it has room).
func (c *Client) get(ctx context.Context, key []byte, p *wire.Packet, buf []byte) ([]byte, error) {
	if err := checkSizes(key, nil); err != nil {
		return buf, err
	}
	h := wire.HashKey(key)
	timeout, backoff := c.opts.Timeout, c.opts.Backoff
	direct := !c.service.IsValid()
	start := rand.IntN(8)
	tried := tries{start: time.Now(), last: ErrTimeout}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return buf, fmt.Errorf("netdir get: %w", tried.noAnswer(err))
		}
		addr := c.service
		if direct {
			ch := c.readSet(h)
			if len(ch) == 0 {
				return buf, errors.New("netdir get: no chain for key")
			}
			addr = c.nodeAddr(ch[(start+attempt)%len(ch)])
		}
		req := c.packet(wire.OpGet, newID(), key, nil, h)
		var err error
		tried.add(addr)
		buf, err = c.conn.Exchange(ctx, addr, &req, Retry{Timeout: timeout, Tries: 1}, p, buf)
		if err == ErrTimeout {
			c.refresh(ctx)
			tried.last = err
			timeout = min(2*timeout, c.opts.MaxTimeout)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return buf, fmt.Errorf("netdir get: %w", tried.noAnswer(err))
			}
			return buf, err
		}
		if p.Op == wire.OpGetReply {
			return buf, nil
		}
		tried.last = p.Code
		switch {
		case permanent(p.Code):
			return buf, p.Code
		case p.Code == wire.CodeWrongNode:
			c.refresh(ctx)
			if c.layout() != nil {
				direct = true // home path: the chain itself
			}
		case p.Code == wire.CodeUnavailable && c.layout() != nil && !direct:
			direct = true
			fallthrough
		default: // queue-full, unavailable, stale-epoch
			if p.Code == wire.CodeStaleEpoch {
				c.refresh(ctx)
			}
			if err := c.sleep(ctx, backoff); err != nil {
				return buf, fmt.Errorf("netdir get: %w", tried.noAnswer(err))
			}
			backoff = min(2*backoff, 16*c.opts.Backoff)
		}
	}
}

// Put writes key=val and returns the version it committed at.
func (c *Client) Put(ctx context.Context, key, val []byte) (uint64, error) {
	return c.write(ctx, wire.OpPut, key, val)
}

// Delete deletes key and returns the version of the deletion.
func (c *Client) Delete(ctx context.Context, key []byte) (uint64, error) {
	return c.write(ctx, wire.OpDel, key, nil)
}

func (c *Client) write(ctx context.Context, op wire.Op, key, val []byte) (uint64, error) {
	if err := checkSizes(key, val); err != nil {
		return 0, err
	}
	bp := c.borrow()
	defer c.scratch.Put(bp)
	var p wire.Packet
	h := wire.HashKey(key)
	timeout, backoff := c.opts.Timeout, c.opts.Backoff
	direct := !c.service.IsValid()
	id := newID()
	tried := tries{start: time.Now(), last: ErrTimeout}
	for {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("netdir %s: outcome unknown: %w", op, tried.noAnswer(err))
		}
		addr := c.service
		if direct {
			ch := c.chain(h)
			if len(ch) == 0 {
				return 0, errors.New("netdir: no chain for key")
			}
			addr = c.nodeAddr(ch[0])
		}
		req := c.packet(op, id, key, val, h)
		var err error
		tried.add(addr)
		*bp, err = c.conn.Exchange(ctx, addr, &req, Retry{Timeout: timeout, Tries: 1}, &p, *bp)
		if err == ErrTimeout {
			c.refresh(ctx)
			tried.last = err
			timeout = min(2*timeout, c.opts.MaxTimeout)
			continue // same id: the head dedups
		}
		if err != nil {
			if ctx.Err() != nil {
				err = tried.noAnswer(err)
			}
			return 0, fmt.Errorf("netdir %s: outcome unknown: %w", op, err)
		}
		if p.Op == op.Reply() {
			if p.Code != wire.CodeOK {
				return 0, p.Code
			}
			return p.Stamp, nil
		}
		tried.last = p.Code
		switch {
		case permanent(p.Code):
			return 0, p.Code
		case p.Code == wire.CodeStaleVersion:
			id = newID() // refused under the old id, which the head remembers
		case p.Code == wire.CodeRetry:
			id = newID()
			if c.service.IsValid() {
				direct = false // through the data plane, to be stamped
			}
			if err := c.sleep(ctx, backoff); err != nil {
				return 0, fmt.Errorf("netdir %s: %w", op, tried.noAnswer(err))
			}
			backoff = min(2*backoff, 16*c.opts.Backoff)
		case p.Code == wire.CodeWrongNode:
			c.refresh(ctx)
			if c.layout() != nil {
				direct = true
			}
		default: // queue-full, unavailable, stale-epoch: same id
			if p.Code == wire.CodeStaleEpoch {
				c.refresh(ctx)
			}
			if err := c.sleep(ctx, backoff); err != nil {
				return 0, fmt.Errorf("netdir %s: outcome unknown: %w", op, tried.noAnswer(err))
			}
			backoff = min(2*backoff, 16*c.opts.Backoff)
		}
	}
}

// NoAnswerError is a request's error when its context ended before an
// answer came: where it was sent, how often, for how long, and the last
// thing heard (a timeout, or a node's error code). It wraps the context's
// error.
type NoAnswerError struct {
	Addrs   []netip.AddrPort
	Tries   int
	Elapsed time.Duration
	Last    error
	Err     error
}

func (e *NoAnswerError) Error() string {
	if e.Tries == 0 {
		return fmt.Sprintf("%v before any try", e.Err)
	}
	addrs := make([]string, len(e.Addrs))
	for i, a := range e.Addrs {
		addrs[i] = a.String()
	}
	last := ""
	if e.Last != nil && e.Last != ErrTimeout {
		last = fmt.Sprintf(" (last: %v)", e.Last)
	}
	return fmt.Sprintf("no answer from %s after %d tries in %v%s", strings.Join(addrs, ", "), e.Tries,
		e.Elapsed.Round(100*time.Millisecond), last)
}

func (e *NoAnswerError) Unwrap() error { return e.Err }

// tries counts a request's tries, for NoAnswerError. It keeps the first
// few addresses in an array, so that a request that is answered allocates
// nothing for it.
type tries struct {
	addrs [4]netip.AddrPort
	naddr int
	n     int
	start time.Time
	last  error
}

func (t *tries) add(a netip.AddrPort) {
	t.n++
	if t.naddr < len(t.addrs) && !slices.Contains(t.addrs[:t.naddr], a) {
		t.addrs[t.naddr] = a
		t.naddr++
	}
}

func (t *tries) noAnswer(ctxErr error) error {
	return &NoAnswerError{Addrs: slices.Clone(t.addrs[:t.naddr]), Tries: t.n, Elapsed: time.Since(t.start), Last: t.last, Err: ctxErr}
}

// Promote tells key's chain head that the key is hot and names the extra
// nodes (outside the chain) that get copies. It needs the layout.
func (c *Client) Promote(ctx context.Context, key []byte, extras []wire.NodeID) (uint64, error) {
	return c.control(ctx, wire.NewPromote(key, extras, false))
}

// Demote tells key's chain head that the key is no longer hot; the extras
// drop their copies.
func (c *Client) Demote(ctx context.Context, key []byte) error {
	_, err := c.control(ctx, wire.NewDemote(key))
	return err
}

func (c *Client) control(ctx context.Context, req wire.Packet) (uint64, error) {
	ch := c.chain(req.KeyHash)
	if len(ch) == 0 {
		return 0, errors.New("netdir: promote/demote need the layout")
	}
	req.ReqID, req.Epoch = newID(), c.epoch.Load()
	r, err := c.conn.Call(ctx, c.nodeAddr(ch[0]), &req, c.controlRetry())
	if err != nil {
		return 0, err
	}
	if r.Code != wire.CodeOK {
		return 0, r.Code
	}
	return r.Stamp, nil
}

// controlRetry resends control ops until the context ends.
func (c *Client) controlRetry() Retry {
	return Retry{Timeout: c.opts.Timeout, MaxTimeout: c.opts.MaxTimeout}
}

// NodeStats asks a node for its counters and decodes the JSON into out
// (a *storagenode.Stats).
func (c *Client) NodeStats(ctx context.Context, node wire.NodeID, out any) error {
	if c.layout() == nil {
		return errors.New("netdir: stats need the layout")
	}
	req := wire.NewStats()
	req.ReqID = newID()
	r, err := c.conn.Call(ctx, c.nodeAddr(node), &req, c.controlRetry())
	if err != nil {
		return err
	}
	return json.Unmarshal(r.Value, out)
}
