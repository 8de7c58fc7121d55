// Package controller is netdir's control plane: it is the authority of the
// cluster layout (package layout: nodes, chains, epoch) and serves it, owns
// the VSB group, programs every data plane over
// P4Runtime (the software data plane, BMv2 and Tofino alike), and runs the
// hot-key loop that promotes and evicts directory entries and the HATS
// coarse loop that sets split weights every epoch (hats.go).
//
// Decisions are pure (layout placement, sched.HotKeys, sched.PlaceExtras,
// sched.Coarse);
// this package is the shell that gathers counters and reports, applies the
// decisions to the data planes and storage nodes, and serves the API.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// DataPlane is a device the controller programs.
type DataPlane interface {
	Name() string
	// Setup installs the layout's partitions and node addresses, and the
	// VSB group.
	Setup(ctx context.Context, m *layout.Map, vsbGroup []uint32) error
	// InstallEntry adds a hot key's slot; RemoveEntry deletes it.
	InstallEntry(ctx context.Context, e *Entry) error
	RemoveEntry(ctx context.Context, e *Entry) error
	// SetSlotBuckets and SetPartitionBuckets install split weights.
	SetSlotBuckets(ctx context.Context, e *Entry) error
	SetPartitionBuckets(ctx context.Context, p uint32, chain []wire.NodeID, buckets []uint8) error
	// ReadHits returns the cumulative hit counters of the given slots.
	ReadHits(ctx context.Context, slots []uint32) (map[uint32]uint64, error)
	// ReadSketch returns the miss sketch, row by row.
	ReadSketch(ctx context.Context) ([directory.SketchRows][directory.SketchCols]uint64, error)
}

// Storage reaches the chain heads to create and drop extra copies.
type Storage interface {
	// Promote returns the head's latest version of key (clean or dirty);
	// from then on the head refuses the key's writes stamped in an
	// incarnation older than inc (wire/stamp.go).
	Promote(ctx context.Context, head layout.Node, key []byte, extras []layout.Node, inc uint16) (uint64, error)
	Demote(ctx context.Context, head layout.Node, key []byte, extras []layout.Node) error
}

// Config configures a controller.
type Config struct {
	Layout *layout.Map // the nodes and their chains (required)
	// Capacity is the directory size; 0 sizes it O(n log n) for the nodes
	// (sched.DirectorySize), capped at DataPlaneCapacity.
	Capacity          int
	DataPlaneCapacity int           // default 4096
	Round             time.Duration // hot-key round; default 500 ms
	PromoteMin        uint64        // requests per round to be hot; default 16
	VSBGroup          []uint32      // egress ports of agent hosts
	// Epoch is the HATS coarse loop's period L (sched.MinEpoch to
	// sched.MaxEpoch); default sched.DefaultEpoch.
	Epoch time.Duration
	// NodeCapacity bounds each node's rate in requests/s for the coarse
	// loop where read latency does not (the bench's emulated capacity); 0:
	// latency alone.
	NodeCapacity float64
	// QoSStore persists a lone controller's tenants and QoS policies (nil:
	// memory only, lost on restart); a replicated one keeps them in its
	// raft state.
	QoSStore QoSStore
	// SpareAfter is how long a node stays spliced out before spares take
	// its place in every chain it was in (Replace); 0: never, its chains
	// stay short until it is back.
	SpareAfter time.Duration
	// RejoinAfter is how long a node spliced out must be seen alive before
	// it is added back (default gossip.DefaultFailureTimeout; set it to
	// gossip's failure timeout): a controller that has just joined gossip
	// may hear a dead node listed alive by members that have not yet
	// declared it dead, and putting it back in its chains would stall
	// them until the next splice.
	RejoinAfter time.Duration
	// Raft, if set, makes the controller one of several replicas of its
	// state (raft.go); nil: a lone controller.
	Raft *RaftConfig
	Log  *slog.Logger
}

// NodeReport is a storage node's report for the next hot-key round and
// the coarse loop.
type NodeReport struct {
	Node wire.NodeID
	// Version increases with every report of a node; a report no newer
	// than the last one taken is dropped (0: always taken).
	Version    uint64
	HotKeys    []sched.KeyCount // the keys the node served most, named
	Trees      []TreeReport     // per chain position; none: keep the last ones
	QueueDepth uint32
}

// TreeReport is one chain position's tree on a node (HATS's T and C),
// cumulative since the node started.
type TreeReport struct {
	Position        uint32
	Reads           uint64
	MeanReadLatency time.Duration
	CompactionDebt  uint64 // bytes
}

