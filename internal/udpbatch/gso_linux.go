package udpbatch

import (
	"encoding/binary"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// segmentCmsgLen is the space of a UDP_SEGMENT control message.
var segmentCmsgLen = unix.CmsgSpace(2)

// gsoSupported reports whether c's kernel offers UDP segmentation offload.
func gsoSupported(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	rc.Control(func(fd uintptr) {
		_, err := unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
		ok = err == nil
	})
	return ok
}

// putSegmentCmsg writes into b a UDP_SEGMENT control message: segments of
// size bytes.
func putSegmentCmsg(b []byte, size int) []byte {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	return b[:unix.CmsgSpace(2)]
}

// enableGRO asks the kernel to hand c's segmented datagrams over whole
// (UDP_GRO); it reports whether it does.
func enableGRO(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	rc.Control(func(fd uintptr) {
		ok = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) == nil
	})
	return ok
}

// groCmsgLen is the space of a UDP_GRO control message.
var groCmsgLen = unix.CmsgSpace(4)

// groSize is the segment size of a UDP_GRO control message in oob, or 0.
func groSize(oob []byte) int {
	for len(oob) >= unix.CmsgLen(0) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(4) {
			return int(binary.NativeEndian.Uint32(oob[unix.CmsgLen(0):]))
		}
		sp := unix.CmsgSpace(l - unix.CmsgLen(0))
		if sp > len(oob) {
			return 0
		}
		oob = oob[sp:]
	}
	return 0
}
