package directory

import (
	"github.com/netdir/netdir/wire"
)

// MaxRacks is the most racks a spine entry spreads a key over: its rack
// bitmap is 32 bits wide, as a slot's fresh bitmap is.
const MaxRacks = MaxLocations

// Spine is the layer above the rack directories, as DistCache (NSDI'19)
// layers caches: a rack directory balances a key over at most the 32 nodes
// of its rack, so a key hotter than a rack is spread by the spine over
// several racks, each with its own rack directory entry. The spine sends a
// read of such a key to the less loaded of two of its racks (two choices,
// by request id, load being the reads the spine has in flight to each
// rack); every other request, and every write, goes to the key's home rack
// (its partition's). Writes are not counted: they have no choice, and they
// queue at one node of the rack, the key's chain head, not at the rack's
// readers; a write-hot key's head holding a backlog of writes would
// otherwise turn every read away from its home rack. Like Directory it is
// a pure state machine: no I/O, no clock, no random decisions.
//
// Coherence, at rack granularity, by the rules of the slot one level down:
// the home rack is always fresh; a write clears every other rack's fresh
// bit and counts as pending until its reply passes the spine; a remote
// rack regains its bit only by a VSB from its rack primary (the node that
// holds the key's copy in that rack and announces it to its rack
// directory as the key's tail there) for the version the spine saw
// complete, with no write pending. A reply lost on its way leaves the
// write pending: remote racks then serve only verified reads, which costs
// a version query per read, never correctness; the home tail's commit
// announcements (VSBs) keep the completed version current. A write's
// reply is a PUT or DEL reply, or an ERR stale-version or retry (the
// errors only a write gets); a write answered by another error stays
// pending in the same way.
//
// Verified reads (issue 18's rule one level up): freshness decides how a
// remote rack serves a read, not whether. A read the spine sends to a
// remote rack whose fresh bit is clear carries wire.FlagVerify, and that
// rack's directory, taking it from a spine port (PortSpine), forwards it
// flagged to whichever member it picks; the member asks the key's tail
// (in the home rack) for the committed version before it answers. A
// rack's own fresh bits cannot stand in for the spine's: the rack
// directory never sees the key's writes, which go home.
type Spine struct {
	bits    uint
	home    []uint16 // partition → home rack
	racks   int
	entries []spineSlot
	index   keyIndex // key → entries
	free    []uint32 // entries evicted, to reuse
	flight  []int64  // per rack: reads sent and not yet answered
	counter SpineCounters
}

// SpineEntry is one key spread over racks.
type SpineEntry struct {
	Racks   [MaxRacks]uint16 // the home rack first
	N       uint8
	Fresh   uint32 // bit i: Racks[i] may serve reads of VerDone
	Pending uint32 // writes passed and not answered
	VerDone uint64
	Hits    uint64
}

// spineSlot is an entry and its key.
type spineSlot struct {
	hash wire.KeyHash
	SpineEntry
}

// SpineCounters are the spine's counters.
type SpineCounters struct {
	Hits, Misses, Remote uint64 // Remote: reads sent to a rack other than home
	Verified             uint64 // reads sent flagged to a rack not fresh
	VSBs, VSBsRefused    uint64
}

// NewSpine returns a spine over racks racks, with 1<<partitionBits
// partitions all homed in rack 0 until SetHome.
func NewSpine(racks int, partitionBits uint) (*Spine, error) {
	if racks < 1 || racks > 1<<16 || partitionBits > 20 {
		return nil, ErrRange
	}
	s := &Spine{bits: partitionBits, home: make([]uint16, 1<<partitionBits), racks: racks, flight: make([]int64, racks)}
	s.index = newKeyIndex(0, func(i uint32) *wire.KeyHash { return &s.entries[i].hash })
	return s, nil
}

// SetHome homes partition p in rack r.
func (s *Spine) SetHome(p uint32, r int) error {
	if int(p) >= len(s.home) || r < 0 || r >= s.racks {
		return ErrRange
	}
	s.home[p] = uint16(r)
	return nil
}

// Home is h's home rack.
func (s *Spine) Home(h wire.KeyHash) int { return int(s.home[h.Partition(s.bits)]) }

// Insert spreads h over racks, which must start with its home rack. ver
// must be at least the highest version stamped for h (the home rack slot's
// VerNext): a write that passed the spine before h was spread is not
// pending here, and a remote rack made fresh below its version would serve
// an older version after it commits. Only the home rack starts fresh.
func (s *Spine) Insert(h wire.KeyHash, racks []int, ver uint64) error {
	if _, _, ok := s.find(&h); ok {
		return ErrExists
	}
	if len(racks) == 0 || len(racks) > MaxRacks || racks[0] != s.Home(h) {
		return ErrBadLocs
	}
	e := SpineEntry{N: uint8(len(racks)), Fresh: 1, VerDone: ver}
	for i, r := range racks {
		if r < 0 || r >= s.racks {
			return ErrBadLocs
		}
		for _, q := range racks[:i] {
			if q == r {
				return ErrBadLocs
			}
		}
		e.Racks[i] = uint16(r)
	}
	i := uint32(len(s.entries))
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1], s.free[:n-1]
		s.entries[i] = spineSlot{h, e}
	} else {
		s.entries = append(s.entries, spineSlot{h, e})
	}
	s.index.insert(&h, i)
	return nil
}

// find returns the index of h's entry and its cell in the key index.
func (s *Spine) find(h *wire.KeyHash) (entry, cell uint32, ok bool) {
	for p := s.index.probe(h); ; {
		if entry, cell, ok = p.next(); !ok || s.entries[entry].hash == *h {
			return entry, cell, ok
		}
	}
}

