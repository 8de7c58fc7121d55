package directory

import (
	"fmt"
	"unsafe"

	"github.com/netdir/netdir/internal/prefetch"
	"github.com/netdir/netdir/wire"
)

// Action is what a data plane does with a packet.
type Action uint8

const (
	// Drop: discard and count Reason.
	Drop Action = iota
	// Forward: send to storage node Verdict.Node (rewritten into the header).
	Forward
	// ToClient: a reply; deliver it to the client that sent the request
	// (plain L3 forwarding on a switch, a relay in the model).
	ToClient
	// Multicast: an accepted VSB; replicate it to the VSB group (agent hosts).
	Multicast
	// Pass: not directory traffic (node-to-node ops); forward it unchanged.
	Pass
)

var actionNames = [...]string{"drop", "forward", "to-client", "multicast", "pass"}

func (a Action) String() string { return actionNames[a] }

// Reason says why a packet was dropped.
type Reason uint8

const (
	ReasonNone         Reason = iota
	ReasonShort               // shorter than the fixed header
	ReasonMagic               // wrong magic
	ReasonVersion             // unsupported wire version
	ReasonUnknownOp           // op not defined
	ReasonNoRoute             // the key's partition has no chain
	ReasonVSBPort             // VSB from a port that is not a storage node's
	ReasonVSBNotCached        // VSB for a key not in the directory
	ReasonVSBNotMember        // VSB from a node not in the LocationList, or a non-tail chain member
	ReasonVSBPending          // extra's VSB while a write is pending (ver_next > ver_done)
	ReasonVSBVersion          // extra's VSB for a version other than ver_done
	numReasons
)

var reasonNames = [...]string{
	"none", "short", "magic", "version", "unknown-op", "no-route",
	"vsb-port", "vsb-not-cached", "vsb-not-member", "vsb-pending", "vsb-version",
}

func (r Reason) String() string { return reasonNames[r] }

// Reasons lists every drop reason, for counters and metrics.
func Reasons() []Reason {
	rs := make([]Reason, 0, numReasons-1)
	for r := ReasonShort; r < numReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}

// Verdict is the outcome of Process.
type Verdict struct {
	Action Action
	Node   wire.NodeID // Forward target
	Reason Reason      // Drop reason
}

func (v Verdict) String() string {
	switch v.Action {
	case Forward:
		return fmt.Sprintf("forward node=%d", v.Node)
	case Drop:
		return "drop reason=" + v.Reason.String()
	}
	return v.Action.String()
}

// Counters are the data plane's packet counters.
type Counters struct {
	Hits      uint64 // requests routed from the directory
	Misses    uint64 // requests routed by the partition table
	Replies   uint64
	VSBs      uint64 // VSBs accepted
	Passed    uint64
	Switched  uint64 // fine score picked the second candidate
	Drops     [numReasons]uint64
	DropTotal uint64
}

func (d *Directory) drop(r Reason) Verdict {
	d.counter.Drops[r]++
	d.counter.DropTotal++
	return Verdict{Action: Drop, Reason: r}
}

// Process handles one netdir packet (the UDP payload) that arrived on
// ingress port at time now (ns), rewriting its header in place as the
// contract says. It never panics and never allocates.
func (d *Directory) Process(pkt []byte, port uint32, now uint64) Verdict {
	f := wire.Frame(pkt)
	switch f.Check() {
	case nil:
	case wire.ErrShort:
		return d.drop(ReasonShort)
	case wire.ErrMagic:
		return d.drop(ReasonMagic)
	default: // wire.ErrVersion
		return d.drop(ReasonVersion)
	}
	h := f.KeyHash()
	switch op := f.Op(); op {
	case wire.OpGet:
		return d.get(f, &h, now, f.Flags()&wire.FlagVerify != 0 && d.portKind(port) == PortSpine)
	case wire.OpPut, wire.OpDel:
		return d.write(f, &h, now)
	case wire.OpGetReply, wire.OpPutReply, wire.OpDelReply, wire.OpErr:
		return d.reply(f, &h, op, now)
	case wire.OpVSB:
		return d.vsb(f, &h, port)
	default:
		if op.IsNodeOp() { // node ops, including those reserved (0x20..0x3f)
			d.counter.Passed++
			return Verdict{Action: Pass}
		}
		return d.drop(ReasonUnknownOp)
	}
}

