package wire

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Node ops (0x20..0x2a) travel between storage nodes, and from a controller
// to nodes; data planes parse only their fixed header. A node op is laid out
// like any netdir packet — header, key and value lengths, key, value — and
// may be followed by an extension that only storage nodes read (so node ops
// do not pass Packet.Decode, which refuses trailing bytes: decode them with
// NodePacket.Decode). Header fields keep their meaning where they have one
// (KeyHash, Stamp = version, Node = sender, Epoch); the rest is:
//
//	op           key        value             ext                              header use
//	chain-write  key        value             ChainExt: op(1) flags(1)         ReqID, Timestamp, Tenant of the
//	                                          alen(1) addr n(1) extras(2·n)    original request; Stamp = version
//	                                          [m(1) m×(reqid(8) op(1))]
//	                                          flags: 0 promoted,
//	                                          1 reservation
//	                                          m: absorbed writes, 1..31
//	chain-ack    key        -                 -                                Stamp = committed version
//	ver-query    key        -                 -                                ReqID = query id; Stamp = latest held
//	ver-answer   key        committed value   -                                ReqID = query id; Stamp = committed
//	                                                                           version; Code not-found if absent
//	copy         key        value             -                                Stamp = version; Code not-found for
//	                                                                           a tombstone
//	copy-ack     key        -                 -                                Stamp = version held
//	promote      key        extra ids (2·n)   -                                Stamp = MakeStamp(incarnation, 0): the
//	                                                                           data planes' incarnation (stamp.go);
//	                                                                           reply: same op, Code, to the sender;
//	                                                                           Stamp = the head's latest version
//	demote       key        -                 -                                reply: same op, Code, to the sender
//	sync         cursor     -                 -                                ReqID = sync id; Stamp = partition;
//	                                                                           cursor: last key received (exclusive)
//	sync-data    -          -                 more(1) n(2) n×(klen(2) key      ReqID, Stamp echoed
//	                                          vlen(4) record), records that
//	                                          only storage nodes read
//	stats        -          JSON Stats (reply)                                 reply: same op, to the sender
//
// Node ids (extras) are 16-bit, in network byte order like every field.
//
// Control ops (promote, demote, stats) come from a controller with node 0
// in the header. Their replies, and a head's demote pushed to its extras,
// carry the sending node's id: a control op with a non-zero node is never
// answered, so replies cannot ping-pong between nodes.
//
// In a cluster with a key, every node op ends in a 28-byte trailer after the
// extension: key id, counter and an HMAC-SHA256 MAC over everything before
// it (package nodeauth). Receivers check and strip it before they decode
// the op, so NodePacket.Decode never sees it; data planes, which parse
// only the fixed header, pass it untouched.
//
// A promote with header flag FlagPromoteNoStamp comes from a controller
// whose data planes are host agents only: none stamps writes, so the head
// keeps assigning versions to the key and does not refuse unstamped writes
// (agents serve extras only to bounded-staleness reads).

// Node-op decode errors.
var (
	ErrNodeIDs  = errors.New("wire: node-id list of odd length")
	ErrChainExt = errors.New("wire: malformed chain-write extension")
)

// NodePacket is a decoded node op: a packet and the extension after its
// value.
type NodePacket struct {
	Packet
	Ext []byte
}

// Decode parses a node op (or any packet): header, lengths, key, value, then
// the extension. Key, Value and Ext alias b. Unlike Packet.Decode it accepts
// bytes after the value and does not enforce MaxKey/MaxValue (a receiver
// checks them for client ops, to answer with their codes).
func (p *NodePacket) Decode(b []byte) error {
	ext, err := p.decode(b)
	if err != nil {
		return err
	}
	p.Ext = ext
	return nil
}

// AppendNodeOp appends a node op to dst: h, the lengths, key, value and
// extension. Key and value are not held to the client limits.
func AppendNodeOp(dst []byte, h *Header, key, val, ext []byte) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, PrefixLen)...)
	h.EncodeHeader(dst[n:])
	Frame(dst[n:]).setLengths(len(key), len(val))
	dst = append(dst, key...)
	dst = append(dst, val...)
	return append(dst, ext...)
}

// AppendNodeIDs appends ids as 16-bit values: the value of a promote, and
// the extras of a chain-write extension.
func AppendNodeIDs(dst []byte, ids []NodeID) []byte {
	for _, id := range ids {
		dst = binary.BigEndian.AppendUint16(dst, id)
	}
	return dst
}

// ParseNodeIDs is the inverse of AppendNodeIDs.
func ParseNodeIDs(b []byte) ([]NodeID, error) {
	if len(b)%2 != 0 {
		return nil, ErrNodeIDs
	}
	ids := make([]NodeID, 0, len(b)/2)
	for i := 0; i < len(b); i += 2 {
		ids = append(ids, binary.BigEndian.Uint16(b[i:]))
	}
	return ids, nil
}

