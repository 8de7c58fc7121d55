package model

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strings"
	"sync"

	p4config "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// P4Target maps the P4 program's entities (p4/build/netdir.p4info.txtpb)
// onto the software data plane, so that the controller programs the model
// through the same P4Runtime writes as BMv2 and Tofino. It implements
// p4rtserver.Target.
//
// A hot key's state is spread over several P4 tables indexed by its slot:
// members (its LocationList), slot_buckets_a (its split: one range entry
// per run of equal buckets, directory.Runs), then the slots entry that
// activates it. The target gathers them per slot and installs the
// slot in the directory core when the slots entry arrives, which is why the
// controller writes a slot's tables before its slots entry (as it must for
// a switch, too, so that no packet meets a half-built slot). Partitions are
// gathered the same way from buckets_a and then partitions.
//
// Entities the model has no use for (L2/L3 forwarding, storage ports, which
// the model derives from node addresses, the fine-score range tables, which
// it computes exactly, and the second copies of the bucket tables) are
// accepted and stored by the server but change nothing here.
type P4Target struct {
	sw *Switch

	mu       sync.Mutex
	tables   map[uint32]string // table id → role (its last name component)
	counters map[uint32]string
	slots    map[uint32]*slotShadow // by the controller's slot index
	parts    map[uint32]*partShadow // by partition id
}

type slotShadow struct {
	hash    wire.KeyHash
	active  bool
	n, r    int
	locs    [directory.MaxLocations]wire.NodeID
	locSet  uint32
	buckets [directory.Buckets]uint8
	bktSet  uint32
}

type partShadow struct {
	active  bool
	r       int
	head    wire.NodeID
	nodes   [directory.MaxChain]wire.NodeID // by chain index, from bucket entries
	buckets [directory.Buckets]uint8
	bktSet  uint32
}

// NewP4Target returns the P4Runtime target of sw.
func NewP4Target(sw *Switch) *P4Target {
	return &P4Target{sw: sw, slots: map[uint32]*slotShadow{}, parts: map[uint32]*partShadow{}}
}

func role(name string) string { return name[strings.LastIndex(name, ".")+1:] }

// SetPipeline indexes the P4Info's tables and counters by role.
func (t *P4Target) SetPipeline(info *p4config.P4Info, _ []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tables = map[uint32]string{}
	t.counters = map[uint32]string{}
	for _, tb := range info.GetTables() {
		t.tables[tb.GetPreamble().GetId()] = role(tb.GetPreamble().GetName())
	}
	for _, c := range info.GetCounters() {
		t.counters[c.GetPreamble().GetId()] = role(c.GetPreamble().GetName())
	}
	for _, need := range []string{"slots", "members", "slot_buckets_a", "partitions", "buckets_a", "node_addr"} {
		found := false
		for _, r := range t.tables {
			found = found || r == need
		}
		if !found {
			return fmt.Errorf("P4Info has no %q table: not a netdir pipeline", need)
		}
	}
	t.slots = map[uint32]*slotShadow{}
	t.parts = map[uint32]*partShadow{}
	// A pipeline push empties a switch's tables: the directory goes with
	// them (a new leader's push, then its re-sync of every entry).
	for _, sl := range t.sw.Snapshot().Slots {
		if err := t.sw.Evict(sl.Slot.Hash); err != nil && !errors.Is(err, directory.ErrNotFound) {
			return err
		}
	}
	return nil
}

