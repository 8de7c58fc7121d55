//go:build !linux

package model

import (
	"net"

	"golang.org/x/net/ipv4"
)

// batchReader receives datagrams with x/net's ReadBatch. Off Linux, ReadBatch
// reads one datagram per call and allocates its source address; the Linux
// reader (batch_linux.go) allocates nothing.
type batchReader struct {
	pc   *ipv4.PacketConn
	bufs [][]byte
	msgs []ipv4.Message
	bb   [][1][]byte
}

func newBatchReader(c *net.UDPConn, bufs [][]byte) (*batchReader, error) {
	r := &batchReader{pc: ipv4.NewPacketConn(c), bufs: bufs, msgs: make([]ipv4.Message, len(bufs)), bb: make([][1][]byte, len(bufs))}
	for i := range r.msgs {
		r.bb[i][0] = bufs[i]
		r.msgs[i].Buffers = r.bb[i][:]
	}
	return r, nil
}

func (r *batchReader) read() (int, error) { return r.pc.ReadBatch(r.msgs, 0) }

func (r *batchReader) msg(i int) ([]byte, peer) {
	m := &r.msgs[i]
	var p peer
	if a, ok := m.Addr.(*net.UDPAddr); ok {
		if ip4 := a.IP.To4(); ip4 != nil {
			copy(p.ip[:4], ip4)
		} else {
			copy(p.ip[:], a.IP.To16())
		}
		p.port = uint16(a.Port)
	}
	return r.bufs[i][:m.N], p
}
