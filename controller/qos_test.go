package controller_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/layout"
)

func qosController(t *testing.T, store controller.QoSStore) api.ControllerClient {
	t.Helper()
	lay, err := layout.New(layout.Config{PartitionBits: 2, Replicas: 1, Nodes: []layout.Node{{ID: 1, Addr: "127.0.0.1:7501"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := controller.New(controller.Config{Layout: lay, QoSStore: store}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return serveAPI(t, ctl)
}

// TestQoSAPI: bad triples are refused with a clear error; set registers
// names with ids, get and rm work by name, the defaults apart; a node's
// report is answered with the configuration until it has applied it, and
// its per-tenant stats show in the dump; the state survives a restart.
func TestQoSAPI(t *testing.T) {
	ctx := context.Background()
	store := controller.FileQoSStore{Path: filepath.Join(t.TempDir(), "qos.json")}
	c := qosController(t, store)
	for _, tc := range []struct {
		p    *api.QoSPolicy
		want string
	}{
		{&api.QoSPolicy{Weight: 0}, "weight 0 must be a positive number"},
		{&api.QoSPolicy{Weight: -1}, "weight -1"},
		{&api.QoSPolicy{Weight: 1, Reservation: -5}, "reservation -5"},
		{&api.QoSPolicy{Weight: 1, Limit: -1}, "limit -1"},
		{&api.QoSPolicy{Weight: 1, Reservation: 100, Limit: 50}, "reservation 100 above limit 50"},
	} {
		_, err := c.QoSSet(ctx, &api.QoSSetRequest{Tenant: "bad", Policy: tc.p})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("set %v: %v, want InvalidArgument with %q", tc.p, err, tc.want)
		}
	}
	if _, err := c.QoSGet(ctx, &api.QoSGetRequest{Tenant: "bad"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused set registered its tenant: %v", err)
	}
	gold, err := c.QoSSet(ctx, &api.QoSSetRequest{Tenant: "gold", Policy: &api.QoSPolicy{Reservation: 100, Weight: 2, Limit: 500}})
	if err != nil || gold.GetId() != 1 {
		t.Fatalf("set gold: %v %v", gold, err)
	}
	if _, err := c.QoSSet(ctx, &api.QoSSetRequest{Tenant: "bronze", Id: 1, Policy: &api.QoSPolicy{Weight: 1}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a taken id was given again: %v", err)
	}
	if b, err := c.QoSSet(ctx, &api.QoSSetRequest{Tenant: "bronze", Id: 9, Policy: &api.QoSPolicy{Weight: 1, Limit: 50}}); err != nil || b.GetId() != 9 {
		t.Fatalf("set bronze: %v %v", b, err)
	}
	if _, err := c.QoSSet(ctx, &api.QoSSetRequest{Defaults: true, Policy: &api.QoSPolicy{Weight: 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.QoSRemove(ctx, &api.QoSGetRequest{Tenant: "bronze"}); err != nil {
		t.Fatal(err)
	}
	if b, err := c.QoSGet(ctx, &api.QoSGetRequest{Tenant: "bronze"}); err != nil || !b.GetIsDefault() || b.GetPolicy().GetWeight() != 3 || b.GetId() != 9 {
		t.Fatalf("bronze after rm: %v %v, want the defaults under id 9", b, err)
	}

	// A node that has applied nothing gets the configuration; one that has
	// applied it gets none. Its stats reach the dump.
	r, err := c.ReportStats(ctx, &api.NodeStats{Node: 1, Qos: []*api.TenantStats{
		{Tenant: 1, Queued: 3, Inflight: 1, ServedReservation: 10, ServedWeight: 30, Throttled: 2, DelayNs: 40_000, Clients: []string{"127.0.0.1:9"}},
		{Tenant: 42, ServedWeight: 5},
	}})
	if err != nil || r.GetQos() == nil {
		t.Fatalf("report: %v %v, want the configuration", r, err)
	}
	cfg := r.GetQos()
	if cfg.GetDefaults().GetWeight() != 3 || len(cfg.GetTenants()) != 1 || cfg.GetTenants()[0].GetTenant() != 1 || cfg.GetTenants()[0].GetPolicy().GetLimit() != 500 {
		t.Fatalf("configuration pushed: %v", cfg)
	}
	if r, err := c.ReportStats(ctx, &api.NodeStats{Node: 1, QosGeneration: cfg.GetGeneration()}); err != nil || r.GetQos() != nil {
		t.Fatalf("a node up to date was sent %v (%v)", r.GetQos(), err)
	}
	if _, err := c.ReportStats(ctx, &api.NodeStats{Node: 1, QosGeneration: cfg.GetGeneration(), Qos: []*api.TenantStats{
		{Tenant: 1, Queued: 3, Inflight: 1, ServedReservation: 10, ServedWeight: 30, Throttled: 2, DelayNs: 40_000, Clients: []string{"127.0.0.1:9"}},
		{Tenant: 42, ServedWeight: 5},
	}}); err != nil {
		t.Fatal(err)
	}
	d, err := c.QoSDump(ctx, &api.QoSDumpRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[uint32]*api.QoSTenant{}
	for _, x := range d.GetTenants() {
		byID[x.GetId()] = x
	}
	if g := byID[1]; g.GetName() != "gold" || g.GetIsDefault() || g.GetQueued() != 3 || g.GetThrottled() != 2 || g.GetMeanDelayUs() != 1 || len(g.GetClients()) != 1 {
		t.Errorf("gold's line %v", g)
	}
	if u := byID[42]; u.GetName() != "" || !u.GetIsDefault() || u.GetPolicy().GetWeight() != 3 || u.GetServedWeight() != 5 {
		t.Errorf("an unknown tenant's line %v: want it under the defaults", u)
	}
	if !d.GetDefaultsSet() || d.GetGeneration() != cfg.GetGeneration() || len(d.GetTenants()) != 3 {
		t.Errorf("dump %v", d)
	}

	// A new controller on the same store has the same state.
	c2 := qosController(t, store)
	d2, err := c2.QoSDump(ctx, &api.QoSDumpRequest{})
	if err != nil || d2.GetGeneration() != d.GetGeneration() || len(d2.GetTenants()) != 2 || d2.GetDefaults().GetWeight() != 3 {
		t.Fatalf("after a restart: %v %v", d2, err)
	}
	if g, err := c2.QoSGet(ctx, &api.QoSGetRequest{Tenant: "gold"}); err != nil || g.GetPolicy().GetReservation() != 100 || g.GetId() != 1 {
		t.Fatalf("gold after a restart: %v %v", g, err)
	}
}