// ChainExt is the chain-write extension: the client op, whether the key is
// promoted, whether the head admitted the write in dmClock's reservation
// phase, the client's address (the tail replies to it), the extras, and
// the writes the version absorbed (a write group, whose last write is the
// header's request): members below the head remember their request ids at
// the version, so that a new head answers their retries.
type ChainExt struct {
	Op          Op // OpPut or OpDel
	Promoted    bool
	Reservation bool
	Addr        netip.AddrPort
	Extras      []NodeID
	Absorbed    []AbsorbedWrite // at most MaxWriteGroup-1; absent when empty
}

// MaxWriteGroup bounds the writes of one key that a chain head applies as
// one version (a write group): the last one's and up to MaxWriteGroup-1
// absorbed ones.
const MaxWriteGroup = 32

// AbsorbedWrite is a write of a group other than its last: its request id
// and op (OpPut or OpDel), which the reply to its retry names.
type AbsorbedWrite struct {
	ReqID uint64
	Op    Op
}

// Chain-write flags: bit 0 — the key is promoted; the tail announces the
// commit by VSB and pushes the version to the extras listed. Bit 1 — the
// head's dmClock served the write in its reservation phase; the tail sets
// FlagReservation on the reply, which it sends in the head's stead.
const (
	chainFlagPromoted    = 1 << 0
	chainFlagReservation = 1 << 1
)

// Append appends the extension to b.
func (c *ChainExt) Append(b []byte) []byte {
	var f byte
	if c.Promoted {
		f |= chainFlagPromoted
	}
	if c.Reservation {
		f |= chainFlagReservation
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
	b = AppendNodeIDs(b, c.Extras)
	if len(c.Absorbed) == 0 {
		return b
	}
	return AppendAbsorbed(b, c.Absorbed)
}

// AppendAbsorbed appends ws as a count byte and each write's request id
// (8 bytes) and op (1 byte): the chain-write extension's field, which a
// storage node's record keeps with its dirty version too.
func AppendAbsorbed(b []byte, ws []AbsorbedWrite) []byte {
	b = append(b, byte(len(ws)))
	for _, w := range ws {
		b = binary.BigEndian.AppendUint64(b, w.ReqID)
		b = append(b, byte(w.Op))
	}
	return b
}

// Decode parses the extension, which must fill b.
func (c *ChainExt) Decode(b []byte) error {
	*c = ChainExt{}
	if len(b) < 3 {
		return ErrChainExt
	}
	c.Op = Op(b[0])
	c.Promoted = b[1]&chainFlagPromoted != 0
	c.Reservation = b[1]&chainFlagReservation != 0
	alen := int(b[2])
	b = b[3:]
	if len(b) < alen+1 {
		return ErrChainExt
	}
	if alen > 0 && (c.Addr.UnmarshalBinary(b[:alen]) != nil || !c.Addr.IsValid()) {
		return ErrChainExt
	}
	n := int(b[alen])
	b = b[alen+1:]
	if len(b) < 2*n || (c.Op != OpPut && c.Op != OpDel) {
		return ErrChainExt
	}
	if n > 0 {
		c.Extras, _ = ParseNodeIDs(b[:2*n])
	}
	b = b[2*n:]
	if len(b) == 0 {
		return nil
	}
	// The absorbed writes: present only when there are some.
	m := int(b[0])
	b = b[1:]
	if m == 0 || m > MaxWriteGroup-1 || len(b) != 9*m {
		*c = ChainExt{}
		return ErrChainExt
	}
	c.Absorbed = make([]AbsorbedWrite, m)
	for i := range c.Absorbed {
		w := AbsorbedWrite{ReqID: binary.BigEndian.Uint64(b[9*i:]), Op: Op(b[9*i+8])}
		if w.Op != OpPut && w.Op != OpDel {
			*c = ChainExt{}
			return ErrChainExt
		}
		c.Absorbed[i] = w
	}
	return nil
}

// NewPromote is the promote request that a controller sends to key's chain
// head: the extras' ids as its value, and FlagPromoteNoStamp if noStamp.
// The caller sets ReqID (and Epoch if it follows one), and Stamp to
// MakeStamp(incarnation, 0) once the data planes have lost their state
// (stamp.go).
func NewPromote(key []byte, extras []NodeID, noStamp bool) Packet {
	p := Packet{Header: Header{Op: OpPromote, KeyHash: HashKey(key)}, Key: key, Value: AppendNodeIDs(nil, extras)}
	if noStamp {
		p.Flags = FlagPromoteNoStamp
	}
	return p
}

// NewDemote is the demote request that a controller sends to key's chain
// head. The caller sets ReqID (and Epoch if it follows one).
func NewDemote(key []byte) Packet {
	return Packet{Header: Header{Op: OpDemote, KeyHash: HashKey(key)}, Key: key}
}

// NewStats is the stats request; the reply's value is the node's JSON
// counters. The caller sets ReqID.
func NewStats() Packet { return Packet{Header: Header{Op: OpStats}} }