// Prefetch asks the CPU for the cache lines a request for h reads first,
// without waiting for them: its partition's entry, its first cell of the
// key index and, for a miss, its sketch counters. A caller that knows a
// request is coming (the simulator, an event ahead) overlaps those misses
// with other work. A hint: nothing changes.
func (d *Directory) Prefetch(h *wire.KeyHash) {
	prefetch.Line(uintptr(unsafe.Pointer(d.part(h.Partition(d.cfg.PartitionBits)))))
	prefetch.Line(uintptr(unsafe.Pointer(d.index.firstCell(h))))
	for r := range SketchRows {
		prefetch.Line(uintptr(unsafe.Pointer(&d.sketch[r][SketchIndex(h, r)])))
	}
}

func (d *Directory) slot(h *wire.KeyHash) *Slot {
	i, _, ok := d.find(h)
	if !ok {
		return nil
	}
	return &d.slots[i]
}

// find returns the index of h's slot and its cell in the key index.
func (d *Directory) find(h *wire.KeyHash) (slot, cell uint32, ok bool) {
	for p := d.index.probe(h); ; {
		if slot, cell, ok = p.next(); !ok || d.slots[slot].Hash == *h {
			return slot, cell, ok
		}
	}
}

// vsbSlot is slot for a VSB: the copies of one commit announce one key
// one after the other, so the slot the previous VSB found is tried first.
func (d *Directory) vsbSlot(h *wire.KeyHash) *Slot {
	if d.lastVSBOK && d.lastVSB == *h {
		return &d.slots[d.lastVSBSlot]
	}
	i, _, ok := d.find(h)
	if !ok {
		return nil
	}
	d.lastVSB, d.lastVSBSlot, d.lastVSBOK = *h, i, true
	return &d.slots[i]
}

// vsbMember is s.member(n) for a VSB: the copies of one commit announce
// in LocationList order, so the index after the previous VSB's is tried
// first (a LocationList's nodes are distinct: a match is the member).
func (d *Directory) vsbMember(s *Slot, n wire.NodeID) int {
	i := d.lastVSBMember + 1
	if i >= int(s.N) || s.Locs[i] != n {
		i = s.member(n)
	}
	d.lastVSBMember = i
	return i
}

// requestFlags are the flags only a data plane or a node sets; a request
// arrives with them cleared, so no client can forge them.
const requestFlags = wire.FlagStamped | wire.FlagHit | wire.FlagReservation | wire.FlagVerify

// forward rewrites the target node, the request timestamp and the tenant's
// dmClock δ and ρ for that node.
func (d *Directory) forward(f wire.Frame, n wire.NodeID, now uint64) Verdict {
	f.SetNode(n)
	f.SetTimestamp(now)
	d.qos.stamp(f, n)
	return Verdict{Action: Forward, Node: n}
}

// get routes a read. spineVerify: the spine marked it (FlagVerify from a
// spine port) because it sends it to a rack its fresh bits do not vouch
// for: this rack's directory does not see the key's writes (they go to its
// home rack), so its own fresh bits cannot vouch for the read either, and
// it is verified at whichever member serves it.
func (d *Directory) get(f wire.Frame, h *wire.KeyHash, now uint64, spineVerify bool) Verdict {
	reqid := f.ReqID()
	flags := f.Flags() &^ requestFlags
	p := d.part(h.Partition(d.cfg.PartitionBits))
	if s := d.slot(h); s != nil && d.cfg.Policy.routesHotKeys() {
		i, verify, ok := d.readAt(s, flags, reqid)
		if !ok {
			// No candidate may serve: the chain always may (CRAQ).
			i = int(p.Buckets[reqid&(Buckets-1)] % s.R)
		}
		if verify || spineVerify {
			flags |= wire.FlagVerify
		}
		s.Hits++
		d.counter.Hits++
		f.SetFlags(flags | wire.FlagHit)
		return d.forward(f, s.Locs[i], now)
	}
	if p.R == 0 {
		return d.drop(ReasonNoRoute)
	}
	d.miss(h)
	f.SetFlags(flags)
	return d.forward(f, p.Chain[d.pickChain(p, reqid)], now)
}

// readAt chooses the LocationList index that serves a read hit, and whether
// the read must be verified there (issue 18). Freshness decides how an extra
// serves, not whether: a non-fresh extra asks the tail for the committed
// version (FlagVerify), as a dirty CRAQ chain member does. A host agent does
// not see every write, so its fresh bits vouch only for stale-ok reads: those
// keep to fresh members unverified, and every linearizable read at an extra
// is verified.
func (d *Directory) readAt(s *Slot, flags uint8, reqid uint64) (i int, verify, ok bool) {
	if d.cfg.Mode == ModeHost && flags&wire.FlagStaleOK != 0 {
		i, ok = d.pickSlot(s, s.Fresh, reqid)
		return i, false, ok
	}
	i, ok = d.pickSlot(s, s.members(), reqid)
	extra := ok && i >= int(s.R)
	return i, extra && (d.cfg.Mode == ModeHost || s.Fresh&(1<<i) == 0), ok
}

