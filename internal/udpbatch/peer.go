// Package udpbatch sends and receives UDP datagrams in batches, one
// sendmmsg or recvmmsg per batch, allocating nothing per datagram: the
// software switch and the client library share it.
package udpbatch

import "net/netip"

// MaxDatagram is the largest UDP payload: a reader whose buffers all hold
// it takes segmented datagrams whole (Linux).
const MaxDatagram = 65535 - 8

// Peer is a UDP address in a form that can be a map key and stored in large
// tables without pointers (so the GC never scans them): the IP in 16 bytes
// (an IPv4 address in the first 4) and the port.
type Peer struct {
	IP   [16]byte
	Port uint16
}

// PeerOf is ap as a Peer of an IPv4 (v4) or IPv6 socket.
func PeerOf(ap netip.AddrPort, v4 bool) Peer {
	var p Peer
	a := ap.Addr().Unmap()
	if v4 {
		b := a.As4()
		copy(p.IP[:], b[:])
	} else {
		p.IP = a.As16()
	}
	p.Port = ap.Port()
	return p
}

// AddrPort is p as an address of an IPv4 (v4) or IPv6 socket, an IPv4
// address unmapped.
func (p Peer) AddrPort(v4 bool) netip.AddrPort {
	if v4 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(p.IP[:4])), p.Port)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(p.IP).Unmap(), p.Port)
}