// entryFields returns the entry's match values by field name and its
// action params by name, as integers. A range match gives its low end under
// the field's name and its high end under the name with rangeHigh appended.
func entryFields(tbl *p4config.Table, act *p4config.Action, e *p4.TableEntry) (fields, fields, int32) {
	match := fields{}
	var prefix int32
	for _, m := range e.GetMatch() {
		for _, f := range tbl.GetMatchFields() {
			if f.GetId() != m.GetFieldId() {
				continue
			}
			switch {
			case m.GetExact() != nil:
				match.set(f.GetName(), m.GetExact().GetValue())
			case m.GetLpm() != nil:
				match.set(f.GetName(), m.GetLpm().GetValue())
				prefix = m.GetLpm().GetPrefixLen()
			case m.GetRange() != nil:
				match.set(f.GetName(), m.GetRange().GetLow())
				match.set(f.GetName()+rangeHigh, m.GetRange().GetHigh())
			}
		}
	}
	params := fields{}
	for _, p := range e.GetAction().GetAction().GetParams() {
		for _, ap := range act.GetParams() {
			if ap.GetId() == p.GetParamId() {
				params.set(ap.GetName(), p.GetValue())
			}
		}
	}
	return match, params, prefix
}

// rangeHigh marks a range match's high end in entryFields' map.
const rangeHigh = "/high"

// bucketRange returns the entry's bucket range as a mask of buckets: a
// range match (the P4 program's), or one bucket for an exact match.
func bucketRange(match fields) (uint32, error) {
	lo, err := u32(match, "bucket")
	if err != nil {
		return 0, err
	}
	hi := lo
	if _, ok := match["bucket"+rangeHigh]; ok {
		if hi, err = u32(match, "bucket"+rangeHigh); err != nil {
			return 0, err
		}
	}
	if hi < lo || hi >= directory.Buckets {
		return 0, fmt.Errorf("bucket range %d..%d of %d buckets", lo, hi, directory.Buckets)
	}
	return uint32(uint64(1)<<(hi+1) - 1<<lo), nil
}

// setBuckets sets the buckets of mask to idx.
func setBuckets(b *[directory.Buckets]uint8, mask uint32, idx uint8) {
	for i := range b {
		if mask&(1<<i) != 0 {
			b[i] = idx
		}
	}
}

// fields are an entry's match values or action params by name, those of
// at most 64 bits (the key hash is read from the entry itself).
type fields map[string]uint64

// set records v (big-endian) under k if it fits 64 bits.
func (f fields) set(k string, v []byte) {
	for len(v) > 8 && v[0] == 0 {
		v = v[1:]
	}
	if len(v) > 8 {
		return
	}
	var x uint64
	for _, b := range v {
		x = x<<8 | uint64(b)
	}
	f[k] = x
}

func u32(m fields, k string) (uint32, error) {
	v, ok := m[k]
	if !ok || v > 1<<32-1 {
		return 0, fmt.Errorf("field %q missing or too wide", k)
	}
	return uint32(v), nil
}

