package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/wire"
)

// UDPStorage reaches chain heads with the promote and demote node ops
// (wire.NewPromote, wire.NewDemote). Each call waits for the head's answer,
// resending on loss.
type UDPStorage struct {
	Timeout time.Duration // per try; default 200 ms
	Tries   int           // default 5
	// NoStamp promotes keys for a deployment whose data planes are host
	// agents only: no data plane stamps writes, so the head must keep
	// accepting unstamped ones (storagenode's promoteNoStamp).
	NoStamp bool
	// Auth seals promote and demote with the cluster key (nil: unsealed).
	Auth *nodeauth.Auth

	// conn is opened by the first call and shared by every later one,
	// concurrent calls included (client.Conn matches replies by request
	// id): a re-sync asks thousands of heads at once, and a socket keeps
	// the network namespace it was opened in, so calls from other
	// goroutines still reach the nodes.
	mu   sync.Mutex
	conn *client.Conn
}

func (u *UDPStorage) connection() (*client.Conn, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conn == nil {
		c, err := client.Listen()
		if err != nil {
			return nil, err
		}
		c.SetAuth(u.Auth)
		u.conn = c
	}
	return u.conn, nil
}

// Promote asks head to copy key to extras and announce them by VSB, and
// tells it the incarnation of the key's stamps.
func (u *UDPStorage) Promote(ctx context.Context, head layout.Node, key []byte, extras []layout.Node, inc uint16) (uint64, error) {
	ids := make([]wire.NodeID, len(extras))
	for i, e := range extras {
		ids[i] = e.ID
	}
	req := wire.NewPromote(key, ids, u.NoStamp)
	req.Stamp = wire.MakeStamp(inc, 0)
	return u.call(ctx, head, req)
}

// Demote asks head to drop the copies.
func (u *UDPStorage) Demote(ctx context.Context, head layout.Node, key []byte, extras []layout.Node) error {
	_, err := u.call(ctx, head, wire.NewDemote(key))
	return err
}

// call returns the answer's stamp: for a promotion, the head's latest version.
func (u *UDPStorage) call(ctx context.Context, head layout.Node, req wire.Packet) (uint64, error) {
	retry := client.Retry{Timeout: u.Timeout, Tries: u.Tries}
	if retry.Timeout == 0 {
		retry.Timeout = 200 * time.Millisecond
	}
	if retry.Tries == 0 {
		retry.Tries = 5
	}
	req.ReqID = rand.Uint64()
	raddr, err := net.ResolveUDPAddr("udp", head.Addr)
	if err != nil {
		return 0, fmt.Errorf("%s to node %d: %w", req.Op, head.ID, err)
	}
	conn, err := u.connection()
	if err != nil {
		return 0, fmt.Errorf("%s to node %d: %w", req.Op, head.ID, err)
	}
	to := raddr.AddrPort()
	r, err := conn.Call(ctx, netip.AddrPortFrom(to.Addr().Unmap(), to.Port()), &req, retry)
	switch {
	case err == client.ErrTimeout:
		return 0, fmt.Errorf("%s %q at node %d: no answer after %d tries", req.Op, req.Key, head.ID, retry.Tries)
	case err != nil:
		return 0, err
	case r.Code != wire.CodeOK:
		return 0, fmt.Errorf("%s %q at node %d: %w", req.Op, req.Key, head.ID, r.Code)
	}
	return r.Stamp, nil
}