// pickSlot chooses a LocationList index among eligible members. Pegasus
// takes the least-loaded one that holds a bucket: a member the controller
// gives no weight (a chain member still filling, one being spliced out)
// serves none of the key's reads.
func (d *Directory) pickSlot(s *Slot, eligible uint32, reqid uint64) (int, bool) {
	if d.cfg.Policy == PolicyPegasus {
		eligible &= bucketMask(&s.Buckets)
		best := -1
		for i := 0; i < int(s.N); i++ {
			if eligible&(1<<i) != 0 && (best < 0 || d.nodes[s.Locs[i]].Load < d.nodes[s.Locs[best]].Load) {
				best = i
			}
		}
		return best, best >= 0
	}
	a := int(s.Buckets[reqid&(Buckets-1)])
	if d.cfg.Policy == PolicyCoarse {
		return a, eligible&(1<<a) != 0
	}
	b := int(s.Buckets[(reqid>>8)&(Buckets-1)])
	aOK, bOK := eligible&(1<<a) != 0, eligible&(1<<b) != 0
	switch {
	case aOK && bOK:
		return d.finer(s.Locs[a], s.Locs[b], a, b), true
	case aOK:
		return a, true
	case bOK:
		d.counter.Switched++
		return b, true
	}
	return 0, false
}

// bucketMask has bit i set when a bucket holds index i.
func bucketMask(b *[Buckets]uint8) uint32 {
	var m uint32
	for _, x := range b {
		m |= 1 << (x & (MaxLocations - 1))
	}
	return m
}

// pickChain chooses a chain index by the partition's buckets.
func (d *Directory) pickChain(p *Partition, reqid uint64) int {
	switch d.cfg.Policy {
	case PolicyStatic:
		return 0
	case PolicyReplicas:
		return int(p.Buckets[reqid&(Buckets-1)])
	}
	a := int(p.Buckets[reqid&(Buckets-1)])
	if d.cfg.Policy == PolicyPegasus || d.cfg.Policy == PolicyCoarse {
		return a
	}
	b := int(p.Buckets[(reqid>>8)&(Buckets-1)])
	return d.finer(p.Chain[a], p.Chain[b], a, b)
}

// finer is the fine score (HATS §4.3): of two weighted-random candidates take
// the one that can finish more requests in the window, Window/t − load. A
// node whose latency is not yet learnt scores highest, so it gets probed.
// Ties keep the first candidate.
func (d *Directory) finer(na, nb wire.NodeID, a, b int) int {
	if a == b || d.score(na) >= d.score(nb) {
		return a
	}
	d.counter.Switched++
	return b
}

func (d *Directory) score(n wire.NodeID) int64 {
	st := &d.nodes[n]
	if st.Latency == 0 {
		return 1 << 62
	}
	return int64(d.cfg.Window/st.Latency) - int64(st.Load)
}

func (d *Directory) miss(h *wire.KeyHash) {
	d.counter.Misses++
	for r := 0; r < SketchRows; r++ {
		d.sketch[r][SketchIndex(h, r)]++
	}
}

func (d *Directory) write(f wire.Frame, h *wire.KeyHash, now uint64) Verdict {
	flags := f.Flags() &^ requestFlags
	if s := d.slot(h); s != nil {
		s.Hits++
		d.counter.Hits++
		// A write is about to exist that extras do not hold.
		s.Fresh = s.chainMask()
		if d.cfg.Mode == ModeToR {
			s.VerNext++
			f.SetStamp(wire.MakeStamp(s.Inc, s.VerNext))
			flags |= wire.FlagStamped
			f := &d.floors[FloorIndex(h)]
			*f = max(*f, s.VerNext)
		} else {
			f.SetStamp(0) // a host agent does not stamp: the head assigns the version
		}
		f.SetFlags(flags | wire.FlagHit)
		return d.forward(f, s.Locs[0], now)
	}
	p := d.part(h.Partition(d.cfg.PartitionBits))
	if p.R == 0 {
		return d.drop(ReasonNoRoute)
	}
	d.miss(h)
	f.SetFlags(flags)
	f.SetStamp(0) // only a data plane stamps; the head assigns the version
	return d.forward(f, p.Chain[0], now)
}