// ApplyTable applies a validated table update.
func (t *P4Target) ApplyTable(ut p4.Update_Type, tbl *p4config.Table, act *p4config.Action, e *p4.TableEntry) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	match, params, prefix := entryFields(tbl, act, e)
	var width uint // the first match field's width (the partitions table's hash prefix)
	if fs := tbl.GetMatchFields(); len(fs) > 0 {
		width = uint(fs[0].GetBitwidth())
	}
	del := ut == p4.Update_DELETE
	switch t.tables[tbl.GetPreamble().GetId()] {
	case "members":
		slot, err := u32(match, "slot")
		if err != nil {
			return err
		}
		node, err := u32(match, "node")
		if err != nil {
			return err
		}
		s := t.slot(slot)
		if del {
			for i := range s.locs {
				if s.locSet&(1<<i) != 0 && uint32(s.locs[i]) == node {
					s.locSet &^= 1 << i
				}
			}
			return nil
		}
		idx, err := u32(params, "index")
		if err != nil || idx >= directory.MaxLocations {
			return fmt.Errorf("members: index %d: %v", idx, err)
		}
		s.locs[idx], s.locSet = wire.NodeID(node), s.locSet|1<<idx
		return nil
	case "slot_buckets_a":
		slot, err := u32(match, "slot")
		if err != nil {
			return err
		}
		mask, err := bucketRange(match)
		if err != nil {
			return err
		}
		s := t.slot(slot)
		if del {
			s.bktSet &^= mask
			return nil
		}
		idx, err := u32(params, "index")
		if err != nil || idx >= directory.MaxLocations {
			return fmt.Errorf("slot_buckets_a: index %d: %v", idx, err)
		}
		setBuckets(&s.buckets, mask, uint8(idx))
		s.bktSet |= mask
		if s.active && s.bktSet == ^uint32(0) {
			return t.sw.SetSlotBuckets(s.hash, s.buckets[:])
		}
		return nil
	case "slots":
		h := e.GetMatch()[0].GetExact().GetValue()
		if len(h) > wire.KeyHashLen {
			return fmt.Errorf("slots: key hash of %d bytes", len(h))
		}
		var kh wire.KeyHash
		copy(kh[wire.KeyHashLen-len(h):], h)
		slot, err := u32(params, "slot")
		if del {
			for _, s := range t.slots {
				if s.active && s.hash == kh {
					s.active = false
				}
			}
			return t.sw.Evict(kh)
		}
		if err != nil {
			return err
		}
		n, err1 := u32(params, "n")
		r, err2 := u32(params, "r")
		if err1 != nil || err2 != nil || n == 0 || n > directory.MaxLocations || r == 0 || r > n {
			return fmt.Errorf("slots: n=%d r=%d", n, r)
		}
		s := t.slot(slot)
		if s.locSet != uint32(1)<<n-1 || s.bktSet != ^uint32(0) {
			return fmt.Errorf("slot %d: install its members (%d of %d) and slot_buckets_a (%d of 32) before its slots entry",
				slot, bits.OnesCount32(s.locSet), n, bits.OnesCount32(s.bktSet))
		}
		if ut == p4.Update_MODIFY && s.active {
			t.sw.Evict(s.hash)
		}
		s.hash, s.n, s.r = kh, int(n), int(r)
		var seed uint64 // the action's seed version, where the P4 program has one
		if v, ok := params["ver"]; ok {
			seed = v
		}
		if _, err := t.sw.Insert(kh, s.locs[:n], int(r), seed, s.buckets[:]); err != nil {
			return err
		}
		s.active = true
		return nil
	case "buckets_a":
		p, err := u32(match, "partition")
		if err != nil {
			return err
		}
		mask, err := bucketRange(match)
		if err != nil {
			return err
		}
		ps := t.part(p)
		if del {
			ps.bktSet &^= mask
			return nil
		}
		idx, err1 := u32(params, "index")
		node, err2 := u32(params, "node")
		if err1 != nil || err2 != nil || idx >= directory.MaxChain {
			return fmt.Errorf("buckets_a: index %d node %d", idx, node)
		}
		ps.nodes[idx] = wire.NodeID(node)
		setBuckets(&ps.buckets, mask, uint8(idx))
		ps.bktSet |= mask
		if ps.active && ps.bktSet == ^uint32(0) {
			// A chain rewritten bucket by bucket (a layout change) passes
			// through states naming a node twice; a switch routes them
			// as they are, the model keeps the last whole chain until the
			// buckets (or the partitions entry that follows) make one.
			if err := t.installPartition(p, ps); err != nil && !errors.Is(err, directory.ErrBadChain) {
				return err
			}
		}
		return nil
	case "partitions":
		pbits := t.sw.DirectoryConfig().PartitionBits
		if int32(pbits) != prefix {
			return fmt.Errorf("partitions: prefix length %d, but the model runs %d partition bits", prefix, pbits)
		}
		if len(tbl.GetMatchFields()) != 1 || width < pbits || width > 32 {
			return fmt.Errorf("partitions: want one LPM field of %d..32 bits", pbits)
		}
		top, err := u32(match, tbl.GetMatchFields()[0].GetName())
		if err != nil {
			return err
		}
		if del {
			return nil // the core keeps a chain for every partition; a miss then has no better route
		}
		id, err1 := u32(params, "id")
		r, err2 := u32(params, "r")
		head, err3 := u32(params, "head")
		if err1 != nil || err2 != nil || err3 != nil {
			return fmt.Errorf("partitions: params")
		}
		if id != top>>(width-pbits) {
			return fmt.Errorf("partitions: entry for prefix %#x names partition %d; the model needs the hash's own partition %d", top, id, top>>(width-pbits))
		}
		ps := t.part(id)
		ps.r, ps.head, ps.active = int(r), wire.NodeID(head), true
		if ps.bktSet != ^uint32(0) {
			return fmt.Errorf("partition %d: install buckets_a (%d of 32) before its partitions entry", id, bits.OnesCount32(ps.bktSet))
		}
		return t.installPartition(id, ps)
	case "node_addr":
		node, err := u32(match, "node")
		if err != nil {
			return err
		}
		if del {
			return nil
		}
		ip, err1 := u32(params, "ip")
		port, err2 := u32(params, "udp_port")
		if err1 != nil || err2 != nil {
			return fmt.Errorf("node_addr: params")
		}
		a := netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)})
		return t.sw.AddNode(Node{ID: wire.NodeID(node), Addr: netip.AddrPortFrom(a, uint16(port))})
	}
	return nil
}

