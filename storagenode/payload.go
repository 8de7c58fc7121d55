package storagenode

import (
	"encoding/binary"
	"net/netip"

	"github.com/netdir/netdir/wire"
)

// Node ops (wire.Op 0x20..0x2a) are storagenode's own: data planes parse only
// their fixed header. A node op is laid out like any netdir packet — header,
// key and value lengths, key, value — and may be followed by an extension
// that only storage nodes read (so node ops do not pass wire.Packet.Decode,
// which refuses trailing bytes). Header fields keep their meaning where they
// have one (KeyHash, Stamp = version, Node = sender, Epoch); the rest is:
//
//	op           key        value             ext                              header use
//	chain-write  key        value             op(1) flags(1) alen(1) addr      ReqID, Timestamp, Tenant of the
//	                                          n(1) extras(2·n)                 original request; Stamp = version
//	chain-ack    key        -                 -                                Stamp = committed version
//	ver-query    key        -                 -                                ReqID = query id; Stamp = latest held
//	ver-answer   key        committed value   -                                ReqID = query id; Stamp = committed
//	                                                                           version; Code not-found if absent
//	copy         key        value             -                                Stamp = version; Code not-found for
//	                                                                           a tombstone
//	copy-ack     key        -                 -                                Stamp = version held
//	promote      key        extra ids (2·n)   -                                reply: same op, Code, to the sender
//	demote       key        -                 -                                reply: same op, Code, to the sender
//	sync         cursor     -                 -                                ReqID = sync id; Stamp = partition;
//	                                                                           cursor: last key received (exclusive)
//	sync-data    -          -                 more(1) n(2) n×(klen(2) key      ReqID, Stamp echoed
//	                                          vlen(4) clean version record)
//	stats        -          JSON Stats (reply)                                 reply: same op, to the sender
//
// Control ops (promote, demote, stats) come from a controller with node 0
// in the header. Their replies, and a head's demote pushed to its extras,
// carry the sending node's id: a control op with a non-zero node is never
// answered, so replies cannot ping-pong between nodes.
//
// A promote with header flag wire.FlagPromoteNoStamp comes from a controller
// whose data planes are host agents only: none stamps writes, so the head
// keeps assigning versions to the key and does not refuse unstamped writes
// (agents serve extras only to bounded-staleness reads). The head persists
// the promotion's extras, followed by the byte promoNoStampMark when so.
const promoNoStampMark = 0xff

// Chain-write flags: bit 0 — the key is promoted; the tail announces the
// commit by VSB and pushes the version to the extras listed.
const chainFlagPromoted = 1

// nodePacket is a decoded node op.
type nodePacket struct {
	wire.Packet
	Ext []byte
}

// decodeAny parses a packet: header, lengths, key, value, then any
// extension. Unlike wire.Packet.Decode it accepts trailing bytes and does
// not enforce MaxKey/MaxValue (callers check them for client ops).
func decodeAny(b []byte, p *nodePacket) error {
	if err := p.DecodeHeader(b); err != nil {
		return err
	}
	if len(b) < wire.PrefixLen {
		return wire.ErrShort
	}
	kl := int(binary.BigEndian.Uint16(b[wire.OffKeyLen:]))
	vl := int(binary.BigEndian.Uint16(b[wire.OffValLen:]))
	if wire.PrefixLen+kl+vl > len(b) {
		return wire.ErrLengths
	}
	p.Key = b[wire.PrefixLen : wire.PrefixLen+kl : wire.PrefixLen+kl]
	p.Value = b[wire.PrefixLen+kl : wire.PrefixLen+kl+vl : wire.PrefixLen+kl+vl]
	p.Ext = b[wire.PrefixLen+kl+vl:]
	return nil
}

// encodeNode appends a node op to dst. Key and value may exceed the client
// limits only for sync-data (they never do: sync-data carries its records in
// the extension).
func encodeNode(dst []byte, h *wire.Header, key, val, ext []byte) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, wire.PrefixLen)...)
	h.EncodeHeader(dst[n:])
	binary.BigEndian.PutUint16(dst[n+wire.OffKeyLen:], uint16(len(key)))
	binary.BigEndian.PutUint16(dst[n+wire.OffValLen:], uint16(len(val)))
	dst = append(dst, key...)
	dst = append(dst, val...)
	return append(dst, ext...)
}

// chainExt is the chain-write extension.
type chainExt struct {
	Op       wire.Op
	Promoted bool
	Addr     netip.AddrPort
	Extras   []wire.NodeID
}

func (c *chainExt) append(b []byte) []byte {
	var f byte
	if c.Promoted {
		f |= chainFlagPromoted
	}
	b = append(b, byte(c.Op), f)
	if c.Addr.IsValid() {
		a, _ := c.Addr.MarshalBinary()
		b = append(b, byte(len(a)))
		b = append(b, a...)
	} else {
		b = append(b, 0)
	}
	b = append(b, byte(len(c.Extras)))
	for _, id := range c.Extras {
		b = binary.BigEndian.AppendUint16(b, id)
	}
	return b
}

func decodeChainExt(b []byte) (chainExt, bool) {
	r := &reader{b: b}
	var c chainExt
	c.Op = wire.Op(r.u8())
	c.Promoted = r.u8()&chainFlagPromoted != 0
	if n := int(r.u8()); n > 0 {
		if a := r.n(n); a != nil {
			if err := c.Addr.UnmarshalBinary(a); err != nil {
				return c, false
			}
		}
	}
	n := int(r.u8())
	for i := 0; i < n && !r.err; i++ {
		c.Extras = append(c.Extras, r.u16())
	}
	if r.err || len(r.b) != 0 || (c.Op != wire.OpPut && c.Op != wire.OpDel) {
		return c, false
	}
	return c, true
}

func encodeIDs(ids []wire.NodeID) []byte {
	b := make([]byte, 0, 2*len(ids))
	for _, id := range ids {
		b = binary.BigEndian.AppendUint16(b, id)
	}
	return b
}

func decodeIDs(b []byte) ([]wire.NodeID, bool) {
	if len(b)%2 != 0 {
		return nil, false
	}
	ids := make([]wire.NodeID, 0, len(b)/2)
	for i := 0; i < len(b); i += 2 {
		ids = append(ids, binary.BigEndian.Uint16(b[i:]))
	}
	return ids, true
}

// syncRecord is one key's clean version in a sync-data reply.
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

func decodeSyncData(b []byte) (recs []syncRecord, more bool, ok bool) {
	r := &reader{b: b}
	more = r.u8() != 0
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
