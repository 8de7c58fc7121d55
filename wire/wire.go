// Package wire is netdir's packet format: the byte layout that the four data
// planes (the Go directory core, the software data plane, P4 and eBPF) parse,
// and that clients and storage nodes speak.
//
// A netdir packet is the UDP payload sent to the service port (ServicePort).
// It starts with a fixed 64-byte header in network byte order, so that a P4
// parser or an XDP program can extract it with no loops. After the header come
// the key and value lengths, then the key and the value; no data plane parses
// those.
//
//	offset size field      meaning
//	     0    2 magic      0x4E44 ("ND")
//	     2    1 version    2
//	     3    1 op         Op: GET, PUT, DEL, their replies, VSB, ERR, node ops
//	     4    1 flags      Flag bits
//	     5    1 code       Code: the outcome of a reply, or why it failed
//	     6    2 tenant     tenant id, for dmClock QoS
//	     8    8 reqid      request id; the data planes draw split buckets from it
//	    16   16 keyhash    KeyHash: the first 16 bytes of SHAKE128(key)
//	    32    8 version    VersionStamp; on a stamped write, the data plane's
//	                       incarnation (top 16 bits) and the version (low 48):
//	                       MakeStamp, stamp.go
//	    40    2 node       node id: the target of a request, the sender of a reply or VSB
//	    42    2 load       the sender's load (queue depth) on replies
//	    44    4 epoch      chain-configuration epoch the sender believes in
//	    48    8 timestamp  data-plane clock in ns, stamped on requests, echoed on replies
//	    56    4 delta      dmClock δ: the tenant's completions at other nodes since
//	                       its last request to this one, stamped on requests
//	    60    4 rho        dmClock ρ: the part of δ served in the reservation phase
//	    64    2 keylen     not parsed by data planes
//	    66    2 vallen     not parsed by data planes
//	    68    - key, then value
//
// Version 2 added delta and rho (issue 17: global dmClock through the data
// plane); a version-1 packet is refused with ErrVersion.
//
// Split entropy: bucket tables have B entries, B a power of two up to 256. A
// data plane picks its first bucket as reqid & (B-1) and its second (the
// fine-score candidate) as (reqid >> 8) & (B-1). Clients draw
// request ids at random, so the split is random over requests, yet every data
// plane computes the same choice for the same packet, which is what lets one
// vector suite hold P4, XDP, the model and the Go core to identical outputs.
package wire

import (
	"crypto/sha3"
	"encoding/binary"
	"errors"
	"fmt"
)

// Header layout constants; see the package doc.
const (
	Magic      = 0x4E44
	Version    = 2
	HeaderLen  = 64 // the part data planes parse
	PrefixLen  = 68 // header plus key and value lengths
	MaxKey     = 1024
	MaxValue   = 32 * 1024
	MaxPacket  = PrefixLen + MaxKey + MaxValue
	KeyHashLen = 16

	// ServicePort is the UDP port that data planes match and nodes listen on
	// in a real deployment.
	ServicePort = 7420
)

// Byte offsets of the header fields.
const (
	offMagic     = 0
	offVersion   = 2
	offOp        = 3
	offFlags     = 4
	offCode      = 5
	offTenant    = 6
	offReqID     = 8
	offKeyHash   = 16
	offStamp     = 32
	offNode      = 40
	offLoad      = 42
	offEpoch     = 44
	offTimestamp = 48
	offDelta     = 56
	offRho       = 60
	offKeyLen    = 64
	offValLen    = 66
)

// NodeID names a storage node.
type NodeID = uint16

// Op is the packet's operation.
type Op uint8