// entry is h's entry, or nil.
func (s *Spine) entry(h *wire.KeyHash) *SpineEntry {
	i, _, ok := s.find(h)
	if !ok {
		return nil
	}
	return &s.entries[i].SpineEntry
}

// Evict removes h; its requests go home again.
func (s *Spine) Evict(h wire.KeyHash) error {
	i, cell, ok := s.find(&h)
	if !ok {
		return ErrNotFound
	}
	s.index.remove(cell)
	s.entries[i] = spineSlot{}
	s.free = append(s.free, i)
	return nil
}

// Lookup returns a copy of h's entry.
func (s *Spine) Lookup(h wire.KeyHash) (SpineEntry, bool) {
	e := s.entry(&h)
	if e == nil {
		return SpineEntry{}, false
	}
	return *e, true
}

// Len is the number of keys spread over racks.
func (s *Spine) Len() int { return s.index.n }

// Counters returns the counters.
func (s *Spine) Counters() SpineCounters { return s.counter }

// InFlight is the reads the spine has in flight to rack r.
func (s *Spine) InFlight(r int) int64 { return s.flight[r] }

// Request chooses the rack for a client request (GET, PUT or DEL) and
// counts a read in flight there. A packet that is not a well-formed request
// goes home (its rack directory drops or passes it), or to rack 0 when
// even its hash cannot be read.
func (s *Spine) Request(pkt []byte) int {
	f := wire.Frame(pkt)
	if f.Check() != nil {
		return 0
	}
	// Only the spine sets FlagVerify on what it sends a rack directory.
	f.SetFlags(f.Flags() &^ wire.FlagVerify)
	h := f.KeyHash()
	home := s.Home(h)
	e := s.entry(&h)
	r := home
	switch {
	case e == nil:
		s.counter.Misses++
	case f.Op() == wire.OpGet:
		e.Hits++
		s.counter.Hits++
		var fresh bool
		r, fresh = s.pick(e, f.ReqID())
		if r != home {
			s.counter.Remote++
		}
		if !fresh {
			s.counter.Verified++
			f.SetFlags(f.Flags() | wire.FlagVerify)
		}
	case f.Op() == wire.OpPut || f.Op() == wire.OpDel:
		e.Hits++
		s.counter.Hits++
		e.Fresh = 1
		e.Pending++
	}
	if f.Op() == wire.OpGet {
		s.flight[r]++
	}
	return r
}

// pick is two choices among the key's racks, fresh or not: two distinct
// racks by request id (bits other than the rack directories' bucket
// bits), the one with less in flight; ties keep the first. fresh reports
// whether the rack's fresh bit vouches for the read.
func (s *Spine) pick(e *SpineEntry, reqid uint64) (r int, fresh bool) {
	n := uint64(e.N)
	if n == 1 {
		return int(e.Racks[0]), true
	}
	a := (reqid >> 16) % n
	b := (a + 1 + (reqid>>40)%(n-1)) % n
	if s.flight[e.Racks[b]] < s.flight[e.Racks[a]] {
		a = b
	}
	return int(e.Racks[a]), e.Fresh&(1<<a) != 0
}

// Reply notes a reply that passes the spine from rack r: for a read's
// (a GET reply, or an error other than those only a write gets) one read
// fewer in flight there; for a write's one write fewer pending and, if it
// succeeded, its version complete. (A write's other errors count as a
// read's: the count is a load signal, and never goes below zero.)
func (s *Spine) Reply(pkt []byte, r int) {
	f := wire.Frame(pkt)
	if f.Check() != nil {
		return
	}
	op := f.Op()
	write := op == wire.OpPutReply || op == wire.OpDelReply ||
		(op == wire.OpErr && (f.Code() == wire.CodeStaleVersion || f.Code() == wire.CodeRetry))
	if !write {
		if (op == wire.OpGetReply || op == wire.OpErr) && r >= 0 && r < s.racks && s.flight[r] > 0 {
			s.flight[r]--
		}
		return
	}
	h := f.KeyHash()
	e := s.entry(&h)
	if e == nil {
		return
	}
	e.Pending = max(e.Pending, 1) - 1
	if op != wire.OpErr && f.Code() == wire.CodeOK {
		s.complete(e, f.Stamp())
	}
}

func (s *Spine) complete(e *SpineEntry, v uint64) {
	if v > e.VerDone {
		e.VerDone = v
		e.Fresh = 1
	}
}

// VSB takes a version-stamp broadcast from rack r: from the home rack it
// is the tail's commit announcement; from another rack, its primary's
// announcement of a copy, which makes the rack fresh if it is one of the
// key's racks, no write is pending and the version is the one complete.
// It reports whether the VSB was accepted.
func (s *Spine) VSB(pkt []byte, r int) bool {
	f := wire.Frame(pkt)
	if f.Check() != nil || f.Op() != wire.OpVSB {
		return false
	}
	h := f.KeyHash()
	e := s.entry(&h)
	if e == nil {
		s.counter.VSBsRefused++
		return false
	}
	v := f.Stamp()
	i := -1
	for j := 0; j < int(e.N); j++ {
		if int(e.Racks[j]) == r { // an entry's racks are distinct
			i = j
			break
		}
	}
	switch {
	case i == 0:
		s.complete(e, v)
	case i < 0 || e.Pending > 0 || v != e.VerDone:
		s.counter.VSBsRefused++
		return false
	default:
		e.Fresh |= 1 << i
	}
	s.counter.VSBs++
	return true
}
