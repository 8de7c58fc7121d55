package storagenode

import (
	"encoding/binary"

	"github.com/netdir/netdir/wire"
)

// Node ops are laid out in package wire (wire.NodePacket, wire.ChainExt,
// wire.AppendNodeOp, the table in wire/nodeop.go). What stays here is what
// only this package reads: the records of a sync-data extension, and the
// mark on a persisted promotion.

// promoNoStampMark follows the extras' ids of a persisted promotion that
// came with wire.FlagPromoteNoStamp: the head keeps accepting unstamped
// writes to the key.
const promoNoStampMark = 0xff

// promoIncMark ends a persisted promotion whose stamps carry an
// incarnation (wire.StampIncarnation): the extras' ids, the incarnation
// (2 bytes), then the mark. It never meets promoNoStampMark: a key no
// data plane stamps has no incarnation.
const promoIncMark = 0xfe

// appendPromo is a promotion as the head persists it.
func appendPromo(ids []wire.NodeID, noStamp bool, inc uint16) []byte {
	b := wire.AppendNodeIDs(nil, ids)
	switch {
	case noStamp:
		b = append(b, promoNoStampMark)
	case inc != 0:
		b = append(binary.BigEndian.AppendUint16(b, inc), promoIncMark)
	}
	return b
}

// parsePromo is the inverse of appendPromo.
func parsePromo(v []byte) (ids []wire.NodeID, noStamp bool, inc uint16, err error) {
	switch {
	case len(v)%2 == 1 && v[len(v)-1] == promoNoStampMark:
		v, noStamp = v[:len(v)-1], true
	case len(v)%2 == 1 && len(v) >= 3 && v[len(v)-1] == promoIncMark:
		inc = binary.BigEndian.Uint16(v[len(v)-3:])
		v = v[:len(v)-3]
	}
	ids, err = wire.ParseNodeIDs(v)
	return ids, noStamp, inc, err
}

// syncRecord is one key's version in a sync-data reply: the clean one, or
// the latest for a tail.
type syncRecord struct {
	Key []byte
	V   version
}

func appendSyncRecord(b []byte, key []byte, v *version) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, key...)
	enc := appendVersion(nil, v, false)
	b = binary.BigEndian.AppendUint32(b, uint32(len(enc)))
	return append(b, enc...)
}

// OpSyncData's first byte: flags.
const (
	syncMore       = 1 << 0 // more chunks follow
	syncLatestFlag = 1 << 1 // latest versions, dirty included, for a tail
)

// syncLatest reports whether an OpSyncData answer carries the sender's
// latest versions.
func syncLatest(ext []byte) bool { return len(ext) > 0 && ext[0]&syncLatestFlag != 0 }

func decodeSyncData(b []byte) (recs []syncRecord, more bool, ok bool) {
	r := &reader{b: b}
	more = r.u8()&syncMore != 0
	n := int(r.u16())
	for i := 0; i < n && !r.err; i++ {
		kl := int(r.u16())
		key := r.n(kl)
		vl := int(r.u32())
		vb := r.n(vl)
		if r.err {
			break
		}
		vr := &reader{b: vb}
		v := readVersion(vr, false)
		if vr.err || len(vr.b) != 0 {
			return nil, false, false
		}
		recs = append(recs, syncRecord{Key: key, V: v})
	}
	if r.err || len(r.b) != 0 {
		return nil, false, false
	}
	return recs, more, true
}
