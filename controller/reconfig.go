package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// The controller is the chains' configuration master (CRAQ): when gossip
// declares a node dead it splices the node out of every chain (NodeDown),
// and when the node is back it adds it as the tail of its chains (NodeUp).
// Both derive the next layout (package layout) and hand it to SetLayout,
// the one way the layout changes.

// NodeDown splices node id out of every chain, with a new epoch. A node
// that is down already, or whose removal would empty a chain, is left.
func (c *Controller) NodeDown(ctx context.Context, id wire.NodeID) error {
	c.reconfMu.Lock()
	defer c.reconfMu.Unlock()
	m, err := c.Layout().Without(id)
	if err != nil {
		return err
	}
	c.log.Warn("node down: splicing it out of its chains", "node", id, "epoch", m.Epoch())
	return c.SetLayout(ctx, m)
}

// NodeUp adds a node that was spliced out back to its chains, as their
// tail, with a new epoch. The node catches up (OpSync) when it sees itself
// back in a chain, and serves reads only then.
func (c *Controller) NodeUp(ctx context.Context, id wire.NodeID) error {
	c.reconfMu.Lock()
	defer c.reconfMu.Unlock()
	m, err := c.Layout().WithTail(id)
	if err != nil {
		return err
	}
	c.log.Info("node up: rejoining as tail", "node", id, "epoch", m.Epoch())
	return c.SetLayout(ctx, m)
}

// NodeReplace replaces node id, spliced out, by spares in every chain of
// its placement (layout.Map.Replace), with a new epoch: each spare joins
// its chain as tail and fills from its predecessor at its paced copy
// rate, and serves the chain once caught up. A node that is no longer
// down, or placed nowhere any more, is left.
func (c *Controller) NodeReplace(ctx context.Context, id wire.NodeID) error {
	c.reconfMu.Lock()
	defer c.reconfMu.Unlock()
	cur := c.Layout()
	if !slices.Contains(cur.Down(), id) || cur.Placed(id) == 0 {
		return nil
	}
	m, n, err := cur.Replace(id)
	if err != nil {
		return err
	}
	c.log.Warn("node down too long: spares take its place", "node", id, "chains", n, "epoch", m.Epoch())
	return c.SetLayout(ctx, m)
}

// markFilled serves the reads of every filling member (a spare, a node
// back as tail) that gossip says has caught up with its chain (CaughtUp),
// with a new epoch, if this controller leads.
func (c *Controller) markFilled(ctx context.Context) error {
	if c.Leading() != nil || len(c.Layout().FillingParts()) == 0 {
		return nil
	}
	c.reconfMu.Lock()
	defer c.reconfMu.Unlock()
	cur := c.Layout()
	c.gossip.mu.Lock()
	done := CaughtUp(cur, c.gossip.stats)
	c.gossip.mu.Unlock()
	if len(done) == 0 {
		return nil
	}
	m, err := cur.Filled(done)
	if err != nil {
		return err
	}
	c.log.Info("filling members caught up: serving their reads", "caught_up", done, "still filling", len(m.FillingParts()), "epoch", m.Epoch())
	return c.SetLayout(ctx, m)
}

// CaughtUp is, per node, the partitions of m it fills and has reported, at
// m's epoch or a later one, that it no longer catches up with. A node
// marks the chains it joins as filling before it takes their epoch, so a
// report at that epoch without the partition means the fill is done.
func CaughtUp(m *layout.Map, stats map[wire.NodeID]gossip.NodeStats) map[wire.NodeID][]uint32 {
	out := map[wire.NodeID][]uint32{}
	for _, p := range m.FillingParts() {
		for _, id := range m.FillingIn(p) {
			if s, ok := stats[id]; ok && s.Epoch >= m.Epoch() && !slices.Contains(s.Filling, p) {
				out[id] = append(out[id], p)
			}
		}
	}
	return out
}

// SetLayout makes m the layout; its epoch must be above the current one.
// Every plane first stops reading from the members m takes out of their
// chains (ReadFence); then the layout is gossiped to the nodes; then every
// plane is re-synced with the new partitions and entries, each hot key's
// slot re-seeded from its head.
func (c *Controller) SetLayout(ctx context.Context, m *layout.Map) error {
	old, entries := c.Layout(), c.Entries()
	cfg := m.Config()
	if err := c.repl.apply(command{Op: opLayout, Layout: &cfg, At: time.Now()}); err != nil {
		return err
	}
	return c.distributeLayout(ctx, m, ReadFence(old, m, entries))
}

