// Package directory is netdir's directory contract as a pure, deterministic
// state machine: the partition table, the hot-key directory, coherence by
// version stamps, weighted splits, the fine score and the counters.
//
// Every data plane carries out exactly this: the software data plane (model)
// calls it, and the P4 and eBPF programs re-implement it and are held to it by
// the shared vector suite in testdata/vectors. So the core does no I/O, reads
// no clock and decides nothing by random numbers: the caller passes the
// ingress port and the time, and split buckets come from the packet's request
// id (see package wire). (Its key index draws a seed, as a Go map does, which
// places keys in the index and decides nothing.) Process rewrites the packet
// in place, as a switch would, and returns a Verdict.
//
// Why the coherence rules are as they are: an extra copy (a LocationList
// member outside the CRAQ chain) may serve a linearizable read from its copy
// unasked only when no newer version can have been observed anywhere. Chain
// members may commit a newer version before its reply passes the data plane,
// so extras lose their fresh bits the moment a write is stamped, and regain
// them only by a VSB for the version the data plane saw complete (ver_done,
// with no write pending). A read at an extra whose bit is clear still goes
// there, flagged wire.FlagVerify: the extra asks the tail which version is
// committed, as a dirty CRAQ chain member does (issue 18).
package directory

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// Sizes of the contract.
const (
	MaxLocations = 32 // one rack, as in Pegasus
	MaxChain     = layout.MaxReplicas
	Buckets      = 32 // split bucket table entries per partition and per slot
	SketchRows   = 4
	SketchCols   = 1024
)

// Mode says what a data plane sees.
type Mode uint8

const (
	// ModeToR sees every request and reply of a key (a ToR switch, the model),
	// so extras may serve linearizable reads unverified while fresh, and it
	// stamps writes.
	ModeToR Mode = iota
	// ModeHost is a host agent that sees only its own host's traffic: it
	// verifies every linearizable read it sends to an extra, lets
	// bounded-staleness reads use fresh extras unverified, and leaves version
	// assignment to the chain head.
	ModeHost
)

// Policy is how a data plane chooses a replica. Netdir is the system; the
// others are baselines that the bench runs on the same cluster.
type Policy uint8

const (
	PolicyNetdir   Policy = iota // directory, weighted buckets, fine score
	PolicyPegasus                // directory, least-loaded member holding a bucket
	PolicyReplicas               // no directory routing: partition buckets only
	PolicyStatic                 // no directory routing: chain head only
	// PolicyCoarse is netdir without the fine score: directory, weighted
	// buckets, the first candidate only (the ablation's coarse step; the
	// software planes only).
	PolicyCoarse
)

var policyNames = [...]string{"netdir", "pegasus", "replicas", "static", "coarse"}

// routesHotKeys reports whether the policy routes directory keys by their
// slots.
func (p Policy) routesHotKeys() bool {
	return p == PolicyNetdir || p == PolicyPegasus || p == PolicyCoarse
}

func (p Policy) String() string { return policyNames[p] }

