package controller

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/wire"
)

// UDPStorage reaches chain heads with the promote and demote node ops
// (storagenode's payload.go): the key, and the extras' ids as 16-bit values.
// Each call waits for the head's answer, resending on loss.
type UDPStorage struct {
	Timeout time.Duration // per try; default 200 ms
	Tries   int           // default 5
	// NoStamp promotes keys for a deployment whose data planes are host
	// agents only: no data plane stamps writes, so the head must keep
	// accepting unstamped ones (storagenode's promoteNoStamp).
	NoStamp bool
}

// Promote asks head to copy key to extras and announce them by VSB.
func (u *UDPStorage) Promote(ctx context.Context, head layout.Node, key []byte, extras []layout.Node) (uint64, error) {
	return u.call(ctx, wire.OpPromote, head, key, extras)
}

// Demote asks head to drop the copies.
func (u *UDPStorage) Demote(ctx context.Context, head layout.Node, key []byte, extras []layout.Node) error {
	_, err := u.call(ctx, wire.OpDemote, head, key, extras)
	return err
}

// call returns the answer's stamp: for a promotion, the head's latest version.
func (u *UDPStorage) call(ctx context.Context, op wire.Op, head layout.Node, key []byte, extras []layout.Node) (uint64, error) {
	timeout, tries := u.Timeout, u.Tries
	if timeout == 0 {
		timeout = 200 * time.Millisecond
	}
	if tries == 0 {
		tries = 5
	}
	ids := make([]byte, 0, 2*len(extras))
	if op == wire.OpPromote {
		for _, e := range extras {
			ids = binary.BigEndian.AppendUint16(ids, e.ID)
		}
	}
	req := wire.Packet{Header: wire.Header{Op: op, ReqID: rand.Uint64(), KeyHash: wire.HashKey(key)}, Key: key, Value: ids}
	if op == wire.OpPromote && u.NoStamp {
		req.Flags = wire.FlagPromoteNoStamp
	}
	b, err := req.AppendEncode(nil)
	if err != nil {
		return 0, err
	}
	raddr, err := net.ResolveUDPAddr("udp", head.Addr)
	if err != nil {
		return 0, fmt.Errorf("%s to node %d: %w", op, head.ID, err)
	}
	conn, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		return 0, fmt.Errorf("%s to node %d: %w", op, head.ID, err)
	}
	defer conn.Close()
	buf := make([]byte, wire.MaxPacket)
	for try := 0; try < tries; try++ {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if _, err := conn.Write(b); err != nil {
			return 0, fmt.Errorf("%s to node %d: %w", op, head.ID, err)
		}
		deadline := time.Now().Add(timeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		conn.SetReadDeadline(deadline)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				break // timed out: resend
			}
			var h wire.Header
			if h.DecodeHeader(buf[:n]) != nil || h.ReqID != req.ReqID || h.Op != op {
				continue
			}
			if h.Code != wire.CodeOK {
				return 0, fmt.Errorf("%s %q at node %d: %w", op, key, head.ID, h.Code)
			}
			return h.Stamp, nil
		}
	}
	return 0, fmt.Errorf("%s %q at node %d: no answer after %d tries", op, key, head.ID, tries)
}
