//go:build !linux

package udpbatch

import (
	"net"

	"golang.org/x/net/ipv4"
)

// Reader receives datagrams with x/net's ReadBatch. Off Linux, ReadBatch
// reads one datagram per call and allocates its source address; the Linux
// reader (batch_linux.go) allocates nothing.
type Reader struct {
	pc   *ipv4.PacketConn
	bufs [][]byte
	msgs []ipv4.Message
	bb   [][1][]byte
}

// NewReader reads from c into bufs, one datagram per buffer.
func NewReader(c *net.UDPConn, bufs [][]byte) (*Reader, error) {
	r := &Reader{pc: ipv4.NewPacketConn(c), bufs: bufs, msgs: make([]ipv4.Message, len(bufs)), bb: make([][1][]byte, len(bufs))}
	for i := range r.msgs {
		r.bb[i][0] = bufs[i]
		r.msgs[i].Buffers = r.bb[i][:]
	}
	return r, nil
}

func (r *Reader) Read() (int, error) { return r.pc.ReadBatch(r.msgs, 0) }

func (r *Reader) Msg(i int) ([]byte, Peer) {
	m := &r.msgs[i]
	var p Peer
	if a, ok := m.Addr.(*net.UDPAddr); ok {
		if ip4 := a.IP.To4(); ip4 != nil {
			copy(p.IP[:4], ip4)
		} else {
			copy(p.IP[:], a.IP.To16())
		}
		p.Port = uint16(a.Port)
	}
	return r.bufs[i][:m.N], p
}