func (d *Directory) reply(f wire.Frame, h *wire.KeyHash, op wire.Op, now uint64) Verdict {
	d.counter.Replies++
	d.learn(f, now)
	if op != wire.OpErr {
		d.qos.complete(f, d.scheduler(f, h, op))
	}
	if op == wire.OpPutReply || op == wire.OpDelReply {
		if s := d.slot(h); s != nil && f.Code() == wire.CodeOK {
			s.complete(f.Stamp())
		}
	}
	return Verdict{Action: ToClient}
}

// scheduler is the node whose dmClock scheduled the request that reply f
// answers: a write's chain head (the partition's), else the replying node.
func (d *Directory) scheduler(f wire.Frame, h *wire.KeyHash, op wire.Op) wire.NodeID {
	if op == wire.OpPutReply || op == wire.OpDelReply {
		if p := d.part(h.Partition(d.cfg.PartitionBits)); p.R > 0 {
			return p.Chain[0]
		}
	}
	return f.Node()
}

// complete records that version v committed at the tail.
func (s *Slot) complete(v uint64) {
	if v > s.VerDone {
		s.VerDone = v
		s.VerNext = max(s.VerNext, v)
		s.Fresh = s.chainMask()
	}
}

// learn updates the replying node's load and EWMA latency (weight 0.5).
func (d *Directory) learn(f wire.Frame, now uint64) {
	n := f.Node()
	if int(n) >= len(d.nodes) {
		return
	}
	st := &d.nodes[n]
	st.Load = f.Load()
	ts := f.Timestamp()
	if ts == 0 || ts > now {
		return
	}
	sample := now - ts
	if st.Latency == 0 {
		st.Latency = max(sample, 1)
	} else {
		st.Latency = max((st.Latency+sample)/2, 1)
	}
}

func (d *Directory) vsb(f wire.Frame, h *wire.KeyHash, port uint32) Verdict {
	if d.portKind(port) != PortStorage {
		return d.drop(ReasonVSBPort)
	}
	s := d.vsbSlot(h)
	if s == nil {
		return d.drop(ReasonVSBNotCached)
	}
	return d.vsbFrom(s, f.Node(), f.Stamp())
}

// VSBSender is the sender of one VSB of a run (ProcessVSBs): the node
// that announces (the header's node field) and the port it arrived on.
type VSBSender struct {
	Node wire.NodeID
	Port uint32
}

// ProcessVSBs handles a run of VSBs that differ only in their sender: it
// is Process(pkt, from[i].Port, now) for each i in turn, pkt's node field
// set to from[i].Node first, with the verdicts appended to out. The
// copies of one commit reach a rack's directory one after the other,
// each announcing the same key and version: the header is checked and
// the key's slot found once for the run, not once a VSB.
func (d *Directory) ProcessVSBs(pkt []byte, from []VSBSender, now uint64, out []Verdict) []Verdict {
	f := wire.Frame(pkt)
	if len(from) == 0 {
		return out
	}
	if f.Check() != nil || f.Op() != wire.OpVSB {
		for _, x := range from {
			if len(f) >= wire.HeaderLen {
				f.SetNode(x.Node)
			}
			out = append(out, d.Process(pkt, x.Port, now))
		}
		return out
	}
	f.SetNode(from[len(from)-1].Node) // a VSB's header is not rewritten
	h := f.KeyHash()
	v := f.Stamp()
	// The slot is found at the first VSB from a storage port, as
	// Process would.
	var s *Slot
	found := false
	for _, x := range from {
		if d.portKind(x.Port) != PortStorage {
			out = append(out, d.drop(ReasonVSBPort))
			continue
		}
		if !found {
			s, found = d.vsbSlot(&h), true
		}
		if s == nil {
			out = append(out, d.drop(ReasonVSBNotCached))
			continue
		}
		out = append(out, d.vsbFrom(s, x.Node, v))
	}
	return out
}

// vsbFrom is a VSB from node n for version v of slot s's key.
func (d *Directory) vsbFrom(s *Slot, n wire.NodeID, v uint64) Verdict {
	i := d.vsbMember(s, n)
	switch {
	case i < 0 || (i < int(s.R)-1):
		return d.drop(ReasonVSBNotMember)
	case i == int(s.R)-1: // the tail announces a commit
		s.complete(v)
	case s.VerNext != s.VerDone:
		return d.drop(ReasonVSBPending)
	case v != s.VerDone:
		return d.drop(ReasonVSBVersion)
	default:
		s.Fresh |= 1 << i
	}
	d.counter.VSBs++
	return Verdict{Action: Multicast}
}