// ParsePolicy is the inverse of Policy.String.
func ParsePolicy(s string) (Policy, error) {
	for i, n := range policyNames {
		if n == s {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("directory: unknown policy %q (want netdir, pegasus, replicas, static or coarse)", s)
}

// Config sizes a directory.
type Config struct {
	PartitionBits uint   // P = 1<<PartitionBits partitions; default 10
	Slots         int    // directory capacity D; default 4096
	MaxNodes      int    // node ids are below this; default 4096
	Mode          Mode   // ModeToR by default
	Policy        Policy // PolicyNetdir by default
	// Window is the fine score's horizon in ns: score = Window/t − load,
	// the requests a node can still finish in the window. Default 1 ms.
	Window uint64
}

// Fill sets the defaults of unset fields and checks the configuration, as
// New does; other planes (the eBPF agent) call it to size themselves alike.
func (c *Config) Fill() error {
	if c.PartitionBits == 0 {
		c.PartitionBits = 10
	}
	if c.Slots == 0 {
		c.Slots = 4096
	}
	if c.MaxNodes == 0 {
		c.MaxNodes = 4096
	}
	if c.Window == 0 {
		c.Window = 1_000_000
	}
	if c.PartitionBits > 20 {
		return fmt.Errorf("directory: %d partition bits: at most 20", c.PartitionBits)
	}
	if c.Slots < 1 || c.Slots > 1<<20 {
		return fmt.Errorf("directory: %d slots: want 1..%d", c.Slots, 1<<20)
	}
	if c.MaxNodes < 1 || c.MaxNodes > 1<<16 {
		return fmt.Errorf("directory: %d max nodes: want 1..65536", c.MaxNodes)
	}
	if c.Mode > ModeHost || c.Policy > PolicyCoarse {
		return errors.New("directory: unknown mode or policy")
	}
	return nil
}

// Partition is one partition's chain and its split bucket table, whose
// entries index the chain.
type Partition struct {
	Chain   [MaxChain]wire.NodeID
	R       uint8
	Buckets [Buckets]uint8
	// A cache line each: a route by partition reads one line, not two.
	_ [cacheLine - 2*MaxChain - 1 - Buckets]byte
}

// cacheLine is the size of a CPU cache line.
const cacheLine = 64

// Slot is one directory entry, three cache lines: what every request of
// the key reads or writes (its hash, buckets, bits, counts), its
// LocationList, and the versions that only writes, replies and VSBs use.
type Slot struct {
	Hash    wire.KeyHash
	Buckets [Buckets]uint8 // entries index Locs
	Fresh   uint32         // bit i: Locs[i] may serve reads of VerDone unverified
	N       uint8          // LocationList length
	R       uint8          // chain length: Locs[:R] is the chain, Locs[R-1] the tail
	// Inc is the incarnation the controller installed the slot in (the
	// seed's top 16 bits): stamped on top of every version the slot
	// stamps (wire.MakeStamp), so the head can refuse a write stamped
	// before the plane lost its state (spec/README.md, flaw G).
	Inc  uint16
	Hits uint64

	Locs [MaxLocations]wire.NodeID // the chain first, then extras

	VerNext uint64
	VerDone uint64
	used    bool
	_       [cacheLine - 2*8 - 1]byte
}

// chainMask has the bits of the chain members, which are always fresh.
func (s *Slot) chainMask() uint32 { return uint32(1)<<s.R - 1 }

// members has the bits of every LocationList member.
func (s *Slot) members() uint32 { return uint32(1)<<s.N - 1 }

// member returns the index of n in the LocationList, or -1.
func (s *Slot) member(n wire.NodeID) int {
	for i := 0; i < int(s.N); i++ {
		if s.Locs[i] == n {
			return i
		}
	}
	return -1
}

// NodeStats is what the data plane has learnt of a node from its replies.
type NodeStats struct {
	Load    uint16 // last reported queue depth
	Latency uint64 // EWMA of reply latency in ns, weight 0.5; 0 until learnt
}

// PortKind classifies ingress ports.
type PortKind uint8

const (
	PortClient  PortKind = iota // default: clients and everything else
	PortStorage                 // a storage node's port: VSBs are accepted only here
	// PortSpine: the spine's port above a rack directory (directory.Spine).
	// A read arriving here keeps the FlagVerify the spine set on it, and
	// is verified at whichever member serves it; FlagVerify from any other
	// port is cleared. Only the Go core and sim/ have a spine: the P4 and
	// eBPF planes do not classify this port yet.
	PortSpine
)

// Directory is the state machine. It is not safe for concurrent use; the
// shells around it serialise access.
type Directory struct {
	cfg   Config
	parts []Partition
	slots []Slot
	index keyIndex // key → slot
	free  []uint32
	nodes []NodeStats
	// ports classifies ingress ports below maxListedPort by index (no
	// hash per packet); farPorts holds the rest. Unset ports are clients.
	ports    []PortKind
	farPorts map[uint32]PortKind
	// lastVSB is the key whose slot the previous VSB found (lastVSBOK):
	// a burst of VSBs, a commit's copies announcing one key, probes the
	// index once.
	lastVSB     wire.KeyHash
	lastVSBSlot uint32
	lastVSBOK   bool
	// lastVSBMember is the LocationList index of the previous VSB's
	// node: the next VSB tries the one after it first.
	lastVSBMember int
	sketch        [SketchRows][SketchCols]uint32
	floors        []uint64 // by FloorIndex: the highest stamp issued, kept across evictions
	counter       Counters
	qos           qosCounters
}

// New returns an empty directory; partitions have no chain until set.
func New(cfg Config) (*Directory, error) {
	if err := cfg.Fill(); err != nil {
		return nil, err
	}
	d := &Directory{
		cfg:      cfg,
		parts:    make([]Partition, 1<<cfg.PartitionBits),
		slots:    make([]Slot, cfg.Slots),
		free:     make([]uint32, 0, cfg.Slots),
		nodes:    make([]NodeStats, cfg.MaxNodes),
		farPorts: make(map[uint32]PortKind),
		floors:   make([]uint64, StampFloors),
	}
	d.index = newKeyIndex(cfg.Slots, func(i uint32) *wire.KeyHash { return &d.slots[i].Hash })
	for i := cfg.Slots - 1; i >= 0; i-- {
		d.free = append(d.free, uint32(i))
	}
	return d, nil
}

// Config returns the filled-in configuration.
func (d *Directory) Config() Config { return d.cfg }

// Partitions is the partition count P.
func (d *Directory) Partitions() int { return len(d.parts) }

// Errors of the control-plane API.
var (
	ErrFull      = errors.New("directory: no free slot")
	ErrNotFound  = errors.New("directory: key not in directory")
	ErrExists    = errors.New("directory: key already in directory")
	ErrBadChain  = errors.New("directory: chain must have 1..8 distinct nodes below MaxNodes")
	ErrBadLocs   = errors.New("directory: LocationList must start with the chain, hold at most 32 distinct nodes below MaxNodes")
	ErrBadBucket = errors.New("directory: bucket entry out of range")
	ErrRange     = errors.New("directory: index out of range")
)

// SetPartition installs partition p's chain. A nil buckets spreads the
// buckets evenly over the chain.
func (d *Directory) SetPartition(p uint32, chain []wire.NodeID, buckets []uint8) error {
	if int(p) >= len(d.parts) {
		return ErrRange
	}
	if len(chain) == 0 || len(chain) > MaxChain || !DistinctNodes(chain, d.cfg.MaxNodes) {
		return ErrBadChain
	}
	var np Partition
	np.R = uint8(len(chain))
	copy(np.Chain[:], chain)
	if err := FillBuckets(&np.Buckets, buckets, len(chain)); err != nil {
		return err
	}
	*d.part(p) = np
	return nil
}

// CopyPartitions sets every partition of d to src's, chains and buckets,
// in one copy of the table: a data plane starting from another's layout
// (the simulator's rack directories, each with every partition) without
// setting its partitions one by one. The two must have the same partition
// count, and src's chains must be valid in d: its MaxNodes at most d's.
func (d *Directory) CopyPartitions(src *Directory) error {
	if src.cfg.PartitionBits != d.cfg.PartitionBits {
		return fmt.Errorf("directory: copying %d partitions into a directory of %d", len(src.parts), len(d.parts))
	}
	if src.cfg.MaxNodes > d.cfg.MaxNodes {
		return fmt.Errorf("directory: copying chains of node ids below %d into a directory of ids below %d",
			src.cfg.MaxNodes, d.cfg.MaxNodes)
	}
	copy(d.parts, src.parts)
	return nil
}

// part is partition p. Partitions are stored by their number's bits
// reversed: a layout that spreads partitions over 2^k racks or nodes by
// their low bits (p mod 2^k) then has each one's partitions in one block,
// where in number order a rack directory's own partitions lie one in 2^k
// over the whole table. In the simulator's 1024 nodes a rack directory's
// 512 partitions of 16,384 sit on 8 pages instead of 256. Which entry
// holds a partition decides nothing.
func (d *Directory) part(p uint32) *Partition {
	return &d.parts[bits.Reverse32(p)>>(32-d.cfg.PartitionBits)]
}

// SetPartitionBuckets replaces partition p's bucket table (weights).
func (d *Directory) SetPartitionBuckets(p uint32, buckets []uint8) error {
	if int(p) >= len(d.parts) || d.part(p).R == 0 {
		return ErrRange
	}
	return FillBuckets(&d.part(p).Buckets, buckets, int(d.part(p).R))
}

// Partition returns partition p.
func (d *Directory) Partition(p uint32) (Partition, bool) {
	if int(p) >= len(d.parts) {
		return Partition{}, false
	}
	return *d.part(p), d.part(p).R > 0
}

// DistinctNodes reports whether the ids in ns are distinct and each below
// maxNodes, as a chain or a LocationList must be.
func DistinctNodes(ns []wire.NodeID, maxNodes int) bool {
	for i, n := range ns {
		if int(n) >= maxNodes {
			return false
		}
		for _, m := range ns[:i] {
			if m == n {
				return false
			}
		}
	}
	return true
}

// FillBuckets sets a bucket table from b, or evenly over n members if b is
// nil. Every data plane fills its partition and slot tables with it.
func FillBuckets(dst *[Buckets]uint8, b []uint8, n int) error {
	if b == nil {
		for i := range dst {
			dst[i] = uint8(i % n)
		}
		return nil
	}
	if len(b) != Buckets {
		return fmt.Errorf("directory: bucket table has %d entries, want %d", len(b), Buckets)
	}
	for _, x := range b {
		if int(x) >= n {
			return ErrBadBucket
		}
	}
	copy(dst[:], b)
	return nil
}

// BucketsForWeights realises integer weights as a bucket table: member i gets
// a share of the Buckets entries proportional to w[i] (largest remainder),
// as one contiguous run of buckets, member 0's first. Zero total weight
// spreads evenly. Request ids are random (package wire), so a run splits as
// well as any other placement, and a table of runs is what a P4 switch
// installs cheaply: one range entry per member instead of one exact entry
// per bucket (Runs).
func BucketsForWeights(w []uint32) []uint8 {
	n := len(w)
	out := make([]uint8, Buckets)
	if n == 0 {
		return out
	}
	var total uint64
	for _, x := range w {
		total += uint64(x)
	}
	count := make([]int, n)
	if total == 0 {
		for i := range count {
			count[i] = Buckets / n
			if i < Buckets%n {
				count[i]++
			}
		}
	} else {
		rem := make([]uint64, n)
		given := 0
		for i, x := range w {
			q := uint64(x) * Buckets
			count[i] = int(q / total)
			rem[i] = q % total
			given += count[i]
		}
		for ; given < Buckets; given++ {
			best := 0
			for i := range rem {
				if rem[i] > rem[best] {
					best = i
				}
			}
			count[best]++
			rem[best] = 0
		}
	}
	b := 0
	for i, c := range count {
		for ; c > 0; c-- {
			out[b] = uint8(i)
			b++
		}
	}
	return out
}

// Run is a maximal range of buckets Lo..Hi (inclusive) that all hold Index.
type Run struct {
	Lo, Hi, Index uint8
}

// Runs decomposes a bucket table into its maximal runs, in bucket order: a
// table from BucketsForWeights has one run per member with a nonzero share.
// The P4 program installs one range entry per run.
func Runs(b []uint8) []Run {
	var out []Run
	for i := 0; i < len(b); i++ {
		if len(out) > 0 && out[len(out)-1].Index == b[i] && int(out[len(out)-1].Hi)+1 == i {
			out[len(out)-1].Hi = uint8(i)
			continue
		}
		out = append(out, Run{Lo: uint8(i), Hi: uint8(i), Index: b[i]})
	}
	return out
}

// RunChanges is what takes a table installed as runs from old (nil: none)
// to b: old's runs whose span b has not (del), b's runs whose span old has
// too, though maybe for another member (same), and b's other runs (add).
// A P4 writer deletes del, modifies same and inserts add, in that order.
func RunChanges(old, b []uint8) (del, same, add []Run) {
	span := func(r Run) [2]uint8 { return [2]uint8{r.Lo, r.Hi} }
	was, now := map[[2]uint8]bool{}, map[[2]uint8]bool{}
	for _, r := range Runs(old) {
		was[span(r)] = true
	}
	for _, r := range Runs(b) {
		now[span(r)] = true
		if was[span(r)] {
			same = append(same, r)
		} else {
			add = append(add, r)
		}
	}
	for _, r := range Runs(old) {
		if !now[span(r)] {
			del = append(del, r)
		}
	}
	return del, same, add
}

// SetPort classifies an ingress port.
func (d *Directory) SetPort(port uint32, kind PortKind) {
	switch {
	case port < uint32(len(d.ports)):
		d.ports[port] = kind
	case port < maxListedPort:
		if kind != PortClient {
			d.ports = append(d.ports, make([]PortKind, int(port)+1-len(d.ports))...)
			d.ports[port] = kind
		}
	case kind == PortClient:
		delete(d.farPorts, port)
	default:
		d.farPorts[port] = kind
	}
}

// maxListedPort bounds the ports classified by index: a switch's or a
// simulator's port numbers are small, any other kept in a map.
const maxListedPort = 1 << 16

// portKind classifies ingress port.
func (d *Directory) portKind(port uint32) PortKind {
	if port < uint32(len(d.ports)) {
		return d.ports[port]
	}
	return d.farPorts[port]
}

// Insert promotes a key: locs is its LocationList, whose first r entries are
// the chain. ver is the head's latest version when it was promoted (the
// controller promotes at the head first); ver_next and ver_done start at the
// larger of ver and the key's stamp floor, so that neither an extra's copy
// from before the head's latest nor a stamp this plane issued before an
// eviction can be taken for the newest version (spec/README.md, flaws A, B
// and E). ver is a seed stamp (wire.MakeStamp): its top 16 bits are the
// incarnation the slot stamps writes in (flaw G), its low 48 the version.
// Only the chain starts fresh. A nil buckets spreads evenly over locs. It
// returns the slot index.
func (d *Directory) Insert(h wire.KeyHash, locs []wire.NodeID, r int, ver uint64, buckets []uint8) (uint32, error) {
	if _, _, ok := d.find(&h); ok {
		return 0, ErrExists
	}
	if len(locs) == 0 || len(locs) > MaxLocations || r < 1 || r > len(locs) || r > MaxChain || !DistinctNodes(locs, d.cfg.MaxNodes) {
		return 0, ErrBadLocs
	}
	if len(d.free) == 0 {
		return 0, ErrFull
	}
	var s Slot
	s.Hash = h
	copy(s.Locs[:], locs)
	s.N, s.R = uint8(len(locs)), uint8(r)
	s.Fresh = s.chainMask()
	s.Inc = wire.StampIncarnation(ver)
	ver = max(wire.StampVersion(ver), d.floors[FloorIndex(&h)])
	s.VerNext, s.VerDone = ver, ver
	s.used = true
	if err := FillBuckets(&s.Buckets, buckets, len(locs)); err != nil {
		return 0, err
	}
	i := d.free[len(d.free)-1]
	d.free = d.free[:len(d.free)-1]
	d.slots[i] = s
	d.index.insert(&h, i)
	return i, nil
}

// SetSlotBuckets replaces a slot's bucket table (weights over its LocationList).
func (d *Directory) SetSlotBuckets(h wire.KeyHash, buckets []uint8) error {
	i, _, ok := d.find(&h)
	if !ok {
		return ErrNotFound
	}
	return FillBuckets(&d.slots[i].Buckets, buckets, int(d.slots[i].N))
}

// Evict removes a key. Its reads fall back to the partition's chain, which is
// always safe (CRAQ); only balance is lost.
func (d *Directory) Evict(h wire.KeyHash) error {
	i, cell, ok := d.find(&h)
	if !ok {
		return ErrNotFound
	}
	d.index.remove(cell)
	d.lastVSBOK = false
	d.slots[i] = Slot{}
	d.free = append(d.free, i)
	return nil
}

// Lookup returns a copy of a key's slot.
func (d *Directory) Lookup(h wire.KeyHash) (Slot, bool) {
	i, _, ok := d.find(&h)
	if !ok {
		return Slot{}, false
	}
	return d.slots[i], true
}

// Len is the number of keys in the directory.
func (d *Directory) Len() int { return d.index.n }

// Each calls f for every slot in slot order.
func (d *Directory) Each(f func(idx uint32, s *Slot)) {
	for i := range d.slots {
		if d.slots[i].used {
			f(uint32(i), &d.slots[i])
		}
	}
}

// Node returns what has been learnt of node n.
func (d *Directory) Node(n wire.NodeID) NodeStats {
	if int(n) >= len(d.nodes) {
		return NodeStats{}
	}
	return d.nodes[n]
}

// SetNodeStats seeds node n's stats (used by vectors and the simulator).
func (d *Directory) SetNodeStats(n wire.NodeID, s NodeStats) error {
	if int(n) >= len(d.nodes) {
		return ErrRange
	}
	d.nodes[n] = s
	return nil
}

// StampFloors is the number of stamp floors. A floor is the highest stamp
// the plane has issued to any key of its index; it outlives the slot, so a
// key evicted with a stamped write in flight and promoted again is seeded
// above that write. Keys that share a floor only seed higher than they need:
// safe, but such a key's extras wait for its next write to become fresh.
const StampFloors = 1 << 14

// FloorIndex is h's stamp floor: the low 14 bits of the hash (bytes 14 and
// 15), independent of the partition and sketch bits.
func FloorIndex(h *wire.KeyHash) uint32 {
	return (uint32(h[14])<<8 | uint32(h[15])) & (StampFloors - 1)
}

// SketchIndex is row r's column for h: 10 bits from bytes 4+2r and 5+2r of
// the hash, which are independent of the partition bits (bytes 0..3).
func SketchIndex(h *wire.KeyHash, r int) uint32 {
	return (uint32(h[4+2*r])<<8 | uint32(h[5+2*r])) & (SketchCols - 1)
}

// SketchEstimate is the count-min estimate of misses for h.
func (d *Directory) SketchEstimate(h wire.KeyHash) uint32 {
	est := ^uint32(0)
	for r := 0; r < SketchRows; r++ {
		est = min(est, d.sketch[r][SketchIndex(&h, r)])
	}
	return est
}

// SketchCell is one cell of the sketch, as P4 exposes it as an indexed
// counter (index r*SketchCols+c).
func (d *Directory) SketchCell(r int, c uint32) uint32 {
	if r < 0 || r >= SketchRows || c >= SketchCols {
		return 0
	}
	return d.sketch[r][c]
}

// ResetSketch clears the sketch, as the controller does each hot-key round.
func (d *Directory) ResetSketch() { d.sketch = [SketchRows][SketchCols]uint32{} }

// Counters returns the counters.
func (d *Directory) Counters() Counters { return d.counter }

// BucketShares is the split a bucket table realises: buckets per location,
// for n locations.
func BucketShares(buckets []uint8, n int) []uint32 {
	w := make([]uint32, n)
	for _, b := range buckets {
		if int(b) < n {
			w[b]++
		}
	}
	return w
}

// BucketsMoved reports whether table b moves a member's share from table
// old by more than one bucket, or to or from none: smaller changes are an
// epoch's noise, not worth a partition's table writes on a P4 switch.
func BucketsMoved(old, b []uint8, n int) bool {
	x, y := BucketShares(old, n), BucketShares(b, n)
	for i := range x {
		if x[i] != y[i] && (x[i] == 0 || y[i] == 0 || max(x[i], y[i])-min(x[i], y[i]) > 1) {
			return true
		}
	}
	return false
}