// Client ops and their replies, the version-stamp broadcast and errors are
// handled by data planes. Node ops (0x20..0x3f) travel between storage nodes and
// are passed by data planes like any other traffic.
const (
	OpGet Op = 0x01
	OpPut Op = 0x02
	OpDel Op = 0x03
	OpVSB Op = 0x04

	OpGetReply Op = 0x81
	OpPutReply Op = 0x82
	OpDelReply Op = 0x83
	OpErr      Op = 0xff

	// Node ops: chain replication and hot-key copies, node to node.
	OpChainWrite Op = 0x20 // a write travelling down the chain
	OpChainAck   Op = 0x21 // the tail's commit travelling back up
	OpVerQuery   Op = 0x22 // a dirty member asks the tail which version is committed
	OpVerAnswer  Op = 0x23
	OpCopy       Op = 0x24 // the head copies a clean version to an extra
	OpCopyAck    Op = 0x25
	OpPromote    Op = 0x26 // the controller tells a head that a key is promoted
	OpDemote     Op = 0x27
	OpSync       Op = 0x28 // a restarted member asks its chain for missed writes
	OpSyncData   Op = 0x29
	OpStats      Op = 0x2a
)

// IsNodeOp reports whether op is a node-to-node op that data planes pass.
func (o Op) IsNodeOp() bool { return o >= 0x20 && o <= 0x3f }

// Known reports whether o is a defined op.
func (o Op) Known() bool {
	switch o {
	case OpGet, OpPut, OpDel, OpVSB, OpGetReply, OpPutReply, OpDelReply, OpErr:
		return true
	}
	return o.IsNodeOp() && o <= OpStats
}

// Reply is the reply op for a request op: a client op's reply op; a control
// op (promote, demote, stats) is answered with the same op; any other op is
// answered only with ERR.
func (o Op) Reply() Op {
	switch o {
	case OpGet, OpPut, OpDel:
		return o | 0x80
	case OpPromote, OpDemote, OpStats:
		return o
	}
	return OpErr
}

func (o Op) String() string {
	switch o {
	case OpGet:
		return "get"
	case OpPut:
		return "put"
	case OpDel:
		return "del"
	case OpVSB:
		return "vsb"
	case OpGetReply:
		return "get-reply"
	case OpPutReply:
		return "put-reply"
	case OpDelReply:
		return "del-reply"
	case OpErr:
		return "err"
	case OpChainWrite:
		return "chain-write"
	case OpChainAck:
		return "chain-ack"
	case OpVerQuery:
		return "ver-query"
	case OpVerAnswer:
		return "ver-answer"
	case OpCopy:
		return "copy"
	case OpCopyAck:
		return "copy-ack"
	case OpPromote:
		return "promote"
	case OpDemote:
		return "demote"
	case OpSync:
		return "sync"
	case OpSyncData:
		return "sync-data"
	case OpStats:
		return "stats"
	}
	return fmt.Sprintf("op(%#x)", uint8(o))
}

// ParseOp is the inverse of Op.String.
func ParseOp(s string) (Op, error) {
	for o := 0; o < 256; o++ {
		if Op(o).Known() && Op(o).String() == s {
			return Op(o), nil
		}
	}
	var v uint8
	if _, err := fmt.Sscanf(s, "op(%v)", &v); err == nil {
		return Op(v), nil
	}
	return 0, fmt.Errorf("wire: unknown op %q", s)
}

// Flag bits.
const (
	// FlagStaleOK: the client accepts a bounded-staleness read, which a host
	// agent may serve from a fresh extra copy.
	FlagStaleOK uint8 = 1 << 0
	// FlagStamped: a data plane that holds the key in its directory stamped the
	// VersionStamp. Data planes clear it on writes they do not stamp.
	FlagStamped uint8 = 1 << 1
	// FlagHit: the data plane routed the request from its directory.
	FlagHit uint8 = 1 << 2
	// FlagReservation, on a reply: the node served the request in dmClock's
	// reservation phase, so the data plane counts it into ρ as well as δ.
	FlagReservation uint8 = 1 << 3
	// FlagVerify, on a GET forwarded to an extra copy whose fresh bit is
	// clear (or by a host agent, any linearizable read at an extra): the
	// extra answers with the version the chain's tail says is committed,
	// asked by a version query, never from its copy unchecked (issue 18).
	// A request flag: data planes clear it on arrival.
	FlagVerify uint8 = 1 << 4
	// FlagPromoteNoStamp, on a promote node op: no data plane stamps this
	// key's writes (host agents only), so the head keeps accepting
	// unstamped writes to it.
	FlagPromoteNoStamp uint8 = 1 << 7
)

