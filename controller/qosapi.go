package controller

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/sched/dmclock"
)

// QoSDump lists the defaults and every tenant with its scheduling.
func (a *API) QoSDump(context.Context, *api.QoSDumpRequest) (*api.QoSDumpResponse, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	def, set, tenants := a.c.QoSDump()
	r := &api.QoSDumpResponse{Generation: a.c.QoS().Generation, Defaults: PolicyProto(def), DefaultsSet: set}
	for _, t := range tenants {
		r.Tenants = append(r.Tenants, &api.QoSTenant{
			Name: t.Name, Id: uint32(t.ID), Policy: PolicyProto(t.Policy), IsDefault: t.Default,
			Queued: uint32(t.Queued), Inflight: uint32(t.Inflight),
			ServedReservation: t.ServedReservation, ServedWeight: t.ServedWeight, Throttled: t.Throttled,
			MeanDelayUs: float64(t.MeanDelay) / float64(time.Microsecond), Clients: t.Clients,
		})
	}
	return r, nil
}

// QoSSet sets a tenant's policy (registering it) or the defaults.
func (a *API) QoSSet(_ context.Context, r *api.QoSSetRequest) (*api.QoSTenant, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	if r.GetPolicy() == nil {
		return nil, status.Error(codes.InvalidArgument, "qos set: no policy")
	}
	p := PolicyFromProto(r.GetPolicy())
	if r.GetDefaults() {
		if err := a.c.SetQoSDefault(p); err != nil {
			return nil, qosStatus(err)
		}
		return &api.QoSTenant{Policy: r.GetPolicy(), IsDefault: true}, nil
	}
	if r.GetId() > 0xffff {
		return nil, status.Errorf(codes.InvalidArgument, "qos: tenant id %d: want 1..%d", r.GetId(), directory.QoSTenants-1)
	}
	t, err := a.c.SetQoS(r.GetTenant(), uint16(r.GetId()), p)
	if err != nil {
		return nil, qosStatus(err)
	}
	return &api.QoSTenant{Name: t.Name, Id: uint32(t.ID), Policy: r.GetPolicy()}, nil
}

// QoSGet is a tenant's policy in force, or the defaults.
func (a *API) QoSGet(_ context.Context, r *api.QoSGetRequest) (*api.QoSTenant, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	def, _, tenants := a.c.QoSDump()
	if r.GetDefaults() {
		return &api.QoSTenant{Policy: PolicyProto(def), IsDefault: true}, nil
	}
	for _, t := range tenants {
		if t.Name != "" && t.Name == r.GetTenant() {
			return &api.QoSTenant{Name: t.Name, Id: uint32(t.ID), Policy: PolicyProto(t.Policy), IsDefault: t.Default}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "qos: no tenant %q", r.GetTenant())
}

// QoSRemove puts a tenant back under the defaults, or drops the defaults.
func (a *API) QoSRemove(_ context.Context, r *api.QoSGetRequest) (*api.QoSRemoveResponse, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	var err error
	if r.GetDefaults() {
		err = a.c.RemoveQoSDefault()
	} else {
		err = a.c.RemoveQoS(r.GetTenant())
	}
	if err != nil {
		return nil, qosStatus(err)
	}
	return &api.QoSRemoveResponse{}, nil
}

// qosStatus is a QoS refusal as the client sees it: bad input is
// InvalidArgument (an unknown tenant NotFound), a failed save Internal.
func qosStatus(err error) error {
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		return NotLeaderStatus(nl)
	}
	if errors.Is(err, ErrQoS) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// PolicyProto and PolicyFromProto convert a dmClock triple.
func PolicyProto(p dmclock.Policy) *api.QoSPolicy {
	return &api.QoSPolicy{Reservation: p.Reservation, Weight: p.Weight, Limit: p.Limit}
}

func PolicyFromProto(p *api.QoSPolicy) dmclock.Policy {
	return dmclock.Policy{Reservation: p.GetReservation(), Weight: p.GetWeight(), Limit: p.GetLimit()}
}

// qosConfigProto is the configuration nodes apply.
func qosConfigProto(c QoSConfig) *api.QoSConfig {
	pc := &api.QoSConfig{Generation: c.Generation}
	if c.Default != nil {
		pc.Defaults = PolicyProto(*c.Default)
	}
	for _, t := range c.Tenants {
		if t.Policy != nil {
			pc.Tenants = append(pc.Tenants, &api.TenantPolicy{Tenant: uint32(t.ID), Policy: PolicyProto(*t.Policy)})
		}
	}
	return pc
}

func tenantReportsFromProto(ts []*api.TenantStats) []TenantReport {
	out := make([]TenantReport, 0, len(ts))
	for _, t := range ts {
		if t.GetTenant() > 0xffff {
			continue
		}
		out = append(out, TenantReport{
			Tenant: uint16(t.GetTenant()), Queued: int(t.GetQueued()), Inflight: int(t.GetInflight()),
			ServedReservation: t.GetServedReservation(), ServedWeight: t.GetServedWeight(),
			Throttled: t.GetThrottled(), Delay: time.Duration(t.GetDelayNs()), Clients: t.GetClients(),
		})
	}
	return out
}
