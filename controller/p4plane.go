package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	p4 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// VSBGroup is the PRE multicast group the P4 program sends accepted VSBs to
// (VSB_MCAST_GROUP in p4/include/defines.p4).
const VSBGroup = 1

// writeBatch is the number of updates per P4Runtime Write.
const writeBatch = 4096

// InstallEntries writes the slots' tables tableBatch slots per Write (a
// slot of 4 locations is 15 table entries), Setup the partitions
// setupPartitions per Write (7 entries each for chains of 3), tableWriters
// Writes at once.
const (
	tableBatch      = 64
	setupPartitions = 128
	tableWriters    = 2
)

// P4Plane programs one P4Runtime device (the software data plane, BMv2 or
// Tofino) through the netdir P4 program's tables: p4/include documents each.
type P4Plane struct {
	name string
	c    *p4rt.Client
	s    *p4rt.Schema
	bits uint
	// Window is the fine score's horizon in ns (directory.Config.Window),
	// realised as range entries of score_a and score_b; 0 installs none
	// (the software data plane computes it exactly).
	Window uint64
	// Routes are the switch's static IPv4 routes (routes_v4): how replies
	// reach clients and nodes reach each other through it. Setup installs
	// them, so a re-sync after a pipeline push brings them back.
	Routes []Route

	// installed are the node_addr entries Setup wrote since the last
	// pipeline push (nil: none, the device is bare): a re-sync on a layout
	// change modifies what is there, and inserts only the new nodes.
	installed map[wire.NodeID]bool
	// slots are the entries installed since the last pipeline push: a
	// re-sync on a layout change replaces them (remove, then install).
	// The controller's keysMu orders every call that touches them. Their
	// bucket tables are what a change of weights or a removal starts from:
	// the range entries of their runs are the ones installed.
	slots map[uint32]Entry
	// parts are the partitions' chains and bucket tables installed since
	// the last pipeline push (the controller's partsMu orders the calls).
	parts map[uint32]partition

	// hits is each slot's hit count as ReadHits reports it. A P4 counter
	// cell outlives its key (BMv2 keeps counting into it across entries, and
	// P4Runtime offers no reset that every target implements), and a
	// pipeline push zeroes every cell while the controller keeps its keys.
	mu   sync.Mutex
	hits map[uint32]*slotHits
}

// partition is what a partition's entries say: its chain and bucket table.
type partition struct {
	chain   []wire.NodeID
	buckets []uint8
}

// slotHits counts one slot's hits for its entry: carry plus what the cell
// gained since base.
type slotHits struct {
	gen         uint32 // the entry's generation
	base, carry uint64
	last        uint64 // the last count reported
}

// Route is one routes_v4 entry: packets to Prefix leave on Port with the
// given source and destination MACs.
type Route struct {
	Prefix netip.Prefix
	Port   uint32
	SrcMAC net.HardwareAddr
	DstMAC net.HardwareAddr
}

// NewP4Plane wraps a connected, primary client whose device runs the
// pipeline described by schema.
func NewP4Plane(name string, c *p4rt.Client, schema *p4rt.Schema) *P4Plane {
	return &P4Plane{name: name, c: c, s: schema, hits: map[uint32]*slotHits{}}
}

// Name names the device.
func (p *P4Plane) Name() string { return p.name }

// PushPipeline pushes the P4Info and deviceConfig (the BMv2 JSON, Tofino's
// binary and context; nil for the software data plane) with the VSB group
// deleted first. BMv2 keeps PRE multicast groups across a pipeline push
// while PI forgets them, so the group that Setup inserts again after a push
// would be a second copy, and every VSB would reach the agents twice. The
// delete's error is ignored: a device without the group (fresh, restarted,
// or with no pipeline yet) refuses it, and a controller that may not push
// hears so from the push.
func (p *P4Plane) PushPipeline(ctx context.Context, deviceConfig []byte) error {
	_ = p.c.Write(ctx, p4rt.MulticastGroup(p4.Update_DELETE, VSBGroup, nil))
	p.installed, p.slots, p.parts = nil, nil, nil
	return p.c.SetPipeline(ctx, p.s.Info, deviceConfig)
}