// Code is the outcome carried by replies (0 is OK) and ERR packets.
type Code uint8

// Codes. Every rejection a node or a data plane answers has one.
const (
	CodeOK           Code = 0
	CodeNotFound     Code = 1  // GET of an absent key (a normal reply)
	CodeMalformed    Code = 2  // header or lengths do not parse
	CodeUnknownOp    Code = 3  // op is not one this receiver serves
	CodeKeyTooLarge  Code = 4  // key over MaxKey
	CodeValTooLarge  Code = 5  // value over MaxValue
	CodeWrongNode    Code = 6  // this node does not hold the key: retry on the home path
	CodeStaleEpoch   Code = 7  // chain epoch changed: refresh the partition map
	CodeStaleVersion Code = 8  // stamped version not newer than the head's: retry for a new stamp
	CodeRetry        Code = 9  // unstamped write to a promoted key: retry through the data plane
	CodeQueueFull    Code = 10 // the node's queue is full: back off
	CodeUnavailable  Code = 11 // the node is recovering or its chain is broken
	CodeInternal     Code = 12 // storage failure
	CodeHashMismatch Code = 13 // key does not hash to the header's KeyHash
)

var codeNames = [...]string{
	"ok", "not-found", "malformed", "unknown-op", "key-too-large", "value-too-large",
	"wrong-node", "stale-epoch", "stale-version", "retry", "queue-full", "unavailable",
	"internal", "hash-mismatch",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Error makes a non-OK code usable as a Go error.
func (c Code) Error() string { return "netdir: " + c.String() }

// Decode errors.
var (
	ErrShort     = errors.New("wire: packet shorter than its header")
	ErrMagic     = errors.New("wire: bad magic")
	ErrVersion   = errors.New("wire: unsupported version")
	ErrLengths   = errors.New("wire: key/value lengths exceed the packet")
	ErrKeyLarge  = errors.New("wire: key over MaxKey")
	ErrValLarge  = errors.New("wire: value over MaxValue")
	ErrBufSmall  = errors.New("wire: buffer too small")
	ErrTrailing  = errors.New("wire: bytes after the value")
	ErrHashMatch = errors.New("wire: key does not match its KeyHash")
)

// KeyHash is the 128-bit hash of a key that data planes match on.
type KeyHash [KeyHashLen]byte

// HashKey returns the first 16 bytes of SHAKE128(key).
func HashKey(key []byte) KeyHash {
	var h KeyHash
	s := sha3.NewSHAKE128()
	s.Write(key)
	s.Read(h[:])
	return h
}

// Partition is the top bits of the hash: one of 1<<bits partitions.
func (h KeyHash) Partition(bits uint) uint32 {
	if bits == 0 {
		return 0
	}
	return binary.BigEndian.Uint32(h[:4]) >> (32 - bits)
}

func (h KeyHash) String() string { return fmt.Sprintf("%x", h[:]) }

// Header is the fixed header, decoded.
type Header struct {
	Op        Op
	Flags     uint8
	Code      Code
	Tenant    uint16
	ReqID     uint64
	KeyHash   KeyHash
	Stamp     uint64
	Node      NodeID
	Load      uint16
	Epoch     uint32
	Timestamp uint64
	Delta     uint32 // dmClock δ, stamped by the data plane on requests
	Rho       uint32 // dmClock ρ, stamped by the data plane on requests
}

// Packet is a header with its key and value. Decode points Key and Value into
// the decoded buffer; nothing is copied.
type Packet struct {
	Header
	Key   []byte
	Value []byte
}

// DecodeHeader parses the fixed header of b.
func (h *Header) DecodeHeader(b []byte) error {
	f := Frame(b)
	if err := f.Check(); err != nil {
		return err
	}
	_ = f[HeaderLen-1] // bounds check hint to the compiler: Check's length test does not reach here
	h.Op = f.Op()
	h.Flags = f.Flags()
	h.Code = f.Code()
	h.Tenant = f.Tenant()
	h.ReqID = f.ReqID()
	h.KeyHash = f.KeyHash()
	h.Stamp = f.Stamp()
	h.Node = f.Node()
	h.Load = f.Load()
	h.Epoch = f.Epoch()
	h.Timestamp = f.Timestamp()
	h.Delta = f.Delta()
	h.Rho = f.Rho()
	return nil
}

// EncodeHeader writes the fixed header into b[:HeaderLen].
func (h *Header) EncodeHeader(b []byte) error {
	if len(b) < HeaderLen {
		return ErrBufSmall
	}
	f := Frame(b)
	f.SetMagic(Magic)
	f.SetVersion(Version)
	f.SetOp(h.Op)
	f.SetFlags(h.Flags)
	f.SetCode(h.Code)
	f.SetTenant(h.Tenant)
	f.SetReqID(h.ReqID)
	f.SetKeyHash(h.KeyHash)
	f.SetStamp(h.Stamp)
	f.SetNode(h.Node)
	f.SetLoad(h.Load)
	f.SetEpoch(h.Epoch)
	f.SetTimestamp(h.Timestamp)
	f.SetDelta(h.Delta)
	f.SetRho(h.Rho)
	return nil
}

// Decode parses a whole packet. Key and Value alias b. It checks the lengths
// against the packet and the limits, but not the key against its hash (see
// CheckHash), so that a node can answer an oversize key with its code.
func (p *Packet) Decode(b []byte) error {
	rest, err := p.decode(b)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return ErrTrailing
	}
	if len(p.Key) > MaxKey {
		return ErrKeyLarge
	}
	if len(p.Value) > MaxValue {
		return ErrValLarge
	}
	return nil
}

