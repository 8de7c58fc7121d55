package wire

import "encoding/binary"

// Frame is an encoded packet read and rewritten in place, field by field, as
// a data plane does on its fast path: no decode, no copy, no allocation.
// Every accessor is small enough to inline.
//
// Check first: the accessors of header fields need a frame of at least
// HeaderLen bytes and panic on a shorter one.
type Frame []byte

// Check reports whether f starts with a netdir header: ErrShort, ErrMagic or
// ErrVersion if not.
func (f Frame) Check() error {
	switch {
	case len(f) < HeaderLen:
		return ErrShort
	case f.Magic() != Magic:
		return ErrMagic
	case f.Version() != Version:
		return ErrVersion
	}
	return nil
}

// Magic is the magic field (Magic in a netdir packet).
func (f Frame) Magic() uint16 { return binary.BigEndian.Uint16(f[offMagic:]) }

// Version is the wire version field.
func (f Frame) Version() uint8 { return f[offVersion] }

// Op is the packet's op.
func (f Frame) Op() Op { return Op(f[offOp]) }

// Flags are the flag bits.
func (f Frame) Flags() uint8 { return f[offFlags] }

// Code is the reply's outcome.
func (f Frame) Code() Code { return Code(f[offCode]) }

// Tenant is the tenant id.
func (f Frame) Tenant() uint16 { return binary.BigEndian.Uint16(f[offTenant:]) }

// ReqID is the request id.
func (f Frame) ReqID() uint64 { return binary.BigEndian.Uint64(f[offReqID:]) }

// KeyHash is the key's hash.
func (f Frame) KeyHash() KeyHash { return KeyHash(f[offKeyHash : offKeyHash+KeyHashLen]) }

// Stamp is the VersionStamp.
func (f Frame) Stamp() uint64 { return binary.BigEndian.Uint64(f[offStamp:]) }

// Node is the node id: the target of a request, the sender of a reply or VSB.
func (f Frame) Node() NodeID { return binary.BigEndian.Uint16(f[offNode:]) }

// Load is the sender's load on replies.
func (f Frame) Load() uint16 { return binary.BigEndian.Uint16(f[offLoad:]) }

// Epoch is the chain-configuration epoch the sender believes in.
func (f Frame) Epoch() uint32 { return binary.BigEndian.Uint32(f[offEpoch:]) }

// Timestamp is the data plane's clock (ns) stamped on the request.
func (f Frame) Timestamp() uint64 { return binary.BigEndian.Uint64(f[offTimestamp:]) }

// Delta is dmClock's δ: the tenant's completions at other nodes since its
// last request to the target node, stamped by the data plane on requests.
func (f Frame) Delta() uint32 { return binary.BigEndian.Uint32(f[offDelta:]) }

// Rho is dmClock's ρ: the part of Delta served in the reservation phase.
func (f Frame) Rho() uint32 { return binary.BigEndian.Uint32(f[offRho:]) }

// SetMagic rewrites the magic field (tests forge a wrong one).
func (f Frame) SetMagic(m uint16) { binary.BigEndian.PutUint16(f[offMagic:], m) }

// SetVersion rewrites the version field (tests forge a wrong one).
func (f Frame) SetVersion(v uint8) { f[offVersion] = v }

// SetOp rewrites the op.
func (f Frame) SetOp(o Op) { f[offOp] = uint8(o) }

// SetFlags rewrites the flags.
func (f Frame) SetFlags(fl uint8) { f[offFlags] = fl }

// SetCode rewrites the code.
func (f Frame) SetCode(c Code) { f[offCode] = uint8(c) }

// SetTenant rewrites the tenant id.
func (f Frame) SetTenant(t uint16) { binary.BigEndian.PutUint16(f[offTenant:], t) }

// SetReqID rewrites the request id.
func (f Frame) SetReqID(id uint64) { binary.BigEndian.PutUint64(f[offReqID:], id) }

// SetKeyHash rewrites the key's hash.
func (f Frame) SetKeyHash(h KeyHash) { copy(f[offKeyHash:offKeyHash+KeyHashLen], h[:]) }

// SetStamp rewrites the version stamp.
func (f Frame) SetStamp(v uint64) { binary.BigEndian.PutUint64(f[offStamp:], v) }

// SetNode rewrites the node field.
func (f Frame) SetNode(n NodeID) { binary.BigEndian.PutUint16(f[offNode:], n) }

// SetLoad rewrites the load.
func (f Frame) SetLoad(l uint16) { binary.BigEndian.PutUint16(f[offLoad:], l) }

// SetEpoch rewrites the epoch.
func (f Frame) SetEpoch(e uint32) { binary.BigEndian.PutUint32(f[offEpoch:], e) }

// SetTimestamp rewrites the timestamp.
func (f Frame) SetTimestamp(t uint64) { binary.BigEndian.PutUint64(f[offTimestamp:], t) }

// SetDelta rewrites dmClock's δ.
func (f Frame) SetDelta(d uint32) { binary.BigEndian.PutUint32(f[offDelta:], d) }

// SetRho rewrites dmClock's ρ.
func (f Frame) SetRho(r uint32) { binary.BigEndian.PutUint32(f[offRho:], r) }

// lengths are the key and value lengths of a frame at least PrefixLen long.
func (f Frame) lengths() (key, val int) {
	return int(binary.BigEndian.Uint16(f[offKeyLen:])), int(binary.BigEndian.Uint16(f[offValLen:]))
}

// setLengths writes the key and value lengths.
func (f Frame) setLengths(key, val int) {
	binary.BigEndian.PutUint16(f[offKeyLen:], uint16(key))
	binary.BigEndian.PutUint16(f[offValLen:], uint16(val))
}