func u(v uint64) []byte { return p4rt.Uint(v) }

// write sends updates in batches.
func (p *P4Plane) write(ctx context.Context, ups []*p4.Update) error {
	for len(ups) > 0 {
		n := min(len(ups), writeBatch)
		if err := p.c.Write(ctx, ups[:n]...); err != nil {
			return err
		}
		ups = ups[n:]
	}
	return nil
}

// writeParallel builds and writes n batches of updates, each in a
// goroutine of its own, at most tableWriters at once: the device decodes one
// Write while it applies another, and this side builds the next meanwhile.
// Batches must not depend on each other's order.
func (p *P4Plane) writeParallel(ctx context.Context, n int, batch func(i int) ([]*p4.Update, error)) error {
	errs := make([]error, n)
	sem := make(chan struct{}, tableWriters)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ups, err := batch(i)
			if err == nil {
				err = p.write(ctx, ups)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// nodeAddrTables are the node-address tables and their actions: one per
// fine-score candidate, with the same entries.
var nodeAddrTables = []struct{ table, action string }{
	{"node_addr", "set_node_addr"},
	{"node_addr_b", "set_node_addr_b"},
}

// entry builds an entry, panicking on schema mismatches only through error.
func (p *P4Plane) entry(table string, m []p4rt.Match, action string, params ...p4rt.Param) (*p4.TableEntry, error) {
	return p.s.Entry(table, m, action, params...)
}

// Setup installs node addresses, storage ports, every partition with even
// buckets, the fine-score ranges, the routes and the VSB multicast group;
// on a device it set up before (a layout change) it modifies them, and
// inserts only the addresses of nodes new to it.
func (p *P4Plane) Setup(ctx context.Context, m *layout.Map, vsbGroup []uint32) error {
	if err := p.checkWindow(); err != nil {
		return err
	}
	p.bits = m.Bits()
	t := p4.Update_INSERT
	if p.installed != nil {
		t = p4.Update_MODIFY
	}
	var ups []*p4.Update
	nodes := map[wire.NodeID]bool{}
	ports := map[uint32]bool{}
	for _, id := range m.Nodes() {
		n, _ := m.Node(id)
		ap, _ := m.Addr(id)
		if !ap.Addr().Is4() {
			return fmt.Errorf("node %d: address %s: want IPv4", n.ID, ap)
		}
		ip := ap.Addr().As4()
		// node_addr and node_addr_b hold the same entries: each reads
		// one fine-score candidate's address (p4/include/node_addr.p4).
		for _, t := range nodeAddrTables {
			e, err := p.entry(t.table, []p4rt.Match{{Field: "node", Value: u(uint64(n.ID))}}, t.action,
				p4rt.Param{Name: "mac", Value: append([]byte{0}, n.MAC...)}, p4rt.Param{Name: "ip", Value: ip[:]},
				p4rt.Param{Name: "udp_port", Value: u(uint64(ap.Port()))}, p4rt.Param{Name: "port", Value: u(uint64(n.Port))})
			if err != nil {
				return err
			}
			if p.installed[n.ID] {
				ups = append(ups, p4rt.Modify(e))
			} else {
				ups = append(ups, p4rt.Insert(e))
			}
		}
		nodes[n.ID] = true
		if n.Port != 0 && !ports[n.Port] {
			ports[n.Port] = true
			e, err := p.entry("storage_ports", []p4rt.Match{{Field: "ingress_port", Value: u(uint64(n.Port))}}, "storage_port")
			if err != nil {
				return err
			}
			ups = append(ups, p4rt.TableUpdate(t, e))
		}
	}
	// The partitions table matches a prefix of the hash by LPM; its one
	// field's name and width come from the P4Info.
	pt, err := p.s.Table("partitions")
	if err != nil {
		return err
	}
	if len(pt.GetMatchFields()) != 1 || uint(pt.GetMatchFields()[0].GetBitwidth()) < m.Bits() {
		return fmt.Errorf("partitions table: want one LPM field of at least %d bits", m.Bits())
	}
	hashField, hashBits := pt.GetMatchFields()[0].GetName(), uint(pt.GetMatchFields()[0].GetBitwidth())
	// Each partition's bucket runs, then its partitions entry, in one
	// batch; the batches go out in parallel once the node addresses are in.
	var parts [][]*p4.Update
	even := map[int][]uint8{} // by chain length
	for part, chain := range m.Chains() {
		if part%setupPartitions == 0 {
			parts = append(parts, nil)
		}
		if even[len(chain)] == nil {
			even[len(chain)] = evenBuckets(len(chain))
		}
		if old, ok := p.parts[uint32(part)]; ok && slices.Equal(old.chain, chain) && slices.Equal(old.buckets, even[len(chain)]) {
			continue // a layout change that leaves the partition as it is
		}
		bu, err := p.partitionBuckets(uint32(part), chain, even[len(chain)])
		if err != nil {
			return err
		}
		e, err := p.entry("partitions",
			[]p4rt.Match{{Field: hashField, Value: u(uint64(part) << (hashBits - m.Bits())), PrefixLen: int32(m.Bits())}},
			"set_partition", p4rt.Param{Name: "id", Value: u(uint64(part))},
			p4rt.Param{Name: "r", Value: u(uint64(len(chain)))}, p4rt.Param{Name: "head", Value: u(uint64(chain[0]))})
		if err != nil {
			return err
		}
		parts[len(parts)-1] = append(append(parts[len(parts)-1], bu...), p4rt.TableUpdate(t, e))
	}
	if err := p.write(ctx, ups); err != nil {
		return err
	}
	if err := p.writeParallel(ctx, len(parts), func(i int) ([]*p4.Update, error) { return parts[i], nil }); err != nil {
		return err
	}
	for part, chain := range m.Chains() {
		p.notePartition(uint32(part), chain, even[len(chain)])
	}
	ups = ups[:0]
	if p.Window > 0 {
		su, err := p.scoreRanges(t)
		if err != nil {
			return err
		}
		ups = append(ups, su...)
	}
	for _, r := range p.Routes {
		if !r.Prefix.Addr().Is4() || len(r.SrcMAC) != 6 || len(r.DstMAC) != 6 {
			return fmt.Errorf("route %v: want an IPv4 prefix and 6-byte MACs", r.Prefix)
		}
		ip := r.Prefix.Masked().Addr().As4()
		var m []p4rt.Match // a default route omits the field (P4Runtime 9.1.1; PI refuses prefix length 0)
		if r.Prefix.Bits() > 0 {
			m = []p4rt.Match{{Field: "ipv4_dst", Value: ip[:], PrefixLen: int32(r.Prefix.Bits())}}
		}
		e, err := p.entry("routes_v4", m, "route",
			p4rt.Param{Name: "port", Value: u(uint64(r.Port))}, p4rt.Param{Name: "smac", Value: r.SrcMAC},
			p4rt.Param{Name: "dmac", Value: r.DstMAC})
		if err != nil {
			return err
		}
		ups = append(ups, p4rt.TableUpdate(t, e))
	}
	if err := p.write(ctx, ups); err != nil {
		return err
	}
	if len(vsbGroup) > 0 {
		if err := p.c.Write(ctx, p4rt.MulticastGroup(t, VSBGroup, vsbGroup)); err != nil {
			return err
		}
	}
	for id := range p.installed {
		nodes[id] = true // kept: a layout change never drops a node's address
	}
	p.installed = nodes
	return nil
}

func evenBuckets(n int) []uint8 {
	return directory.BucketsForWeights(make([]uint32, n))
}

// bucketRuns are the updates that take a bucket table's two copies
// (prefix+"_a", prefix+"_b", actions act+"_a", act+"_b") from old (nil:
// nothing installed) to b, one range entry per run (directory.Runs): old's
// runs that b lacks are deleted, runs in both modified (their node may have
// changed), b's new runs inserted, in that order. Runs never overlap, so a
// packet between two of these updates meets either table's index for its
// bucket, or none (the default: the head); each is a member.
func (p *P4Plane) bucketRuns(prefix, act string, owner p4rt.Match, old, b []uint8, node func(idx uint8) wire.NodeID) ([]*p4.Update, error) {
	del, same, add := directory.RunChanges(old, b)
	var ups []*p4.Update
	for _, step := range []struct {
		runs []directory.Run
		t    p4.Update_Type
	}{{del, p4.Update_DELETE}, {same, p4.Update_MODIFY}, {add, p4.Update_INSERT}} {
		for _, copy := range []string{"_a", "_b"} {
			for _, r := range step.runs {
				e, err := p.entry(prefix+copy, []p4rt.Match{owner, {Field: "bucket", Value: u(uint64(r.Lo)), High: u(uint64(r.Hi))}},
					act+copy, p4rt.Param{Name: "index", Value: u(uint64(r.Index))}, p4rt.Param{Name: "node", Value: u(uint64(node(r.Index)))})
				if err != nil {
					return nil, err
				}
				e.Priority = 1
				ups = append(ups, p4rt.TableUpdate(step.t, e))
			}
		}
	}
	return ups, nil
}

// partitionBuckets writes both copies of a partition's bucket table over
// what this plane installed there since the last pipeline push (the caller
// notes b once written: notePartition).
func (p *P4Plane) partitionBuckets(part uint32, chain []wire.NodeID, b []uint8) ([]*p4.Update, error) {
	for _, idx := range b {
		if int(idx) >= len(chain) {
			return nil, fmt.Errorf("partition %d: bucket entry %d of a chain of %d", part, idx, len(chain))
		}
	}
	return p.bucketRuns("buckets", "set_chain", p4rt.Match{Field: "partition", Value: u(uint64(part))},
		p.parts[part].buckets, b, func(idx uint8) wire.NodeID { return at(chain, idx) })
}

// notePartition records chain and b as partition part's installed chain and
// bucket table, once written.
func (p *P4Plane) notePartition(part uint32, chain []wire.NodeID, b []uint8) {
	if p.parts == nil {
		p.parts = map[uint32]partition{}
	}
	p.parts[part] = partition{chain: slices.Clone(chain), buckets: slices.Clone(b)}
}

// slotBuckets writes both copies of a slot's bucket table, from old (nil:
// none installed) to e's.
func (p *P4Plane) slotBuckets(old []uint8, e *Entry) ([]*p4.Update, error) {
	for _, idx := range e.Buckets {
		if int(idx) >= len(e.Locs) {
			return nil, fmt.Errorf("slot %d: bucket entry %d of %d locations", e.Slot, idx, len(e.Locs))
		}
	}
	return p.bucketRuns("slot_buckets", "set_loc", p4rt.Match{Field: "slot", Value: u(uint64(e.Slot))},
		old, e.Buckets, func(idx uint8) wire.NodeID { return at(e.Locs, idx) })
}

// at is nodes[idx], or 0 past its end: the node of a deleted run, which a
// delete does not need (it names only the match).
func at(nodes []wire.NodeID, idx uint8) wire.NodeID {
	if int(idx) < len(nodes) {
		return nodes[idx]
	}
	return 0
}

// slotTables are a slot's entries other than its slots entry: members and
// both bucket tables, inserted (t INSERT) or deleted (DELETE).
func (p *P4Plane) slotTables(t p4.Update_Type, e *Entry) ([]*p4.Update, error) {
	var ups []*p4.Update
	up := func(te *p4.TableEntry) {
		ups = append(ups, p4rt.TableUpdate(t, te))
	}
	for i, n := range e.Locs {
		te, err := p.entry("members", []p4rt.Match{{Field: "slot", Value: u(uint64(e.Slot))}, {Field: "node", Value: u(uint64(n))}},
			"member", p4rt.Param{Name: "index", Value: u(uint64(i))})
		if err != nil {
			return nil, err
		}
		up(te)
	}
	var bu []*p4.Update
	var err error
	if t == p4.Update_DELETE {
		bu, err = p.slotBuckets(p.installedBuckets(e), &Entry{Slot: e.Slot, Locs: e.Locs})
	} else {
		bu, err = p.slotBuckets(nil, e)
	}
	return append(ups, bu...), err
}

// installedBuckets is the bucket table this plane installed for e's key at
// its slot, or e's if it installed none.
func (p *P4Plane) installedBuckets(e *Entry) []uint8 {
	if old, ok := p.slots[e.Slot]; ok && old.Hash == e.Hash {
		return old.Buckets
	}
	return e.Buckets
}

func (p *P4Plane) slotEntry(e *Entry) (*p4.TableEntry, error) {
	return p.entry("slots", []p4rt.Match{{Field: "keyhash", Value: e.Hash[:]}}, "hit",
		p4rt.Param{Name: "slot", Value: u(uint64(e.Slot))}, p4rt.Param{Name: "n", Value: u(uint64(len(e.Locs)))},
		p4rt.Param{Name: "r", Value: u(uint64(e.R))}, p4rt.Param{Name: "head", Value: u(uint64(e.Locs[0]))},
		p4rt.Param{Name: "gen", Value: u(uint64(e.Gen))}, p4rt.Param{Name: "ver", Value: u(e.Ver)})
}

// InstallEntry writes the slot's tables, then the slots entry that makes
// the key hit, so no packet meets a half-built slot. Before the key can hit,
// it notes the slot's hit count, from which the key's own hits count; the
// same entry installed again (a re-sync after a pipeline push) goes on from
// the count reported before.
func (p *P4Plane) InstallEntry(ctx context.Context, e *Entry) error {
	if err := p.removeInstalled(ctx, []Entry{*e}); err != nil {
		return err
	}
	ups, err := p.slotTables(p4.Update_INSERT, e)
	if err != nil {
		return err
	}
	if err := p.write(ctx, ups); err != nil {
		return err
	}
	base, err := p.readHitCell(ctx, e.Slot)
	if err != nil {
		return err
	}
	p.mu.Lock()
	h := &slotHits{gen: e.Gen, base: base}
	if old := p.hits[e.Slot]; old != nil && old.gen == e.Gen {
		h.carry, h.last = old.last, old.last
	}
	p.hits[e.Slot] = h
	p.mu.Unlock()
	se, err := p.slotEntry(e)
	if err != nil {
		return err
	}
	if err := p.c.Write(ctx, p4rt.Insert(se)); err != nil {
		return err
	}
	p.noteInstalled(*e)
	return nil
}

// removeInstalled removes the entries installed at es's slots, which a
// re-sync without a pipeline push (a layout change) finds in place.
func (p *P4Plane) removeInstalled(ctx context.Context, es []Entry) error {
	for i := range es {
		if old, ok := p.slots[es[i].Slot]; ok {
			if err := p.RemoveEntry(ctx, &old); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *P4Plane) noteInstalled(es ...Entry) {
	if p.slots == nil {
		p.slots = map[uint32]Entry{}
	}
	for _, e := range es {
		e.Buckets = slices.Clone(e.Buckets)
		p.slots[e.Slot] = e
	}
}

// InstallEntries installs many entries as InstallEntry does each, in
// fewer writes (a re-sync's): every slot's tables, one read of the hit
// counter, then every slots entry.
func (p *P4Plane) InstallEntries(ctx context.Context, es []Entry) error {
	if err := p.removeInstalled(ctx, es); err != nil {
		return err
	}
	// The slots' tables, tableBatch slots per Write and tableWriters
	// Writes in flight: the device decodes one batch while it applies
	// another, and this side builds the next meanwhile. A slot's tables
	// are all in one batch, and every batch is done before any slots entry
	// is written.
	batches := slices.Collect(slices.Chunk(es, tableBatch))
	if err := p.writeParallel(ctx, len(batches), func(i int) ([]*p4.Update, error) {
		var ups []*p4.Update
		for j := range batches[i] {
			u, err := p.slotTables(p4.Update_INSERT, &batches[i][j])
			if err != nil {
				return nil, err
			}
			ups = append(ups, u...)
		}
		return ups, nil
	}); err != nil {
		return err
	}
	slots := make([]uint32, len(es))
	for i := range es {
		slots[i] = es[i].Slot
	}
	base, err := p.readHitCells(ctx, slots)
	if err != nil {
		return err
	}
	var ups []*p4.Update
	p.mu.Lock()
	for i := range es {
		e := &es[i]
		h := &slotHits{gen: e.Gen, base: base[e.Slot]}
		if old := p.hits[e.Slot]; old != nil && old.gen == e.Gen {
			h.carry, h.last = old.last, old.last
		}
		p.hits[e.Slot] = h
		se, err := p.slotEntry(e)
		if err != nil {
			p.mu.Unlock()
			return err
		}
		ups = append(ups, p4rt.Insert(se))
	}
	p.mu.Unlock()
	if err := p.write(ctx, ups); err != nil {
		return err
	}
	p.noteInstalled(es...)
	return nil
}

// RemoveEntry deletes the slots entry first, then the slot's tables.
func (p *P4Plane) RemoveEntry(ctx context.Context, e *Entry) error {
	se, err := p.slotEntry(e)
	if err != nil {
		return err
	}
	if err := p.c.Write(ctx, p4rt.Delete(se)); err != nil {
		return err
	}
	ups, err := p.slotTables(p4.Update_DELETE, e)
	if err != nil {
		return err
	}
	if err := p.write(ctx, ups); err != nil {
		return err
	}
	delete(p.slots, e.Slot)
	return nil
}

// SetSlotBuckets replaces a slot's bucket tables: the runs that changed.
func (p *P4Plane) SetSlotBuckets(ctx context.Context, e *Entry) error {
	ups, err := p.slotBuckets(p.installedBuckets(e), e)
	if err != nil {
		return err
	}
	if err := p.write(ctx, ups); err != nil {
		return err
	}
	if old, ok := p.slots[e.Slot]; ok && old.Hash == e.Hash {
		old.Buckets = slices.Clone(e.Buckets)
		p.slots[e.Slot] = old
	}
	return nil
}

// SetPartitionBuckets replaces a partition's bucket tables: the runs that
// changed.
func (p *P4Plane) SetPartitionBuckets(ctx context.Context, part uint32, chain []wire.NodeID, b []uint8) error {
	ups, err := p.partitionBuckets(part, chain, b)
	if err != nil {
		return err
	}
	if err := p.write(ctx, ups); err != nil {
		return err
	}
	p.notePartition(part, chain, b)
	return nil
}

func (p *P4Plane) counterID(name string) (uint32, error) {
	c, err := p.s.Counter(name)
	if err != nil {
		return 0, err
	}
	return c.GetPreamble().GetId(), nil
}

// readHitCell reads one slot's slot_hits cell.
func (p *P4Plane) readHitCell(ctx context.Context, slot uint32) (uint64, error) {
	cells, err := p.readHitCells(ctx, []uint32{slot})
	return cells[slot], err
}

// readHitCells reads the slot_hits cells of slots, in one Read: a re-sync
// installs its entries in chunks, and the counter has a cell per slot of the
// whole directory.
func (p *P4Plane) readHitCells(ctx context.Context, slots []uint32) (map[uint32]uint64, error) {
	id, err := p.counterID("slot_hits")
	if err != nil {
		return nil, err
	}
	filters := make([]*p4.Entity, len(slots))
	for i, s := range slots {
		filters[i] = &p4.Entity{Entity: &p4.Entity_CounterEntry{CounterEntry: &p4.CounterEntry{
			CounterId: id, Index: &p4.Index{Index: int64(s)},
		}}}
	}
	es, err := p.c.Read(ctx, filters...)
	if err != nil {
		return nil, err
	}
	out := make(map[uint32]uint64, len(slots))
	for _, e := range es {
		if c := e.GetCounterEntry(); c != nil && c.GetCounterId() == id {
			out[uint32(c.GetIndex().GetIndex())] = uint64(c.GetData().GetPacketCount())
		}
	}
	return out, nil
}

// ReadHits reads the slot_hits counter: each slot's hits since its entry
// was first installed.
func (p *P4Plane) ReadHits(ctx context.Context, slots []uint32) (map[uint32]uint64, error) {
	out := map[uint32]uint64{}
	if len(slots) == 0 {
		return out, nil
	}
	id, err := p.counterID("slot_hits")
	if err != nil {
		return nil, err
	}
	cells, err := p.c.ReadCounter(ctx, id)
	if err != nil {
		return nil, err
	}
	want := map[uint32]bool{}
	for _, s := range slots {
		want[s] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cells {
		if i := uint32(c.GetIndex().GetIndex()); want[i] {
			n := uint64(c.GetData().GetPacketCount())
			if h := p.hits[i]; h != nil {
				h.last = h.carry + n - min(h.base, n)
				n = h.last
			}
			out[i] = n
		}
	}
	return out, nil
}

// ReadSketch reads the four sketch rows.
func (p *P4Plane) ReadSketch(ctx context.Context) (out [directory.SketchRows][directory.SketchCols]uint64, _ error) {
	for r := 0; r < directory.SketchRows; r++ {
		id, err := p.counterID(fmt.Sprintf("sketch_row%d", r))
		if err != nil {
			return out, err
		}
		cells, err := p.c.ReadCounter(ctx, id)
		if err != nil {
			return out, err
		}
		for _, c := range cells {
			if i := c.GetIndex().GetIndex(); i >= 0 && i < directory.SketchCols {
				out[r][i] = uint64(c.GetData().GetPacketCount())
			}
		}
	}
	return out, nil
}

// checkWindow: the score tables' latency key must reach past the Window. A
// latency beyond the key's range reaches the table clamped to the key's
// largest value (Tofino keys 20 bits: p4/tna/arch.p4), which scores
// Window/t = 0 only if no entry covers it, that is if Window is below it.
func (p *P4Plane) checkWindow() error {
	if p.Window == 0 {
		return nil
	}
	t, err := p.s.Table("score_a")
	if err != nil {
		return err
	}
	for _, f := range t.GetMatchFields() {
		if f.GetName() != "latency" {
			continue
		}
		if top := uint64(1)<<f.GetBitwidth() - 1; p.Window >= top {
			return fmt.Errorf("controller: fine-score window %d ns: the score tables' %d-bit latency key needs it below %d",
				p.Window, f.GetBitwidth(), top)
		}
		return nil
	}
	return fmt.Errorf("controller: table score_a has no latency key")
}

// scoreRanges realises floor(Window/t) for t in 1..Window as one range entry
// per distinct quotient (about 2·sqrt(Window) entries), in score_a and
// score_b.
func (p *P4Plane) scoreRanges(t p4.Update_Type) ([]*p4.Update, error) {
	var ups []*p4.Update
	w := p.Window
	for lo := uint64(1); lo <= w; {
		q := w / lo
		hi := w / q // the largest t with the same quotient
		for _, copy := range []string{"a", "b"} {
			e, err := p.entry("score_"+copy, []p4rt.Match{{Field: "latency", Value: u(lo), High: u(hi)}},
				"set_quota_"+copy, p4rt.Param{Name: "quota", Value: u(q)})
			if err != nil {
				return nil, err
			}
			e.Priority = 1
			ups = append(ups, p4rt.TableUpdate(t, e))
		}
		lo = hi + 1
	}
	return ups, nil
}
