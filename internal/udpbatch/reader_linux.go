package udpbatch

import (
	"net"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reader receives datagrams with one recvmmsg per batch, through the
// socket's RawConn so that it parks in Go's netpoller. It calls recvmmsg
// itself rather than x/net's ipv4.PacketConn.ReadBatch because ReadBatch
// allocates a net.UDPAddr and its IP for every datagram received; this reader
// decodes the source address into a peer and allocates nothing per batch.
//
// When every buffer holds the largest datagram, the reader takes segmented
// datagrams (a Writer's UDP_SEGMENT messages) whole, UDP_GRO, and splits
// them itself: one delivery from the kernel for up to 64 datagrams.
type Reader struct {
	rc    syscall.RawConn
	bufs  [][]byte
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	oob   []byte // each message's control space, when gro
	gro   bool
	segs  []segment // the datagrams of the last read
	fn    func(fd uintptr) bool
	n     int
	errno syscall.Errno
}

// segment is one datagram of a received message.
type segment struct {
	msg, off, len int
}

// NewReader reads from c into bufs, a message per buffer.
func NewReader(c *net.UDPConn, bufs [][]byte) (*Reader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &Reader{
		rc:    rc,
		bufs:  bufs,
		hdrs:  make([]unix.Mmsghdr, len(bufs)),
		iovs:  make([]unix.Iovec, len(bufs)),
		names: make([]unix.RawSockaddrInet6, len(bufs)),
	}
	for i := range r.hdrs {
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(len(r.bufs[i]))
		h := &r.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
	}
	if slices.IndexFunc(bufs, func(b []byte) bool { return len(b) < MaxDatagram }) < 0 && enableGRO(c) {
		r.gro = true
		r.oob = make([]byte, len(bufs)*groCmsgLen)
		for i := range r.hdrs {
			r.hdrs[i].Hdr.Control = &r.oob[i*groCmsgLen]
		}
	}
	r.fn = r.recv
	return r, nil
}

func (r *Reader) recv(fd uintptr) bool {
	for i := range r.hdrs {
		r.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		r.hdrs[i].Hdr.Flags = 0
		r.hdrs[i].Len = 0
		if r.gro {
			r.hdrs[i].Hdr.SetControllen(groCmsgLen)
		}
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(r.hdrs)), 0, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	r.n, r.errno = int(n), e
	return true
}

// Read receives at least one datagram, waiting for the first, and returns
// how many: one per buffer, or more when segmented datagrams came whole.
func (r *Reader) Read() (int, error) {
	if err := r.rc.Read(r.fn); err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, r.errno
	}
	r.segs = r.segs[:0]
	for i := range r.n {
		h := &r.hdrs[i]
		size := 0
		if r.gro && h.Hdr.Controllen > 0 {
			size = groSize(r.oob[i*groCmsgLen : i*groCmsgLen+int(h.Hdr.Controllen)])
		}
		n := int(h.Len)
		if size <= 0 || size >= n {
			r.segs = append(r.segs, segment{msg: i, len: n})
			continue
		}
		for off := 0; off < n; off += size {
			r.segs = append(r.segs, segment{msg: i, off: off, len: min(size, n-off)})
		}
	}
	return len(r.segs), nil
}

// Msg returns datagram i of the last read and its source.
func (r *Reader) Msg(i int) ([]byte, Peer) {
	sg := r.segs[i]
	var p Peer
	sa := &r.names[sg.msg]
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		copy(p.IP[:4], sa4.Addr[:])
		pb := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		p.Port = uint16(pb[0])<<8 | uint16(pb[1])
	case unix.AF_INET6:
		p.IP = sa.Addr
		pb := (*[2]byte)(unsafe.Pointer(&sa.Port))
		p.Port = uint16(pb[0])<<8 | uint16(pb[1])
	}
	return r.bufs[sg.msg][sg.off : sg.off+sg.len], p
}