// distributeLayout hands m, the state's layout, to the nodes and then to
// every data plane; first, every plane stops reading from the members that
// m takes out of their chains (fence). reconfMu is held.
func (c *Controller) distributeLayout(ctx context.Context, m *layout.Map, fence Fence) error {
	// A member spliced out while alive may hear of m from no one (a
	// partition cut it off): it serves reads at the old epoch, while from
	// the moment its neighbours hold m the chain commits writes without it.
	// So no plane may route it a read by then.
	if err := c.fenceReads(ctx, fence); err != nil {
		return fmt.Errorf("controller: layout %d: fence reads: %w", m.Epoch(), err)
	}
	// Then the nodes, before the planes' new tables: a new head takes a
	// promotion only once it knows it heads the chain, and a member added
	// back is sent reads only once it holds the layout.
	if err := c.publishLayout(m); err != nil {
		return err
	}
	// Resync asks every entry's head for its latest version (the seed) and
	// installs partitions and entries; it is retried while the heads have
	// not heard of the layout yet (they answer wrong-node).
	for _, p := range c.planes {
		var err error
		for try := 0; try < layoutTries; try++ {
			if err = c.Resync(ctx, p); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(layoutRetry):
			}
		}
		if err != nil {
			return fmt.Errorf("controller: layout %d on %s: %w", m.Epoch(), p.Name(), err)
		}
	}
	c.st.mu.Lock()
	c.st.publishLocked(directoryUpdate{kind: updateSnapshot, entries: c.st.sortedLocked(), partitions: c.st.partitionsLocked()})
	c.st.mu.Unlock()
	return nil
}