// installPartition sets a partition in the core. The P4 tables name the
// chain only through its bucket entries, so chain members no bucket points
// at are unknown; they receive no reads either, and the core gets the
// chain of the members that do, head first.
func (t *P4Target) installPartition(p uint32, ps *partShadow) error {
	chain := []wire.NodeID{ps.head}
	remap := map[uint8]uint8{0: 0}
	for i := 0; i < directory.Buckets; i++ {
		idx := ps.buckets[i]
		if _, ok := remap[idx]; !ok {
			remap[idx] = uint8(len(chain))
			chain = append(chain, ps.nodes[idx])
		}
	}
	var b [directory.Buckets]uint8
	for i := range b {
		b[i] = remap[ps.buckets[i]]
	}
	return t.sw.SetPartition(p, chain, b[:])
}

func (t *P4Target) slot(i uint32) *slotShadow {
	s := t.slots[i]
	if s == nil {
		s = &slotShadow{}
		t.slots[i] = s
	}
	return s
}

func (t *P4Target) part(i uint32) *partShadow {
	p := t.parts[i]
	if p == nil {
		p = &partShadow{}
		t.parts[i] = p
	}
	return p
}

// ApplyMulticast accepts the VSB group; the model's group is the agents' UDP
// addresses (Config.Multicast), which egress ports do not name.
func (t *P4Target) ApplyMulticast(p4.Update_Type, *p4.MulticastGroupEntry) error { return nil }

// ReadCounter serves slot_hits, sketch_row0..3 and drops from the core.
func (t *P4Target) ReadCounter(c *p4config.Counter, i int64) (*p4.CounterData, error) {
	t.mu.Lock()
	name := t.counters[c.GetPreamble().GetId()]
	var h wire.KeyHash
	active := false
	if s := t.slots[uint32(i)]; s != nil {
		h, active = s.hash, s.active
	}
	t.mu.Unlock()
	switch {
	case name == "slot_hits":
		if !active {
			return &p4.CounterData{}, nil
		}
		sl, _ := t.sw.Lookup(h)
		return &p4.CounterData{PacketCount: int64(sl.Hits)}, nil
	case strings.HasPrefix(name, "sketch_row"):
		r := int(name[len(name)-1] - '0')
		return &p4.CounterData{PacketCount: int64(t.sw.SketchCell(r, uint32(i)))}, nil
	case name == "drops":
		c, _ := t.sw.Counters()
		if i < int64(len(c.Drops)) {
			return &p4.CounterData{PacketCount: int64(c.Drops[i])}, nil
		}
	}
	return &p4.CounterData{}, nil
}