// Controller runs the control loops.
//
// Locks, taken in this order and never the reverse (a goroutine holding
// one takes only those after it):
//
//	reconfMu → partsMu → keysMu → st.mu → mu → gossip.mu
//
// reconfMu serialises layout changes (NodeDown, NodeUp), so that each
// derives its epoch from the last.
//
// partsMu serialises writes of partition weights (a coarse epoch's,
// SetPartitionWeights, Resync's), so that the planes and st.partBuckets see
// them in one order. keysMu serialises changes to directory entries (a
// hot-key round's promotions and evictions, Pin, Unpin, SetKeyWeights, a
// coarse epoch's key weights, Resync) together with the plane and head
// writes that carry them; it guards hot, lastHits and lastSketch. st.mu
// guards st (state.go): the replicated state changes only by commands
// (fsm.go), which repl applies under st.mu; the leader decides them under
// keysMu or partsMu. Entries are read under st.mu, as copies. mu guards
// the fields below it, and gossip.mu the gossip state. qos.mu (qos.go) is
// taken alone, or before st.mu when its store is the raft state. cfg,
// planes and repl never change after New.
type Controller struct {
	cfg     Config
	planes  []DataPlane
	storage Storage
	repl    replication
	log     *slog.Logger

	reconfMu sync.Mutex
	partsMu  sync.Mutex
	keysMu   sync.Mutex
	hot      *sched.HotKeys
	// demotes are heads left promoted by a promotion or eviction whose
	// demote got no answer (an overloaded head): each hot-key round asks
	// them again until they answer, since a head left promoted refuses
	// the key's unstamped writes for good. keysMu guards it.
	demotes map[wire.KeyHash]pendingDemote
	// lastHits and lastSketch are the counters the last round read, per
	// slot and per plane.
	lastHits   map[uint32]uint64
	lastSketch [][directory.SketchRows][directory.SketchCols]uint64

	st *state

	mu         sync.Mutex
	reports    map[wire.NodeID]NodeReport
	rounds     uint64
	promotions uint64
	evictions  uint64
	coarse     coarseState
	// Host agents' reports (agents.go).
	agentSeen   map[string]agentSeen
	agentTally  agentTallies
	agentTotals AgentTotals

	gossip gossipState // gossiped node stats and expected loads (gossip.go)
	qos    qosState    // tenants and QoS policies (qos.go)

	// paused skips the hot-key rounds and coarse epochs (SetPaused).
	paused atomic.Bool

	members chan memberChange // gossip's joins and deaths, for RunReconfig
}

