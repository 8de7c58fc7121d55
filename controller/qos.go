package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/sched/dmclock"
	"github.com/netdir/netdir/wire"
)

// Per-tenant QoS (issue 17): the controller keeps the registry of tenant
// names and ids, the default dmClock policy and per-tenant overrides,
// persists them (QoSStore) and hands them to the nodes in the answer to
// their stats reports. Pushing them there, rather than on a stream of
// their own or by gossip, needs no new connection and converges by
// itself: every report says which generation the node applied, and the
// answer carries the configuration whenever it differs, so a restarted
// node or controller is in step within one report interval, and a lost
// answer is repeated by the next.

// ErrQoS wraps every refusal of a QoS change: an unknown tenant, an id in
// use, an invalid policy.
var ErrQoS = errors.New("qos")

// Tenant is a registered tenant: a name and the id clients stamp.
type Tenant struct {
	Name   string          `json:"name"`
	ID     uint16          `json:"id"`
	Policy *dmclock.Policy `json:"policy,omitempty"` // nil: the defaults
}

// QoSConfig is the controller's QoS state, as persisted. Generation grows
// with every change. With no Default and no tenant policy, QoS is off at
// the nodes.
type QoSConfig struct {
	Generation uint64          `json:"generation"`
	Default    *dmclock.Policy `json:"default,omitempty"`
	Tenants    []Tenant        `json:"tenants"` // by id
}

// QoSStore persists the QoS state. A file now (FileQoSStore); the raft FSM
// will take its place.
type QoSStore interface {
	// Load returns the saved state, the zero QoSConfig if none.
	Load() (QoSConfig, error)
	Save(QoSConfig) error
}

// FileQoSStore keeps the state as JSON in a file, replaced atomically
// (written beside it, synced, renamed).
type FileQoSStore struct{ Path string }

// Load reads the file; a missing file is the zero state.
func (s FileQoSStore) Load() (QoSConfig, error) {
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return QoSConfig{}, nil
	}
	if err != nil {
		return QoSConfig{}, err
	}
	var c QoSConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return QoSConfig{}, fmt.Errorf("%s: %w", s.Path, err)
	}
	return c, nil
}

// Save replaces the file with c.
func (s FileQoSStore) Save(c QoSConfig) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(s.Path), filepath.Base(s.Path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename: nothing
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), s.Path)
}

// memQoSStore keeps the state in memory only (no data directory).
type memQoSStore struct{ c QoSConfig }

func (m *memQoSStore) Load() (QoSConfig, error) { return m.c, nil }
func (m *memQoSStore) Save(c QoSConfig) error   { m.c = c; return nil }

// TenantReport is one tenant's scheduling at one node, cumulative since the
// node started (storagenode.TenantQoS as reported).
type TenantReport struct {
	Tenant            uint16
	Queued, Inflight  int
	ServedReservation uint64
	ServedWeight      uint64
	Throttled         uint64
	Delay             time.Duration
	Clients           []string
}

// TenantQoS is a tenant's line of `qos dump`: its registration and policy,
// and its scheduling summed over the nodes' last reports.
type TenantQoS struct {
	Tenant
	Policy            dmclock.Policy // in force: its own, or the defaults
	Default           bool
	Queued, Inflight  int
	ServedReservation uint64
	ServedWeight      uint64
	Throttled         uint64
	MeanDelay         time.Duration
	Clients           []string // union over the nodes, sorted
}

// qosState is the controller's QoS role; mu guards it and is a leaf of the
// controller's lock order (taken alone).
type qosState struct {
	mu    sync.Mutex
	store QoSStore
	cfg   QoSConfig
	nodes map[wire.NodeID][]TenantReport // last report per node
}

func (q *qosState) load(store QoSStore) error {
	if store == nil {
		store = &memQoSStore{}
	}
	c, err := store.Load()
	if err != nil {
		return fmt.Errorf("controller: qos state: %w", err)
	}
	q.store, q.cfg, q.nodes = store, c, map[wire.NodeID][]TenantReport{}
	return nil
}

// QoS is the QoS configuration.
func (c *Controller) QoS() QoSConfig {
	c.qos.mu.Lock()
	defer c.qos.mu.Unlock()
	return cloneQoS(c.qos.cfg)
}

func cloneQoS(c QoSConfig) QoSConfig {
	c.Tenants = slices.Clone(c.Tenants)
	return c
}

// changeQoS applies f to a copy of the configuration, then saves it as the
// next generation; nothing changes if f or the save fails.
func (c *Controller) changeQoS(f func(*QoSConfig) error) error {
	c.qos.mu.Lock()
	defer c.qos.mu.Unlock()
	next := cloneQoS(c.qos.cfg)
	if err := f(&next); err != nil {
		return err
	}
	// Not just +1: a controller that lost its state (or keeps none) must
	// not reach a generation a node already has with other content.
	next.Generation = max(next.Generation+1, uint64(time.Now().UnixNano()))
	if err := c.qos.store.Save(next); err != nil {
		return fmt.Errorf("controller: saving qos: %w", err)
	}
	c.qos.cfg = next
	return nil
}

// SetQoS gives tenant name policy p, registering the name if it is new
// (under id, or the lowest free one if id is 0). Data planes count by
// tenant id modulo directory.QoSTenants, so ids are 1 to QoSTenants-1 (0
// is the unnamed default tenant).
func (c *Controller) SetQoS(name string, id uint16, p dmclock.Policy) (Tenant, error) {
	if err := p.Validate(); err != nil {
		return Tenant{}, fmt.Errorf("%w: tenant %q: %w", ErrQoS, name, err)
	}
	var out Tenant
	err := c.changeQoS(func(cfg *QoSConfig) error {
		i, err := cfg.register(name, id)
		if err != nil {
			return err
		}
		cfg.Tenants[i].Policy = &p
		out = cfg.Tenants[i]
		return nil
	})
	return out, err
}

