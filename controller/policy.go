package controller

import (
	"maps"
	"slices"
)

// PolicyStore holds the tenants' QoS policies (dmClock's reservation,
// weight and limit, and a unique name per tenant), replicated with the
// rest of the controller's state. Changes go through the leader: a
// follower refuses them with a *NotLeaderError. Reads see this
// controller's state. *Controller implements it.
type PolicyStore interface {
	SetPolicy(p TenantPolicy) error
	RemovePolicy(tenant uint16) error
	Policy(tenant uint16) (TenantPolicy, bool)
	Policies() []TenantPolicy // by tenant
}

var _ PolicyStore = (*Controller)(nil)

// SetPolicy sets a tenant's policy; a name another tenant has is refused.
func (c *Controller) SetPolicy(p TenantPolicy) error {
	return c.repl.apply(command{Op: opSetPolicy, Policy: p})
}

// RemovePolicy removes a tenant's policy.
func (c *Controller) RemovePolicy(tenant uint16) error {
	return c.repl.apply(command{Op: opRemovePolicy, Policy: TenantPolicy{Tenant: tenant}})
}

// Policy returns a tenant's policy.
func (c *Controller) Policy(tenant uint16) (TenantPolicy, bool) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	p, ok := c.st.policies[tenant]
	return p, ok
}

// Policies lists the policies by tenant.
func (c *Controller) Policies() []TenantPolicy {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	out := make([]TenantPolicy, 0, len(c.st.policies))
	for _, t := range slices.Sorted(maps.Keys(c.st.policies)) {
		out = append(out, c.st.policies[t])
	}
	return out
}