// fenceReads installs f on every plane.
func (c *Controller) fenceReads(ctx context.Context, f Fence) error {
	if len(f.Parts) == 0 && len(f.Entries) == 0 {
		return nil
	}
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	for _, pl := range c.planes {
		for _, p := range slices.Sorted(maps.Keys(f.Parts)) {
			if err := pl.SetPartitionBuckets(ctx, p, f.Layout.Chain(p), f.Parts[p]); err != nil {
				return err
			}
		}
		for i := range f.Entries {
			if err := pl.SetSlotBuckets(ctx, &f.Entries[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Fence is what the data planes stop reading from before the nodes hear
// of a layout (ReadFence).
type Fence struct {
	Layout  *layout.Map        // the layout the planes hold: the fenced partitions' chains
	Parts   map[uint32][]uint8 // partition buckets
	Entries []Entry            // hot keys, with their buckets
}

// ReadFence is what the data planes must stop reading from before the
// nodes hear of layout m, coming from old: for each partition whose chain
// m takes a member out of, buckets over old's chain that give those
// members no read (old's even read weights less theirs), and each entry
// whose LocationList holds such a member of its chain, with its buckets
// likewise less theirs. A partition or entry with no other member to read
// from is left as it is. A layout that takes no member out of a chain (a
// node added back, a spare, a fill done) fences nothing: the nodes hear of
// it first.
func ReadFence(old, m *layout.Map, entries []Entry) Fence {
	if old == nil || old.Partitions() != m.Partitions() {
		return Fence{}
	}
	gone := func(p uint32) []wire.NodeID {
		return slices.DeleteFunc(slices.Clone(old.Chain(p)), func(id wire.NodeID) bool { return slices.Contains(m.Chain(p), id) })
	}
	parts := map[uint32][]uint8{}
	for p := range uint32(old.Partitions()) {
		out := gone(p)
		if len(out) == 0 {
			continue
		}
		if w, ok := withoutReads(old.ReadWeights(p), old.Chain(p), out); ok {
			parts[p] = directory.BucketsForWeights(w)
		}
	}
	var fenced []Entry
	for _, e := range entries {
		out := gone(old.Partition(e.Hash))
		if len(out) == 0 || !slices.ContainsFunc(e.Locs[:e.R], func(id wire.NodeID) bool { return slices.Contains(out, id) }) {
			continue
		}
		w := make([]uint32, len(e.Locs))
		for _, b := range e.Buckets {
			if int(b) < len(w) {
				w[b]++
			}
		}
		if w, ok := withoutReads(w, e.Locs, out); ok {
			e.Buckets = directory.BucketsForWeights(w)
			fenced = append(fenced, e)
		}
	}
	return Fence{Layout: old, Parts: parts, Entries: fenced}
}

// withoutReads is w, weights over locs, with no weight for the members of
// out; false if no weight is left.
func withoutReads(w []uint32, locs, out []wire.NodeID) ([]uint32, bool) {
	w = slices.Clone(w)
	left := false
	for i, id := range locs {
		if slices.Contains(out, id) {
			w[i] = 0
		}
		left = left || w[i] > 0
	}
	return w, left
}

// SetLayout retries a plane's resync every layoutRetry, layoutTries times.
const (
	layoutRetry = 100 * time.Millisecond
	layoutTries = 30
)

// relocate moves an entry to m's chain of its key: its extras that are
// neither in the chain nor down stay, the weights are even over its read
// set (layout.Map.ReadWeightsOver), and a new generation makes P4 slots re-seed.
func relocate(e Entry, m *layout.Map, gen *uint32) Entry {
	chain, down := m.ChainOf(e.Hash), m.Down()
	locs := slices.Clone(chain)
	for _, id := range e.Locs[e.R:] {
		if !slices.Contains(chain, id) && !slices.Contains(down, id) {
			locs = append(locs, id)
		}
	}
	weights := make([]uint32, len(locs))
	for i := range weights {
		weights[i] = 1
	}
	*gen++
	e.Locs, e.R, e.Gen = locs, len(chain), *gen
	e.Buckets = directory.BucketsForWeights(m.ReadWeightsOver(m.Partition(e.Hash), locs, weights))
	return e
}

// fillingChanged reports whether partition p's filling members differ
// between layouts a and b.
func fillingChanged(a, b *layout.Map, p uint32) bool {
	return !slices.Equal(a.FillingIn(p), b.FillingIn(p))
}

// resendLayout is a new leader's first step towards the nodes: its
// predecessor may have died while its layout reached only some of them,
// or none (then gossip here carries an older one). The layout is gossiped
// again, reliably to every member if gossip carries it already.
func (c *Controller) resendLayout() error {
	c.gossip.mu.Lock()
	g := c.gossip.g
	c.gossip.mu.Unlock()
	if g == nil {
		return nil
	}
	m := c.Layout()
	switch gossiped := g.LayoutEpoch(); {
	case gossiped < m.Epoch():
		return c.publishLayout(m)
	case gossiped == m.Epoch() && gossiped > 0: // epoch 0: the nodes' own YAML
		return g.ResendLayout()
	}
	return nil // gossip carries a newer one: RunAdopt takes it
}

// catchUpLayout distributes the state's layout if gossip carries an older
// one: the leader's command committed although the leader saw it fail (an
// apply that timed out, a lead lost and won back), so its SetLayout
// stopped before the nodes and the data planes had the layout, and they
// would keep the older epoch (the nodes answering the heads' re-sync with
// wrong-node).
func (c *Controller) catchUpLayout(ctx context.Context) error {
	c.reconfMu.Lock()
	defer c.reconfMu.Unlock()
	c.gossip.mu.Lock()
	g := c.gossip.g
	c.gossip.mu.Unlock()
	m := c.Layout()
	if g == nil || g.LayoutEpoch() >= m.Epoch() {
		return nil
	}
	c.log.Warn("the layout never reached the nodes: distributing it", "epoch", m.Epoch())
	old, _ := c.GossipedLayout()
	return c.distributeLayout(ctx, m, ReadFence(old, m, nil)) // the state's entries are m's already
}

// publishLayout gossips m to the nodes, if gossip is attached.
func (c *Controller) publishLayout(m *layout.Map) error {
	c.gossip.mu.Lock()
	g := c.gossip.g
	c.gossip.mu.Unlock()
	if g == nil {
		return nil
	}
	b, err := m.Marshal()
	if err != nil {
		return err
	}
	return g.PublishLayout(m.Epoch(), b)
}

// memberChange is a gossip member joining (alive) or declared dead.
type memberChange struct {
	name  string
	alive bool
}

// MemberChanged is a gossip.Config.OnMember callback: it queues the change
// for RunReconfig without blocking (a full queue drops it; the member's
// next change, or a later reconciliation, brings the layout right).
func (c *Controller) MemberChanged(name string, alive bool) {
	select {
	case c.members <- memberChange{name, alive}:
	default:
		c.log.Warn("membership change dropped", "member", name, "alive", alive)
	}
}

// RunReconfig splices out the nodes that gossip declares dead and adds
// back, as tails, the spliced-out nodes that rejoin, until ctx ends. It
// keeps each node's last known liveness and, every reconcileEvery while
// this controller leads, brings the layout in line with it: a change that
// a replica heard while it followed (and could not apply), or that failed
// during a failover, is applied by whichever controller leads next. The
// leader also distributes a layout its SetLayout left undone
// (catchUpLayout). With
// Config.SpareAfter, a node down that long (from when the leader that
// spliced it out decided so, a time in the replicated state) is replaced
// by spares.
func (c *Controller) RunReconfig(ctx context.Context) {
	alive := map[wire.NodeID]bool{}
	upSince := map[wire.NodeID]time.Time{}
	seen := map[wire.NodeID]time.Time{} // undated nodes down, from when this controller saw them so
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			return
		case mc := <-c.members:
			var id wire.NodeID
			if _, err := fmt.Sscanf(mc.name, "node-%d", &id); err != nil {
				continue // the controller, an agent
			}
			if _, ok := c.Layout().Node(id); !ok {
				continue
			}
			if !mc.alive {
				delete(upSince, id)
			} else if !alive[id] {
				upSince[id] = time.Now()
			}
			alive[id] = mc.alive
		case now := <-t.C:
			if c.Leading() != nil {
				continue
			}
			if err := c.catchUpLayout(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("distribute the layout", "err", err)
			}
			if c.cfg.SpareAfter > 0 {
				c.replaceDown(ctx, seen, now)
			}
			if err := c.markFilled(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("serve the spares caught up", "err", err)
			}
		}
		if c.Leading() != nil {
			continue
		}
		err := c.reconcile(ctx, Settled(alive, upSince, time.Now(), c.rejoinAfter()))
		if err != nil && ctx.Err() == nil && (last == nil || err.Error() != last.Error()) {
			c.log.Warn("reconfiguration", "err", err)
		}
		last = err
	}
}

// replaceDown replaces by spares the nodes down for SpareAfter (SparesDue),
// if this controller leads.
func (c *Controller) replaceDown(ctx context.Context, seen map[wire.NodeID]time.Time, now time.Time) {
	c.st.mu.Lock()
	m, since := c.st.lay, maps.Clone(c.st.downSince)
	c.st.mu.Unlock()
	for _, id := range SparesDue(m, since, seen, now, c.cfg.SpareAfter) {
		if c.Leading() != nil {
			return
		}
		if err := c.NodeReplace(ctx, id); err != nil && ctx.Err() == nil && !errors.Is(err, layout.ErrNoSpare) {
			c.log.Warn("replace a node down", "node", id, "err", err)
		}
	}
}

// SparesDue is the nodes of m down for at least after, still placed in
// chains, in m's order. A node's time down counts from since (the
// replicated date of its splicing), so a new leader does not start it
// again; an undated node (down in the layout a controller started with)
// counts from when this controller first saw it down, which seen keeps
// (updated).
func SparesDue(m *layout.Map, since, seen map[wire.NodeID]time.Time, now time.Time, after time.Duration) []wire.NodeID {
	down := m.Down()
	for id := range seen {
		if !slices.Contains(down, id) {
			delete(seen, id)
		}
	}
	var due []wire.NodeID
	for _, id := range down {
		t, ok := since[id]
		if !ok {
			if t, ok = seen[id]; !ok {
				seen[id] = now
				continue
			}
		}
		if now.Sub(t) >= after && m.Placed(id) > 0 {
			due = append(due, id)
		}
	}
	return due
}

// AdoptLayout takes m, a layout the nodes hold (gossiped by an earlier
// controller), if it leads and m's epoch is above its own: a controller
// restarted from its YAML (epoch 1, nobody down) then serves and programs
// the nodes' epoch, never an older one. With program, the data planes and
// nodes get m as from SetLayout; without (before Setup programs the
// planes), only the state takes it. It reports whether m was taken.
func (c *Controller) AdoptLayout(ctx context.Context, m *layout.Map, program bool) (bool, error) {
	c.reconfMu.Lock()
	defer c.reconfMu.Unlock()
	cur := c.Layout()
	if m.Epoch() <= cur.Epoch() || c.Leading() != nil {
		return false, nil
	}
	c.log.Warn("adopting the nodes' newer layout", "epoch", m.Epoch(), "was", cur.Epoch(), "down", m.Down())
	if !program {
		cfg := m.Config()
		return true, c.repl.apply(command{Op: opLayout, Layout: &cfg, At: time.Now()})
	}
	return true, c.SetLayout(ctx, m)
}

// GossipedLayout is the newest layout gossip carries, if any parses.
func (c *Controller) GossipedLayout() (*layout.Map, bool) {
	c.gossip.mu.Lock()
	g := c.gossip.g
	c.gossip.mu.Unlock()
	if g == nil {
		return nil, false
	}
	b, ok := g.Layout()
	if !ok {
		return nil, false
	}
	m, err := layout.Parse(b)
	if err != nil {
		c.log.Warn("gossiped layout", "err", err)
		return nil, false
	}
	return m, true
}

// RunAdopt adopts every newer layout that gossip brings (AdoptLayout,
// programming it), signalled on learned, until ctx ends.
func (c *Controller) RunAdopt(ctx context.Context, learned <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-learned:
		}
		if m, ok := c.GossipedLayout(); ok {
			if _, err := c.AdoptLayout(ctx, m, true); err != nil && ctx.Err() == nil {
				c.log.Warn("adopt the nodes' layout", "epoch", m.Epoch(), "err", err)
			}
		}
	}
}

// reconcileEvery is how often the leader checks the layout against the
// nodes' liveness.
const reconcileEvery = 250 * time.Millisecond

// reconcile splices out each node known dead and still in its chains, and
// adds back each node known alive and spliced out; Reconcile decides.
func (c *Controller) reconcile(ctx context.Context, alive map[wire.NodeID]bool) error {
	var errs []error
	for _, ch := range Reconcile(c.Layout(), alive) {
		var err error
		if ch.Alive {
			err = c.NodeUp(ctx, ch.Node)
		} else {
			err = c.NodeDown(ctx, ch.Node)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d (alive %v): %w", ch.Node, ch.Alive, err))
		}
	}
	return errors.Join(errs...)
}

// Settled is the liveness that Reconcile acts on: alive, less the nodes
// seen up for less than after (since upSince), whose liveness is not yet
// known for sure.
func Settled(alive map[wire.NodeID]bool, upSince map[wire.NodeID]time.Time, now time.Time, after time.Duration) map[wire.NodeID]bool {
	out := make(map[wire.NodeID]bool, len(alive))
	for id, a := range alive {
		if !a || now.Sub(upSince[id]) >= after {
			out[id] = a
		}
	}
	return out
}

func (c *Controller) rejoinAfter() time.Duration {
	if c.cfg.RejoinAfter > 0 {
		return c.cfg.RejoinAfter
	}
	return gossip.DefaultFailureTimeout
}

// LivenessChange is a node to splice out (Alive false) or to add back as
// a tail (Alive true).
type LivenessChange struct {
	Node  wire.NodeID
	Alive bool
}

// Reconcile is the changes that bring layout m in line with the nodes'
// last known liveness, in node order; nodes of unknown liveness are left
// as they are.
func Reconcile(m *layout.Map, alive map[wire.NodeID]bool) []LivenessChange {
	var out []LivenessChange
	down := m.Down()
	for _, n := range m.Nodes() {
		a, ok := alive[n]
		if !ok {
			continue
		}
		if isDown := slices.Contains(down, n); a == isDown {
			out = append(out, LivenessChange{Node: n, Alive: a})
		}
	}
	return out
}