// SetQoSDefault sets the policy of tenants without their own.
func (c *Controller) SetQoSDefault(p dmclock.Policy) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: defaults: %w", ErrQoS, err)
	}
	return c.changeQoS(func(cfg *QoSConfig) error {
		cfg.Default = &p
		return nil
	})
}

// RemoveQoS puts tenant name back under the defaults. The name keeps its id:
// clients stamp it, and another tenant must not inherit their requests.
func (c *Controller) RemoveQoS(name string) error {
	return c.changeQoS(func(cfg *QoSConfig) error {
		i := cfg.find(name)
		if i < 0 {
			return fmt.Errorf("%w: no tenant %q", ErrQoS, name)
		}
		cfg.Tenants[i].Policy = nil
		return nil
	})
}

// RemoveQoSDefault drops the defaults (weight 1, no reservation or limit
// from then on; QoS is off once no tenant has a policy either).
func (c *Controller) RemoveQoSDefault() error {
	return c.changeQoS(func(cfg *QoSConfig) error {
		cfg.Default = nil
		return nil
	})
}

func (cfg *QoSConfig) find(name string) int {
	return slices.IndexFunc(cfg.Tenants, func(t Tenant) bool { return t.Name == name })
}

// register returns name's index, adding it under id (0: the lowest free).
func (cfg *QoSConfig) register(name string, id uint16) (int, error) {
	if name == "" {
		return 0, fmt.Errorf("%w: a tenant needs a name", ErrQoS)
	}
	if id >= directory.QoSTenants {
		return 0, fmt.Errorf("%w: tenant id %d: want 1..%d", ErrQoS, id, directory.QoSTenants-1)
	}
	if i := cfg.find(name); i >= 0 {
		if id != 0 && cfg.Tenants[i].ID != id {
			return 0, fmt.Errorf("%w: tenant %q has id %d, not %d", ErrQoS, name, cfg.Tenants[i].ID, id)
		}
		return i, nil
	}
	used := map[uint16]bool{0: true}
	for _, t := range cfg.Tenants {
		used[t.ID] = true
	}
	if id != 0 && used[id] {
		return 0, fmt.Errorf("%w: tenant id %d is taken", ErrQoS, id)
	}
	for cand := uint16(1); id == 0 && cand < directory.QoSTenants; cand++ {
		if !used[cand] {
			id = cand
		}
	}
	if id == 0 {
		return 0, fmt.Errorf("%w: every tenant id is taken", ErrQoS)
	}
	cfg.Tenants = append(cfg.Tenants, Tenant{Name: name, ID: id})
	slices.SortFunc(cfg.Tenants, func(a, b Tenant) int { return int(a.ID) - int(b.ID) })
	return cfg.find(name), nil
}

// QoSFor is what a node that applied generation gen is sent: the
// configuration, or false if it has it.
func (c *Controller) QoSFor(gen uint64) (QoSConfig, bool) {
	c.qos.mu.Lock()
	defer c.qos.mu.Unlock()
	if gen == c.qos.cfg.Generation {
		return QoSConfig{}, false
	}
	return cloneQoS(c.qos.cfg), true
}

// ReportQoS records a node's per-tenant scheduling for the dump.
func (c *Controller) ReportQoS(node wire.NodeID, ts []TenantReport) {
	c.qos.mu.Lock()
	defer c.qos.mu.Unlock()
	c.qos.nodes[node] = ts
}

// QoSDump is every tenant's line: the registered ones, then any other id
// the nodes reported (an unknown tenant runs under the defaults), by id.
func (c *Controller) QoSDump() (defaults dmclock.Policy, set bool, tenants []TenantQoS) {
	c.qos.mu.Lock()
	defer c.qos.mu.Unlock()
	cfg := c.qos.cfg
	defaults = dmclock.Policy{Weight: 1}
	if cfg.Default != nil {
		defaults, set = *cfg.Default, true
	}
	byID := map[uint16]*TenantQoS{}
	line := func(t Tenant) *TenantQoS {
		if l := byID[t.ID]; l != nil {
			return l
		}
		l := &TenantQoS{Tenant: t, Policy: defaults, Default: t.Policy == nil}
		if t.Policy != nil {
			l.Policy = *t.Policy
		}
		byID[t.ID] = l
		return l
	}
	for _, t := range cfg.Tenants {
		line(t)
	}
	delay := map[uint16]time.Duration{}
	clients := map[uint16]map[string]bool{}
	for _, reps := range c.qos.nodes {
		for _, r := range reps {
			l := line(Tenant{ID: r.Tenant})
			l.Queued += r.Queued
			l.Inflight += r.Inflight
			l.ServedReservation += r.ServedReservation
			l.ServedWeight += r.ServedWeight
			l.Throttled += r.Throttled
			delay[r.Tenant] += r.Delay
			if clients[r.Tenant] == nil {
				clients[r.Tenant] = map[string]bool{}
			}
			for _, a := range r.Clients {
				clients[r.Tenant][a] = true
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		l := byID[id]
		if n := l.ServedReservation + l.ServedWeight; n > 0 {
			l.MeanDelay = delay[id] / time.Duration(n)
		}
		l.Clients = slices.Sorted(maps.Keys(clients[id]))
		tenants = append(tenants, *l)
	}
	return defaults, set, tenants
}
