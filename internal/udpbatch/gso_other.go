//go:build !linux

package udpbatch

import "net"

const segmentCmsgLen = 0

func gsoSupported(*net.UDPConn) bool { return false }

func putSegmentCmsg(b []byte, _ int) []byte { return b }