// New returns a controller for the nodes; it has not touched any device yet.
func New(cfg Config, planes []DataPlane, storage Storage) (*Controller, error) {
	if cfg.Layout == nil {
		return nil, errors.New("controller: no layout")
	}
	if cfg.DataPlaneCapacity == 0 {
		cfg.DataPlaneCapacity = 4096
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = sched.DirectorySize(len(cfg.Layout.Nodes()), cfg.DataPlaneCapacity)
	}
	if cfg.Round == 0 {
		cfg.Round = 500 * time.Millisecond
	}
	if cfg.PromoteMin == 0 {
		cfg.PromoteMin = 16
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Epoch == 0 {
		cfg.Epoch = sched.DefaultEpoch
	}
	if cfg.Epoch < sched.MinEpoch || cfg.Epoch > sched.MaxEpoch {
		return nil, fmt.Errorf("controller: epoch %v: want %v..%v", cfg.Epoch, sched.MinEpoch, sched.MaxEpoch)
	}
	if cfg.Capacity > cfg.DataPlaneCapacity {
		return nil, fmt.Errorf("controller: capacity %d over the data plane's %d", cfg.Capacity, cfg.DataPlaneCapacity)
	}
	st := newState(cfg.Layout, cfg.Capacity)
	var repl replication = local{st}
	if cfg.Raft != nil {
		rp, err := startRaft(*cfg.Raft, st, cfg.Log)
		if err != nil {
			return nil, err
		}
		repl = rp
	}
	c := &Controller{
		cfg: cfg, planes: planes, storage: storage, st: st, repl: repl, log: cfg.Log,
		hot: sched.NewHotKeys(sched.HotKeyConfig{
			Capacity: cfg.Capacity, PromoteMin: cfg.PromoteMin, Nodes: len(cfg.Layout.Nodes()), Chain: cfg.Layout.R(),
		}),
		reports:    map[wire.NodeID]NodeReport{},
		demotes:    map[wire.KeyHash]pendingDemote{},
		lastHits:   map[uint32]uint64{},
		lastSketch: make([][directory.SketchRows][directory.SketchCols]uint64, len(planes)),
		coarse:     newCoarseState(),
		members:    make(chan memberChange, 256),
	}
	store := cfg.QoSStore
	if cfg.Raft != nil {
		store = raftQoSStore{c}
	}
	if err := c.qos.load(store); err != nil {
		return nil, err
	}
	return c, nil
}

// Close stops the controller's replication (its raft server); the
// controller no longer leads.
func (c *Controller) Close() error { return c.repl.close() }

// Leadership is the controller's raft leadership.
func (c *Controller) Leadership() Leadership {
	rp, _ := c.repl.(*replica)
	return Leadership{rp}
}

// Leading returns nil while the controller leads (always, for a lone
// one), and a *NotLeaderError naming the leader otherwise.
func (c *Controller) Leading() error { return c.repl.leading() }

// TakeOver is a new leader's first step, before its loops run and before it
// programs the data planes: it waits for the state to hold every command
// committed before, has gossip carry the layout to the nodes (its
// predecessor may have died before it did), then undoes the promotions
// that the last leader had reserved and not finished, at their heads (left
// promoted, a head refuses the key's unstamped writes for good). A head it
// cannot reach keeps its reservation, for the next leader to undo.
func (c *Controller) TakeOver(ctx context.Context) error {
	if err := c.Leadership().Barrier(ctx); err != nil {
		return fmt.Errorf("controller: catch up: %w", err)
	}
	// The nodes must hold the layout before the heads are asked anything
	// (below, and by the data planes' re-sync).
	if err := c.resendLayout(); err != nil {
		c.log.Warn("gossip the layout", "err", err)
	}
	// The QoS configuration as the last leader saved it.
	c.qos.mu.Lock()
	q, err := c.qos.store.Load()
	if err == nil {
		c.qos.cfg = q
	}
	c.qos.mu.Unlock()
	if err != nil {
		return fmt.Errorf("controller: qos state: %w", err)
	}
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	c.st.mu.Lock()
	reserved := bySlot(c.st.reserved)
	c.st.mu.Unlock()
	for _, e := range reserved {
		if c.storage != nil {
			if err := c.undoPromote(ctx, e.Locs[0], e.Key, e.Locs[e.R:]); err != nil {
				c.log.Warn("undo an unfinished promotion", "key", string(e.Key), "err", err)
				continue
			}
		}
		if err := c.repl.apply(command{Op: opRelease, Entries: []Entry{e}}); err != nil {
			return err
		}
		c.log.Info("undid an unfinished promotion", "key", string(e.Key), "slot", e.Slot)
	}
	return nil
}

// Layout returns the current layout.
func (c *Controller) Layout() *layout.Map {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.lay
}

// Partitions returns the layout's partitions with the weights installed
// over them.
func (c *Controller) Partitions() Partitions {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.partitionsLocked()
}

// Setup programs every data plane from scratch.
func (c *Controller) Setup(ctx context.Context) error {
	for _, p := range c.planes {
		if err := p.Setup(ctx, c.Layout(), c.cfg.VSBGroup); err != nil {
			return fmt.Errorf("controller: set up %s: %w", p.Name(), err)
		}
	}
	return nil
}

// Report records a node's report for the next hot-key round and epoch.
func (c *Controller) Report(r NodeReport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.reports[r.Node]; ok && old.Version >= r.Version && r.Version != 0 {
		return // a reordered, older report
	}
	c.reports[r.Node] = r
	c.noteTreesLocked(r.Node, r.Trees)
}

// Run runs hot-key rounds and, beside them, coarse epochs until ctx ends:
// an epoch's partition tables can take seconds to write to a switch, and
// promotions should not wait for them.
func (c *Controller) Run(ctx context.Context) error {
	epochs := make(chan struct{})
	go func() {
		defer close(epochs)
		c.runEpochs(ctx)
	}()
	defer func() { <-epochs }()
	t := time.NewTicker(c.cfg.Round)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if c.Paused() {
				continue
			}
			if err := c.HotKeyRound(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("hot-key round failed", "err", err)
			}
		}
	}
}

// SetPaused pauses or resumes Run's hot-key rounds and coarse epochs; the
// directory and the weights stay as they are, and Pin, Unpin and the
// weight setters still work. A bench's baselines on a running deployment
// pause them, so that nothing but the baseline routes.
func (c *Controller) SetPaused(paused bool) { c.paused.Store(paused) }

// Paused reports whether the loops are paused.
func (c *Controller) Paused() bool { return c.paused.Load() }

func (c *Controller) node(id wire.NodeID) layout.Node {
	if n, ok := c.Layout().Node(id); ok {
		return n
	}
	return layout.Node{ID: id}
}

func (c *Controller) nodes(ids []wire.NodeID) []layout.Node {
	out := make([]layout.Node, len(ids))
	for i, id := range ids {
		out[i] = c.node(id)
	}
	return out
}

