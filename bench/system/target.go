package system

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/wire"
)

// switchTarget is the bench.Target of the data-plane policies: clients whose
// service address is the switch. Reads learn the serving node, and its
// response time, from the reply.
type switchTarget struct {
	cls  []*client.Client
	next atomic.Uint32
	acct *accounting
}

func (t *switchTarget) pick() *client.Client {
	return t.cls[int(t.next.Add(1))%len(t.cls)]
}

func (t *switchTarget) Get(ctx context.Context, key []byte) ([]byte, uint64, error) {
	t0 := time.Now()
	r, err := t.pick().GetResult(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	t.acct.read(key, r.Node, time.Since(t0))
	if r.Code == wire.CodeNotFound {
		return nil, r.Version, client.ErrNotFound
	}
	return r.Value, r.Version, nil
}

func (t *switchTarget) Put(ctx context.Context, key, val []byte) (uint64, error) {
	v, err := t.pick().Put(ctx, key, val)
	return v, err
}

func (t *switchTarget) Close() {
	for _, c := range t.cls {
		c.Close()
	}
}
