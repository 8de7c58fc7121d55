package udpbatch

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reader receives datagrams with one recvmmsg per batch, through the
// socket's RawConn so that it parks in Go's netpoller. It calls recvmmsg
// itself rather than x/net's ipv4.PacketConn.ReadBatch because ReadBatch
// allocates a net.UDPAddr and its IP for every datagram received; this reader
// decodes the source address into a peer and allocates nothing per batch.
type Reader struct {
	rc    syscall.RawConn
	bufs  [][]byte
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	fn    func(fd uintptr) bool
	n     int
	errno syscall.Errno
}

// NewReader reads from c into bufs, one datagram per buffer.
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
	r.fn = r.recv
	return r, nil
}

func (r *Reader) recv(fd uintptr) bool {
	for i := range r.hdrs {
		r.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		r.hdrs[i].Hdr.Flags = 0
		r.hdrs[i].Len = 0
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(r.hdrs)), 0, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	r.n, r.errno = int(n), e
	return true
}

// Read receives between 1 and len(bufs) datagrams, waiting for the first.
func (r *Reader) Read() (int, error) {
	if err := r.rc.Read(r.fn); err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, r.errno
	}
	return r.n, nil
}

// Msg returns datagram i of the last read and its source.
func (r *Reader) Msg(i int) ([]byte, Peer) {
	h := &r.hdrs[i]
	var p Peer
	sa := &r.names[i]
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
	return r.bufs[i][:h.Len], p
}
