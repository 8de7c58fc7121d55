package wire

// A stamped write's VersionStamp is a pair: the switch incarnation in its
// top 16 bits and the version in the low 48 (spec/README.md, flaw G).
//
//	bits 63..48  incarnation  the data plane's incarnation when it stamped
//	bits 47..0   version      ver_next + 1 of the key's slot
//
// The controller numbers the incarnations of the data planes' state: it
// takes a new one each time it re-programs a plane that lost its state (a
// restart, a pipeline push) or a router agent starts on new maps, and
// hands it to the chain head with each promotion (the promote op's Stamp)
// before it installs the slot, with the same pair as the slot's seed (the
// directory entry's version: incarnation on top, the head's latest version
// below). A data plane stamps the entry's incarnation on top of
// ver_next + 1. The head refuses a stamped write of a promoted key whose
// incarnation is older than the promotion's (ERR stale-version; the
// client's retry gets a new stamp): a write stamped by a plane before it
// lost its state, still in flight across the re-sync, can then no longer
// commit above the version the slot was re-seeded with.
//
// Every other version — in replies, VSBs, copies and chain ops, and every
// version a node stores — is a plain version, below 2^48, with a zero
// incarnation; so is the stamp of a plane that never lost its state.
const (
	StampVersionBits = 48
	MaxVersion       = 1<<StampVersionBits - 1
)

// MakeStamp is the stamp of version ver (its low 48 bits) in incarnation inc.
func MakeStamp(inc uint16, ver uint64) uint64 {
	return uint64(inc)<<StampVersionBits | ver&MaxVersion
}

// StampVersion is the version of a stamp: its low 48 bits.
func StampVersion(s uint64) uint64 { return s & MaxVersion }

// StampIncarnation is the incarnation of a stamp: its top 16 bits.
func StampIncarnation(s uint64) uint16 { return uint16(s >> StampVersionBits) }

// IncarnationBefore reports whether incarnation a is older than b, in serial
// number arithmetic (RFC 1982) over 16 bits: each is the other's
// predecessor within half the space, so the numbering may wrap.
func IncarnationBefore(a, b uint16) bool { return int16(a-b) < 0 }
