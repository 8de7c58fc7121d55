package model

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// The mirror port's framing: each datagram the switch receives goes to the
// mirror collector (Config.Mirror) behind a fixed header, so that
// `netdir capture --mirror` can write it as the packet it was, from its
// sender to the switch, at the switch's clock.
//
//	offset size field
//	     0    4 magic      "NDMR"
//	     4    8 time       the switch's clock (ns) when the batch was read
//	    12   16 from       the sender's address (IPv4 as IPv4-mapped IPv6)
//	    28    2 from port
//	    30    - the datagram
const (
	mirrorMagic     = "NDMR"
	MirrorHeaderLen = 30
)

// ErrMirror is returned by ParseMirror for a datagram that is not a mirror
// copy.
var ErrMirror = errors.New("model: not a mirror-port datagram")

// AppendMirror appends the mirror copy of pkt, received from from at now,
// to dst.
func AppendMirror(dst, pkt []byte, from netip.AddrPort, now uint64) []byte {
	dst = append(dst, mirrorMagic...)
	dst = binary.BigEndian.AppendUint64(dst, now)
	a := from.Addr().As16()
	dst = append(dst, a[:]...)
	dst = binary.BigEndian.AppendUint16(dst, from.Port())
	return append(dst, pkt...)
}

// ParseMirror is the inverse of AppendMirror. pkt aliases b.
func ParseMirror(b []byte) (from netip.AddrPort, now uint64, pkt []byte, err error) {
	if len(b) < MirrorHeaderLen || string(b[:4]) != mirrorMagic {
		return netip.AddrPort{}, 0, nil, ErrMirror
	}
	now = binary.BigEndian.Uint64(b[4:])
	addr := netip.AddrFrom16([16]byte(b[12:28])).Unmap()
	from = netip.AddrPortFrom(addr, binary.BigEndian.Uint16(b[28:]))
	return from, now, b[MirrorHeaderLen:], nil
}
