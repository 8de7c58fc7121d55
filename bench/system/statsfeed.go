package system

import (
	"context"
	"time"

	"github.com/netdir/netdir/gossip"
)

// feedStats hands every node's stats to the controller each second, and
// each node its expected load per tree after every coarse epoch: what the
// nodes and the controller gossip with hashicorp/memberlist in a
// deployment (netdir node --gossip-seeds, netdir controller --gossip), fed
// directly here, as the hot-key reports are (report), since every
// component is in this process: the same values (Node.GossipStats,
// Controller.ObserveNodeStats, Controller.EpochExpected, Node.SetExpected)
// without N+1 memberlist members probing each other on the shared cores.
// The gossip itself is tested over loopback in packages gossip, controller
// and storagenode.
func (p *Plane) feedStats(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	prev := make([]gossip.NodeStats, p.sys.N())
	for {
		for i := range p.sys.N() {
			if n := p.sys.Node(i); n != nil {
				prev[i] = n.GossipStats(prev[i])
				p.ctl.ObserveNodeStats(prev[i])
			}
		}
		if e, ok := p.ctl.EpochExpected(); ok {
			for i := range p.sys.N() {
				if n := p.sys.Node(i); n != nil {
					n.SetExpected(e[n.ID()])
				}
			}
		}
		select {
		case <-ctx.Done():
			// The next run's controller starts without an epoch: its
			// nodes pace by their own reads until it has one.
			for i := range p.sys.N() {
				if n := p.sys.Node(i); n != nil {
					n.SetExpected(nil)
				}
			}
			return
		case <-t.C:
		}
	}
}