// HotKeyRound is one round of the hot-key loop: read hit counters and node
// reports, decide, evict, then promote.
func (c *Controller) HotKeyRound(ctx context.Context) error {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	if err := c.repl.leading(); err != nil {
		return err
	}
	c.retryDemotes(ctx)
	entries := c.Entries()
	slots := make([]uint32, len(entries))
	for i, e := range entries {
		slots[i] = e.Slot
	}
	// Hits are summed over planes: each plane sees its own share of traffic.
	total := map[uint32]uint64{}
	for _, p := range c.planes {
		h, err := p.ReadHits(ctx, slots)
		if err != nil {
			return fmt.Errorf("read hits from %s: %w", p.Name(), err)
		}
		for s, n := range h {
			total[s] += n
		}
	}
	// The miss sketch's growth since the last round, summed over planes.
	var sketch [directory.SketchRows][directory.SketchCols]uint64
	for i, p := range c.planes {
		cur, err := p.ReadSketch(ctx)
		if err != nil {
			return fmt.Errorf("read sketch from %s: %w", p.Name(), err)
		}
		for r := range cur {
			for col := range cur[r] {
				sketch[r][col] += cur[r][col] - min(c.lastSketch[i][r][col], cur[r][col])
			}
		}
		c.lastSketch[i] = cur
	}
	c.mu.Lock()
	// Host agents' counts since the last round: their slot hits add to the
	// cached keys', their sketch growth to the planes'.
	agents := c.takeAgentTalliesLocked()
	var reports [][]sched.KeyCount
	for _, id := range slices.Sorted(maps.Keys(c.reports)) {
		reports = append(reports, c.reports[id].HotKeys)
	}
	clear(c.reports)
	c.mu.Unlock()
	for r := range sketch {
		for col := range sketch[r] {
			sketch[r][col] += agents.sketch[r][col]
		}
	}
	cachedCounts := map[wire.KeyHash]uint64{}
	var all uint64
	for i, e := range entries {
		d := total[e.Slot] - min(c.lastHits[e.Slot], total[e.Slot])
		c.lastHits[e.Slot] = total[e.Slot]
		d += agents.hits[e.Hash]
		cachedCounts[e.Hash] = d
		entries[i].Hits = d
		all += d
	}
	c.st.mu.Lock()
	for _, e := range entries {
		c.st.hits[e.Hash] = e.Hits
	}
	c.st.mu.Unlock()
	c.mu.Lock()
	for h, d := range cachedCounts {
		c.coarse.keyHits[h] += d
	}
	c.rounds++
	c.mu.Unlock()

	// Nodes name the candidates (the data plane only sees hashes); the
	// sketch, which sees every miss through the data plane, bounds how hot
	// each one is from below where the nodes' own counts undercount it.
	list := sched.Candidates(reports, wire.HashKey, func(h wire.KeyHash) uint64 {
		est := ^uint64(0)
		for r := 0; r < directory.SketchRows; r++ {
			est = min(est, sketch[r][directory.SketchIndex(&h, r)])
		}
		return est
	})
	for _, cc := range list {
		all += cc.Count
	}
	dec := c.hot.Round(cachedCounts, list)
	var errs []error
	for _, h := range dec.Evict {
		c.st.mu.Lock()
		e, ok := c.st.entries[h]
		c.st.mu.Unlock()
		if !ok || e.Pinned {
			continue
		}
		errs = append(errs, c.evict(ctx, e))
	}
	var kept []sched.HotKeyLoad
	for _, e := range entries {
		if !slices.Contains(dec.Evict, e.Hash) {
			kept = append(kept, sched.HotKeyLoad{Locs: e.Locs, Requests: e.Hits})
		}
	}
	load := sched.CopyLoad(kept, all)
	for _, cc := range dec.Promote {
		share := 0.0
		if all > 0 {
			share = float64(cc.Count) / float64(all)
		}
		if _, err := c.promote(ctx, cc.Key, share, load, false); err != nil {
			c.hot.Forget(cc.Hash)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// promote installs key in every plane and has its chain head create copies;
// it returns the key's entry. keysMu is held.
func (c *Controller) promote(ctx context.Context, key []byte, share float64, load map[wire.NodeID]float64, pinned bool) (Entry, error) {
	h := wire.HashKey(key)
	c.st.mu.Lock()
	if e, ok := c.st.entries[h]; ok {
		c.st.mu.Unlock()
		return e, nil
	}
	if len(c.st.free) == 0 {
		c.st.mu.Unlock()
		return Entry{}, directory.ErrFull
	}
	// The decision, from the state as it is: keysMu keeps every other
	// decision out until its commands are applied.
	chain := c.st.lay.ChainOf(h)
	// Extras only on live nodes: a node spliced out serves nothing.
	down := c.st.lay.Down()
	ids := slices.DeleteFunc(c.st.lay.Nodes(), func(id wire.NodeID) bool { return slices.Contains(down, id) })
	locs := sched.Locations(chain, ids, share, load)
	extras := locs[len(chain):]
	weights := make([]uint32, len(locs))
	for i := range weights {
		weights[i] = 1 // even until the next coarse epoch weighs the key
	}
	weights = c.st.lay.ReadWeightsOver(c.st.lay.Partition(h), locs, weights)
	// Oldest-freed first: a P4 slot's registers keep the evicted key's
	// versions and fresh bits (P4Runtime cannot clear them), so reusing a
	// slot as late as possible leaves the most time for that state to stop
	// mattering. A stale state costs balance only: a read sent to a copy
	// that does not hold the key is answered wrong-node and retried on the
	// chain.
	slot := c.st.free[0]
	inc := c.st.inc
	e := Entry{Hash: h, Key: slices.Clone(key), Slot: slot, Locs: locs, R: len(chain),
		Buckets: directory.BucketsForWeights(weights), Pinned: pinned, Gen: c.st.gen + 1, Ver: wire.MakeStamp(inc, 0)}
	c.st.mu.Unlock()
	if err := c.repl.apply(command{Op: opReserve, Entries: []Entry{e}}); err != nil {
		return Entry{}, err
	}
	release := func() {
		if err := c.repl.apply(command{Op: opRelease, Entries: []Entry{e}}); err != nil {
			c.log.Warn("release a failed promotion's slot", "key", string(key), "err", err)
		}
	}
	// The head first: from then on it refuses unstamped writes, and its
	// latest version (clean or dirty) seeds the slot. Installing the slot
	// first, unseeded, let an extra's copy of an older version pass for the
	// newest, and a lost tail announcement leave the slot behind forever
	// (spec/README.md, flaws A and E). Copies' VSBs that arrive before the
	// slot does are refused and re-sent by the extras. A key without extras
	// is promoted too: seeded at 0, every write to a key the nodes had
	// already written far was refused as stale and retried once per
	// version until the stamps caught up (a write storm).
	if c.storage != nil {
		// This promotion supersedes a demote still owed to the key's head:
		// retried after it, that demote would undo it.
		delete(c.demotes, h)
		ver, err := c.storage.Promote(ctx, c.node(chain[0]), key, c.nodes(extras), inc)
		if err != nil {
			// The head may have promoted and its answer been lost: undo,
			// or it would refuse the key's unstamped writes for good.
			if derr := c.undoPromote(ctx, chain[0], key, extras); derr != nil {
				c.owe(h, chain[0], key, extras, derr)
			}
			release()
			return Entry{}, fmt.Errorf("promote %q at its head: %w", key, err)
		}
		e.Ver = wire.MakeStamp(inc, ver)
	}
	for i, p := range c.planes {
		if err := p.InstallEntry(ctx, &e); err != nil {
			for _, q := range c.planes[:i] {
				q.RemoveEntry(ctx, &e)
			}
			if c.storage != nil {
				if derr := c.undoPromote(ctx, chain[0], key, extras); derr != nil {
					c.owe(h, chain[0], key, extras, derr)
				}
			}
			release()
			return Entry{}, fmt.Errorf("install %q on %s: %w", key, p.Name(), err)
		}
	}
	if err := c.repl.apply(command{Op: opCommit, Entries: []Entry{e}}); err != nil {
		// Installed and not committed: the next leader re-syncs the planes
		// from the state, and undoes the head's promotion (TakeOver).
		return Entry{}, fmt.Errorf("commit %q: %w", key, err)
	}
	c.mu.Lock()
	c.promotions++
	c.mu.Unlock()
	c.log.Info("promoted", "key", string(key), "slot", slot, "locations", locs)
	return e, nil
}

// undoPromote demotes key at its head after a promotion that did not
// complete, also when ctx was cancelled midway (a controller stopping):
// left promoted, the head would refuse the key's unstamped writes for good.
func (c *Controller) undoPromote(ctx context.Context, head wire.NodeID, key []byte, extras []wire.NodeID) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return c.storage.Demote(ctx, c.node(head), key, c.nodes(extras))
}

// pendingDemote is a demote a head has not answered.
type pendingDemote struct {
	head   wire.NodeID
	key    []byte
	extras []wire.NodeID
}

// owe records that head still holds key promoted after its demote failed
// with err. keysMu is held.
func (c *Controller) owe(h wire.KeyHash, head wire.NodeID, key []byte, extras []wire.NodeID, err error) {
	c.log.Warn("demote at head failed; asked again each round", "key", string(key), "head", head, "err", err)
	c.demotes[h] = pendingDemote{head: head, key: slices.Clone(key), extras: slices.Clone(extras)}
}

// retryDemotes asks again the heads that owe a demote, all at once, so
// that a round waits for one call's retries however many are owed, and
// forgets those that answer. A head the layout marks down is not asked
// until it is back. keysMu is held.
func (c *Controller) retryDemotes(ctx context.Context) {
	if c.storage == nil || len(c.demotes) == 0 {
		return
	}
	c.st.mu.Lock()
	down := c.st.lay.Down()
	c.st.mu.Unlock()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		answered []wire.KeyHash
	)
	for h, d := range c.demotes {
		if slices.Contains(down, d.head) {
			continue
		}
		wg.Go(func() {
			if err := c.storage.Demote(ctx, c.node(d.head), d.key, c.nodes(d.extras)); err != nil {
				c.log.Debug("demote still unanswered", "key", string(d.key), "head", d.head, "err", err)
				return
			}
			c.log.Info("demoted at head after a failed demote", "key", string(d.key), "head", d.head)
			mu.Lock()
			answered = append(answered, h)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, h := range answered {
		delete(c.demotes, h)
	}
}

// evict removes e from every plane and has its head drop the copies.
// keysMu is held.
func (c *Controller) evict(ctx context.Context, e Entry) error {
	// The planes and the head first: a leader that fails before the command
	// leaves the entry in the state, and the next one installs it again.
	// The other way round, it would leave the head refusing the key's
	// unstamped writes for good.
	if err := c.repl.leading(); err != nil {
		return err
	}
	var errs []error
	for _, p := range c.planes {
		if err := p.RemoveEntry(ctx, &e); err != nil {
			errs = append(errs, fmt.Errorf("evict %q from %s: %w", e.Key, p.Name(), err))
		}
	}
	if c.storage != nil {
		if err := c.storage.Demote(ctx, c.node(e.Locs[0]), e.Key, c.nodes(e.Locs[e.R:])); err != nil {
			c.owe(e.Hash, e.Locs[0], e.Key, e.Locs[e.R:], err)
		}
	}
	if err := c.repl.apply(command{Op: opEvict, Entries: []Entry{e}}); err != nil {
		return errors.Join(append(errs, err)...)
	}
	delete(c.lastHits, e.Slot)
	c.mu.Lock()
	c.evictions++
	c.mu.Unlock()
	c.hot.Forget(e.Hash)
	c.log.Info("evicted", "key", string(e.Key), "slot", e.Slot)
	return errors.Join(errs...)
}

// Entries returns the directory, by slot. The entries' slices are shared:
// read them only.
func (c *Controller) Entries() []Entry {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.sortedLocked()
}

// directorySize is the number of keys in the directory.
func (c *Controller) directorySize() int {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return len(c.st.entries)
}

// Rounds is the number of hot-key rounds run.
func (c *Controller) Rounds() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rounds
}

// Resync programs one data plane from scratch with the current state: the
// partition map and every directory entry (after a device restart or a
// reconnect, and by a new leader).
func (c *Controller) Resync(ctx context.Context, p DataPlane) error { return c.Reprogram(ctx, p, nil) }

// Reprogram resets a data plane (reset, e.g. a pipeline push, if not nil)
// and re-syncs it, with every other change to partitions and entries held
// off until it is done: a promotion between the reset and the re-sync
// would be installed twice, or lost.
func (c *Controller) Reprogram(ctx context.Context, p DataPlane, reset func(context.Context) error) error {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	if reset != nil {
		if err := reset(ctx); err != nil {
			return err
		}
	}
	start := time.Now()
	// A plane that lost its state (reset) may still have writes it
	// stamped in flight to their heads; the heads' latest versions, which
	// seed its slots below, do not count them. So a new incarnation: each
	// head is told it below before its key's slot is installed, the slots
	// stamp it, and the heads refuse what the lost state stamped
	// (spec/README.md, flaw G).
	inc, bumped := c.incarnation(), false
	if reset != nil && c.storage != nil {
		var err error
		if inc, err = c.nextIncarnation(); err != nil {
			return fmt.Errorf("re-sync: %w", err)
		}
		bumped = true
	}
	parts := c.Partitions()
	if err := p.Setup(ctx, parts.Layout, c.cfg.VSBGroup); err != nil {
		return err
	}
	for part, b := range parts.Buckets {
		if err := p.SetPartitionBuckets(ctx, part, parts.Layout.Chain(part), b); err != nil {
			return err
		}
	}
	partsTook := time.Since(start)
	entries := c.Entries()
	took, err := c.reseed(ctx, entries, inc, func(ctx context.Context, chunk []Entry) error {
		return installEntries(ctx, p, chunk)
	})
	if err != nil {
		return err
	}
	// The other planes kept their state, and stamp in the last
	// incarnation, which the heads now refuse: they take the new one
	// (the same generation: their slots keep their registers).
	if bumped {
		if err := c.reinstallAll(ctx, p, inc, entries); err != nil {
			return err
		}
	}
	c.log.Info("data plane re-synced", "plane", p.Name(), "entries", len(entries),
		"partitions_took", partsTook, "heads_wait", took.heads, "entries_took", took.install, "took", time.Since(start))
	return nil
}

// Reincarnate starts a new incarnation for a data plane that lost its
// state and that the controller does not program itself: a router agent
// that (re)starts asks for it as it subscribes (WatchDirectory's
// lost_state), before its snapshot. As for a plane Reprogram resets, each
// entry is promoted again at its head in the new incarnation, and the
// entries, seeded with the heads' latest versions, are published to the
// agents and installed again in every plane: the heads then refuse the
// writes that the lost state stamped, still in flight, which would
// otherwise commit above a seed that knows nothing of them
// (spec/README.md, flaw G). Without storage no head checks incarnations,
// and nothing changes.
func (c *Controller) Reincarnate(ctx context.Context) error {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	if err := c.repl.leading(); err != nil {
		return err
	}
	if c.storage == nil {
		return nil
	}
	start := time.Now()
	inc, err := c.nextIncarnation()
	if err != nil {
		return err
	}
	entries := c.Entries()
	took, err := c.reseed(ctx, entries, inc, nil)
	if err != nil {
		return err
	}
	if err := c.reinstallAll(ctx, nil, inc, entries); err != nil {
		return err
	}
	c.log.Info("new incarnation for a plane that lost its state", "incarnation", inc, "entries", len(entries),
		"heads_wait", took.heads, "took", time.Since(start))
	return nil
}

// nextIncarnation takes the incarnation after the current one through the
// replicated state.
func (c *Controller) nextIncarnation() (uint16, error) {
	inc := c.incarnation() + 1
	if err := c.repl.apply(command{Op: opIncarnation, Incarnation: inc}); err != nil {
		return 0, fmt.Errorf("new incarnation: %w", err)
	}
	return inc, nil
}

// reseedTimes are where a reseed's time went, for the log.
type reseedTimes struct{ heads, install time.Duration }

// reseed promotes entries again at their heads in incarnation inc and
// records each entry's new seed, the head's latest version (never below
// the entry's: a higher seed costs balance only), in the replicated
// state, which publishes the changed entries to the agents. install, if
// not nil, installs each chunk in a plane once its heads answered. keysMu
// is held.
//
// A device that lost its state (a restart, a pipeline push) seeds each
// slot from the entry's version, the head's latest when the key was
// promoted: stale once the key has been written since, and a stale seed
// lets an extra whose copy lags at that version pass for fresh (flaw A
// again) and has every write refused as stale until the stamps catch up.
// So the heads are asked again, as a promotion does, each before its
// key's slot is installed; no write commits in between, since a head
// refuses unstamped writes of a promoted key and the plane stamps none
// without the slot (another plane that kept it may, between the two: the
// same window as a promotion's with several planes). In chunks, pinned
// keys first, so the first keys' writes resume before the last keys'
// slots are written; the next chunk's heads are asked while this chunk is
// installed.
func (c *Controller) reseed(ctx context.Context, entries []Entry, inc uint16, install func(context.Context, []Entry) error) (reseedTimes, error) {
	var took reseedTimes
	slices.SortStableFunc(entries, func(a, b Entry) int {
		switch {
		case a.Pinned == b.Pinned:
			return 0
		case a.Pinned:
			return -1
		}
		return 1
	})
	chunks := slices.Collect(slices.Chunk(entries, resyncChunk))
	type heads struct {
		vers []uint64
		err  error
	}
	ask := func(i int) <-chan heads {
		ch := make(chan heads, 1)
		if c.storage == nil || i >= len(chunks) {
			ch <- heads{}
			return ch
		}
		go func() {
			v, err := c.headVersions(ctx, chunks[i], inc)
			ch <- heads{v, err}
		}()
		return ch
	}
	var newer []Entry
	next := ask(0)
	for i, chunk := range chunks {
		t0 := time.Now()
		h := <-next
		took.heads += time.Since(t0)
		if h.err != nil {
			return took, h.err
		}
		next = ask(i + 1)
		for j := range h.vers {
			if v := wire.MakeStamp(inc, max(h.vers[j], wire.StampVersion(chunk[j].Ver))); v != chunk[j].Ver {
				chunk[j].Ver = v
				newer = append(newer, chunk[j])
			}
		}
		if install == nil {
			continue
		}
		t1 := time.Now()
		if err := install(ctx, chunk); err != nil {
			return took, err
		}
		took.install += time.Since(t1)
	}
	if len(newer) > 0 {
		if err := c.repl.apply(command{Op: opUpdate, Entries: newer}); err != nil && !errors.Is(err, errStale) {
			return took, fmt.Errorf("re-sync: record the heads' versions: %w", err)
		}
	}
	return took, nil
}

// reinstallAll installs entries, in incarnation inc, again in every plane
// but skip (nil: none).
func (c *Controller) reinstallAll(ctx context.Context, skip DataPlane, inc uint16, entries []Entry) error {
	for _, q := range c.planes {
		if q == skip {
			continue
		}
		if err := reinstallEntries(ctx, q, entries); err != nil {
			return fmt.Errorf("re-sync: incarnation %d on %s: %w", inc, q.Name(), err)
		}
	}
	return nil
}

// A re-sync asks resyncHeads heads at once, and installs resyncChunk
// entries per round of writes.
const (
	resyncHeads = 64
	resyncChunk = 256
)

// headVersions re-promotes every entry at its head in incarnation inc,
// resyncHeads at a time, and returns the heads' latest versions.
func (c *Controller) headVersions(ctx context.Context, entries []Entry, inc uint16) ([]uint64, error) {
	vers := make([]uint64, len(entries))
	errs := make([]error, len(entries))
	sem := make(chan struct{}, resyncHeads)
	var wg sync.WaitGroup
	for i, e := range entries {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			v, err := c.storage.Promote(ctx, c.node(e.Locs[0]), e.Key, c.nodes(e.Locs[e.R:]), inc)
			if err != nil {
				err = fmt.Errorf("re-sync %q at its head: %w", e.Key, err)
			}
			vers[i], errs[i] = v, err
		}()
	}
	wg.Wait()
	return vers, errors.Join(errs...)
}

// EntryInstaller is a data plane that installs many entries in fewer
// device writes than one InstallEntry each (a re-sync's).
type EntryInstaller interface {
	InstallEntries(ctx context.Context, es []Entry) error
}

func installEntries(ctx context.Context, p DataPlane, es []Entry) error {
	if b, ok := p.(EntryInstaller); ok {
		return b.InstallEntries(ctx, es)
	}
	for i := range es {
		if err := p.InstallEntry(ctx, &es[i]); err != nil {
			return err
		}
	}
	return nil
}

// incarnation is the data planes' current incarnation (wire/stamp.go).
func (c *Controller) incarnation() uint16 {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.inc
}

// reinstallEntries installs entries a plane holds already, changed: a
// plane that installs many at once replaces them in place (P4Plane keeps
// the slots' registers for the same generation); any other has each
// removed and installed again, which re-seeds its slot as a promotion
// does.
func reinstallEntries(ctx context.Context, p DataPlane, es []Entry) error {
	if _, ok := p.(EntryInstaller); ok {
		for chunk := range slices.Chunk(es, resyncChunk) {
			if err := installEntries(ctx, p, chunk); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range es {
		if err := p.RemoveEntry(ctx, &es[i]); err != nil && !errors.Is(err, directory.ErrNotFound) {
			return err
		}
		if err := p.InstallEntry(ctx, &es[i]); err != nil {
			return err
		}
	}
	return nil
}

// entry returns key's directory entry.
func (c *Controller) entry(key []byte) (Entry, bool) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	e, ok := c.st.entries[wire.HashKey(key)]
	return e, ok
}

// Pin promotes key at once and keeps it until unpinned.
func (c *Controller) Pin(ctx context.Context, key []byte) (Entry, error) {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	if err := c.repl.leading(); err != nil {
		return Entry{}, err
	}
	if e, ok := c.entry(key); ok {
		if !e.Pinned {
			e.Pinned = true
			if err := c.repl.apply(command{Op: opUpdate, Entries: []Entry{e}}); err != nil {
				return Entry{}, err
			}
		}
		return e, nil
	}
	return c.promote(ctx, key, 1/float64(len(c.Layout().Nodes())), map[wire.NodeID]float64{}, true)
}

// Unpin evicts a pinned key.
func (c *Controller) Unpin(ctx context.Context, key []byte) error {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	e, ok := c.entry(key)
	if !ok {
		return fmt.Errorf("controller: %q is not in the directory", key)
	}
	return c.evict(ctx, e)
}

// SetKeyWeights installs weights over a key's LocationList.
func (c *Controller) SetKeyWeights(ctx context.Context, key []byte, w []uint32) error {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	e, ok := c.entry(key)
	if !ok {
		return fmt.Errorf("controller: %q is not in the directory", key)
	}
	if len(w) != len(e.Locs) {
		return fmt.Errorf("controller: %d weights for %d locations", len(w), len(e.Locs))
	}
	m := c.Layout()
	e.Buckets = directory.BucketsForWeights(m.ReadWeightsOver(m.Partition(e.Hash), e.Locs, w))
	// The state first: a leader that fails before the planes have the
	// weights leaves them to the next one's re-sync.
	if err := c.repl.apply(command{Op: opUpdate, Entries: []Entry{e}}); err != nil {
		return err
	}
	for _, p := range c.planes {
		if err := p.SetSlotBuckets(ctx, &e); err != nil {
			return err
		}
	}
	return nil
}

// SetPartitionWeights installs weights over a partition's chain.
func (c *Controller) SetPartitionWeights(ctx context.Context, p uint32, w []uint32) error {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	m := c.Layout()
	if int(p) >= m.Partitions() {
		return fmt.Errorf("controller: partition %d of %d", p, m.Partitions())
	}
	chain := m.Chain(p)
	if len(w) != len(chain) {
		return fmt.Errorf("controller: %d weights for a chain of %d", len(w), len(chain))
	}
	b := directory.BucketsForWeights(m.ReadWeightsOver(p, chain, w))
	if err := c.repl.apply(command{Op: opPartitions, Partitions: map[uint32][]uint8{p: b}}); err != nil {
		return err
	}
	for _, pl := range c.planes {
		if err := pl.SetPartitionBuckets(ctx, p, chain, b); err != nil {
			return err
		}
	}
	return nil
}
