package storagenode

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"

	"github.com/netdir/netdir/wire"
)

// Pebble key space of one tree. Every key starts with a one-byte kind:
//
//	'k' partition(4) key      → record: the clean version and the dirty ones
//	'q' reqid(8)              → dedup entry (tree 0, the head's tree, only)
//	'p' key                   → promotion: the extra node ids (tree 0 only)
const (
	kindRecord = 'k'
	kindDedup  = 'q'
	kindPromo  = 'p'
)

func recordKey(part uint32, key []byte) []byte {
	return appendRecordKey(make([]byte, 0, 5+len(key)), part, key)
}

func appendRecordKey(dst []byte, part uint32, key []byte) []byte {
	dst = append(dst, kindRecord)
	dst = binary.BigEndian.AppendUint32(dst, part)
	return append(dst, key...)
}

func partitionBounds(part uint32) (lo, hi []byte) {
	lo = []byte{kindRecord, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(lo[1:], part)
	hi = []byte{kindRecord, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hi[1:], part+1)
	if part == ^uint32(0) {
		hi = []byte{kindRecord + 1}
	}
	return lo, hi
}

func dedupKey(reqid uint64) []byte {
	b := make([]byte, 9)
	b[0] = kindDedup
	binary.BigEndian.PutUint64(b[1:], reqid)
	return b
}

func promoKey(key []byte) []byte { return append([]byte{kindPromo}, key...) }

// version is one version of a key: a value or a tombstone. Dirty versions
// also carry where the tail must send the reply, and how (Reservation: the
// head's dmClock admitted the write in its reservation phase), so that a
// write retransmitted after a restart still reaches its requester, and the
// writes of its group that it absorbed (their request ids), which every
// member remembers at the version.
type version struct {
	Ver         uint64
	Del         bool
	Val         []byte
	ReqID       uint64
	TS          uint64
	Tenant      uint16
	Op          uint8 // wire.OpPut or wire.OpDel
	Addr        netip.AddrPort
	Reservation bool
	Absorbed    []wire.AbsorbedWrite
}

// record is what a tree stores for a key: the committed (clean) version and
// the versions received but not yet known committed (dirty), ascending.
// Clean.Ver == 0 means no committed version.
type record struct {
	Clean version
	Dirty []version
}

// Latest is the highest version held, clean or dirty.
func (r *record) Latest() *version {
	if n := len(r.Dirty); n > 0 {
		return &r.Dirty[n-1]
	}
	return &r.Clean
}

// find returns the dirty version v, or nil.
func (r *record) find(v uint64) *version {
	for i := range r.Dirty {
		if r.Dirty[i].Ver == v {
			return &r.Dirty[i]
		}
	}
	return nil
}

// addDirty inserts v in order; it reports false when v is already held or
// not newer than the clean version.
func (r *record) addDirty(v version) bool {
	if v.Ver <= r.Clean.Ver || r.find(v.Ver) != nil {
		return false
	}
	i, _ := slices.BinarySearchFunc(r.Dirty, v.Ver, func(a version, t uint64) int {
		switch {
		case a.Ver < t:
			return -1
		case a.Ver > t:
			return 1
		}
		return 0
	})
	r.Dirty = slices.Insert(r.Dirty, i, v)
	return true
}

// place puts a version new at the head in the record: clean at once for a
// chain of one (the head is the tail), else dirty until the tail's ack.
func (r *record) place(v version, alone bool) {
	if alone {
		r.setClean(v)
		return
	}
	r.addDirty(v)
}

// commit makes version v clean, if it is held dirty, and drops older dirty
// versions. It reports whether anything changed.
func (r *record) commit(v uint64) bool {
	d := r.find(v)
	if d == nil {
		return false
	}
	r.Clean = *d
	r.Clean.Addr, r.Clean.Absorbed = netip.AddrPort{}, nil
	r.Dirty = slices.DeleteFunc(r.Dirty, func(x version) bool { return x.Ver <= v })
	return true
}

// setClean installs a committed version learnt from elsewhere (the tail's
// answer, or a peer during sync) and drops dirty versions it covers.
func (r *record) setClean(v version) bool {
	if v.Ver <= r.Clean.Ver {
		return false
	}
	v.Addr, v.Absorbed = netip.AddrPort{}, nil
	r.Clean = v
	r.Dirty = slices.DeleteFunc(r.Dirty, func(x version) bool { return x.Ver <= v.Ver })
	return true
}

var errCorrupt = errors.New("storagenode: corrupt record")

const (
	vflagDel         = 1 << 0
	vflagAddr        = 1 << 1
	vflagReservation = 1 << 2
	vflagAbsorbed    = 1 << 3
)

func appendVersion(b []byte, v *version, full bool) []byte {
	var f byte
	if v.Del {
		f |= vflagDel
	}
	var addr []byte
	if full && v.Addr.IsValid() {
		f |= vflagAddr
		addr, _ = v.Addr.MarshalBinary()
	}
	if full && v.Reservation {
		f |= vflagReservation
	}
	if full && len(v.Absorbed) > 0 {
		f |= vflagAbsorbed
	}
	b = binary.BigEndian.AppendUint64(b, v.Ver)
	b = append(b, f)
	if full {
		b = binary.BigEndian.AppendUint64(b, v.ReqID)
		b = binary.BigEndian.AppendUint64(b, v.TS)
		b = binary.BigEndian.AppendUint16(b, v.Tenant)
		b = append(b, v.Op)
		if f&vflagAddr != 0 {
			b = append(b, byte(len(addr)))
			b = append(b, addr...)
		}
		if f&vflagAbsorbed != 0 {
			b = wire.AppendAbsorbed(b, v.Absorbed)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(v.Val)))
	return append(b, v.Val...)
}

type reader struct {
	b   []byte
	err bool
}

func (r *reader) n(k int) []byte {
	if r.err || len(r.b) < k {
		r.err = true
		return nil
	}
	x := r.b[:k:k]
	r.b = r.b[k:]
	return x
}
func (r *reader) u8() uint8 {
	if b := r.n(1); b != nil {
		return b[0]
	}
	return 0
}
func (r *reader) u16() uint16 {
	if b := r.n(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}
func (r *reader) u32() uint32 {
	if b := r.n(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}
func (r *reader) u64() uint64 {
	if b := r.n(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func readVersion(r *reader, full bool) version {
	var v version
	v.Ver = r.u64()
	f := r.u8()
	v.Del = f&vflagDel != 0
	if full {
		v.ReqID = r.u64()
		v.TS = r.u64()
		v.Tenant = r.u16()
		v.Op = r.u8()
		v.Reservation = f&vflagReservation != 0
		if f&vflagAddr != 0 {
			n := int(r.u8())
			if b := r.n(n); b != nil {
				if err := v.Addr.UnmarshalBinary(b); err != nil {
					r.err = true
				}
			}
		}
		if f&vflagAbsorbed != 0 {
			n := int(r.u8())
			for range n {
				v.Absorbed = append(v.Absorbed, wire.AbsorbedWrite{ReqID: r.u64(), Op: wire.Op(r.u8())})
			}
		}
	}
	n := r.u32()
	if n > 1<<20 {
		r.err = true
		return v
	}
	v.Val = r.n(int(n))
	return v
}

func (r *record) encode() []byte {
	sz := 32 + len(r.Clean.Val)
	for i := range r.Dirty {
		sz += 64 + len(r.Dirty[i].Val)
	}
	b := make([]byte, 0, sz)
	b = appendVersion(b, &r.Clean, false)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Dirty)))
	for i := range r.Dirty {
		b = appendVersion(b, &r.Dirty[i], true)
	}
	return b
}

// decodeRecord parses b; the record aliases b.
func decodeRecord(b []byte) (record, error) {
	rd := &reader{b: b}
	var r record
	r.Clean = readVersion(rd, false)
	n := int(rd.u16())
	for i := 0; i < n && !rd.err; i++ {
		r.Dirty = append(r.Dirty, readVersion(rd, true))
	}
	if rd.err || len(rd.b) != 0 {
		return record{}, errCorrupt
	}
	return r, nil
}

// dedupEntry is the head's memory of a write request: its outcome.
type dedupEntry struct {
	Seq     uint64 // insertion order, for bounded eviction
	KeyHash [16]byte
	Ver     uint64
	Code    uint8
	Op      uint8
	// inTree, in memory only, is 1 + the index of the tree that persists
	// the entry (each chain position writes its own), or 0 if none does.
	inTree uint8
}

func (e *dedupEntry) encode() []byte {
	b := make([]byte, 0, 35)
	b = binary.BigEndian.AppendUint64(b, e.Seq)
	b = append(b, e.KeyHash[:]...)
	b = binary.BigEndian.AppendUint64(b, e.Ver)
	return append(b, e.Code, e.Op)
}

func decodeDedup(b []byte) (dedupEntry, error) {
	if len(b) != 34 {
		return dedupEntry{}, errCorrupt
	}
	var e dedupEntry
	e.Seq = binary.BigEndian.Uint64(b)
	copy(e.KeyHash[:], b[8:24])
	e.Ver = binary.BigEndian.Uint64(b[24:])
	e.Code, e.Op = b[32], b[33]
	return e, nil
}
