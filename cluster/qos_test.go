package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/sched/dmclock"
	"github.com/netdir/netdir/storagenode"
)

// TestQoSPushedToNodes: a policy set at the controller reaches every node
// in the answer to its report, runtime changes follow, and the tenant's
// requests at the nodes come back in the controller's dump, with only the
// deployment's paths in between.
func TestQoSPushedToNodes(t *testing.T) {
	const n = 2
	c, err := cluster.Start(cluster.Options{N: n, Dir: t.TempDir(), Controller: true, Round: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := c.StartPlane(ctx, cluster.PlaneConfig{Directory: directory.Config{Policy: directory.PolicyNetdir}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctl := p.Controller
	gold, err := ctl.SetQoS("gold", 0, dmclock.Policy{Reservation: 50, Weight: 2})
	if err != nil {
		t.Fatal(err)
	}
	waitApplied := func(what string, ok func(storagenode.TenantQoS) bool) {
		t.Helper()
		for i := range n {
			for applied := false; !applied; {
				st := c.Node(i).Stats()
				for _, tq := range st.QoS {
					applied = applied || (st.QoSOn && tq.Tenant == gold.ID && !tq.Default && ok(tq))
				}
				if ctx.Err() != nil {
					t.Fatalf("node %d: %s never applied: %+v", i+1, what, st.QoS)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	waitApplied("gold's policy", func(tq storagenode.TenantQoS) bool { return tq.Policy.Reservation == 50 })
	if _, err := ctl.SetQoS("gold", 0, dmclock.Policy{Reservation: 50, Weight: 2, Limit: 80}); err != nil {
		t.Fatal(err)
	}
	waitApplied("the changed limit", func(tq storagenode.TenantQoS) bool { return tq.Policy.Limit == 80 })

	cl, err := c.Client(client.Options{Service: c.DataPlane(), Tenant: gold.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 20 {
		if _, err := cl.Put(ctx, []byte{byte('a' + i)}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for {
		_, _, tenants := ctl.QoSDump()
		var served uint64
		for _, tq := range tenants {
			if tq.ID == gold.ID {
				served = tq.ServedReservation + tq.ServedWeight
			}
		}
		if served >= 20 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the dump shows %d of gold's 20 requests: %+v", served, tenants)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