// decode parses the header, the lengths, the key and the value, with no
// limits, and returns the bytes after the value.
func (p *Packet) decode(b []byte) (rest []byte, err error) {
	if err := p.DecodeHeader(b); err != nil {
		return nil, err
	}
	if len(b) < PrefixLen {
		return nil, ErrShort
	}
	kl, vl := Frame(b).lengths()
	end := PrefixLen + kl + vl
	if end > len(b) {
		return nil, ErrLengths
	}
	p.Key = b[PrefixLen : PrefixLen+kl : PrefixLen+kl]
	p.Value = b[PrefixLen+kl : end : end]
	return b[end:], nil
}

// CheckHash reports whether the key hashes to the header's KeyHash.
func (p *Packet) CheckHash() error {
	if HashKey(p.Key) != p.KeyHash {
		return ErrHashMatch
	}
	return nil
}

// Len is the encoded size of p.
func (p *Packet) Len() int { return PrefixLen + len(p.Key) + len(p.Value) }

// Encode writes p into b and returns the bytes written.
func (p *Packet) Encode(b []byte) (int, error) {
	if len(p.Key) > MaxKey {
		return 0, ErrKeyLarge
	}
	if len(p.Value) > MaxValue {
		return 0, ErrValLarge
	}
	n := p.Len()
	if len(b) < n {
		return 0, ErrBufSmall
	}
	p.EncodeHeader(b)
	Frame(b).setLengths(len(p.Key), len(p.Value))
	copy(b[PrefixLen:], p.Key)
	copy(b[PrefixLen+len(p.Key):], p.Value)
	return n, nil
}

// AppendEncode appends the encoding of p to dst.
func (p *Packet) AppendEncode(dst []byte) ([]byte, error) {
	n := len(dst)
	dst = append(dst, make([]byte, p.Len())...)
	m, err := p.Encode(dst[n:])
	return dst[:n+m], err
}
