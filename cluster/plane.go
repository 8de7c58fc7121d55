package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
)

// PlaneConfig is a data plane and the controller that programs it.
type PlaneConfig struct {
	// Directory configures the switch (its Policy is the plane's routing);
	// PartitionBits default to the layout's.
	Directory directory.Config
	// Schema is the P4Info the controller programs the switch with over
	// P4Runtime gRPC; nil drives the switch through its Go control API.
	Schema *p4rt.Schema
	// Controller tunes the controller (Round, CoarseEpoch, PromoteMin,
	// NodeCapacity, ProgramOnly, Log); StartPlane fills in its addresses,
	// layout and switch.
	Controller ControllerConfig
	// Replicas > 1 starts that many raft-replicated controllers (needs
	// Schema, and Options.Controllers at least as many): the leader
	// programs the switch over P4Runtime and runs the loops.
	Replicas int
}

// Plane is a running switch and its controller, or its replicated
// controllers.
type Plane struct {
	Switch *Switch
	// Controller is the lone controller; nil with PlaneConfig.Replicas > 1
	// (see Lead, View, Controllers).
	Controller *Controller
	sc         SwitchConfig // the switch's, on the addresses it bound

	mu   sync.Mutex
	ctls []*Controller      // the replicas, nil while stopped
	cfgs []ControllerConfig // each replica's, for a restart
}

// StartPlane starts a switch on the cluster's data-plane address and a
// controller on its API and gossip addresses (Options.Controller), which
// programs the switch and joins the nodes' gossip. Close it before starting
// another: the next binds the same addresses.
func (c *Cluster) StartPlane(ctx context.Context, cfg PlaneConfig) (_ *Plane, err error) {
	if !c.opts.Controller {
		return nil, errors.New("cluster: StartPlane needs Options.Controller")
	}
	p := &Plane{}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if cfg.Directory.PartitionBits == 0 {
		cfg.Directory.PartitionBits = c.opts.PartitionBits
	}
	sc := SwitchConfig{Listen: c.opts.DataPlane, Directory: cfg.Directory}
	if cfg.Schema != nil {
		sc.P4Runtime = "127.0.0.1:0"
	}
	for try := 0; ; try++ { // the previous plane's socket may linger for a moment
		p.Switch, err = StartSwitch(sc)
		if err == nil || try == 50 {
			break
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: switch on %s: %w", c.opts.DataPlane, err)
	}
	p.sc = sc
	if cfg.Schema != nil {
		p.sc.P4Runtime = p.Switch.P4RuntimeAddr()
	}
	cc := cfg.Controller
	if cc.Auth == nil {
		cc.Auth = c.NewAuth()
	}
	cc.API, cc.GossipBind, cc.GossipSeeds = c.apis[0], c.gossips[0], nil
	if cc.FailureTimeout == 0 {
		cc.FailureTimeout = c.opts.FailureTimeout
	}
	cc.Layout = c.Layout.Config()
	// The controller joins the nodes' gossip at once, rather than waiting
	// for their next join of the seed.
	for i := range c.N() {
		c.mu.Lock()
		n := c.nodes[i]
		c.mu.Unlock()
		if n != nil && n.GossipAddr() != "" {
			cc.GossipSeeds = append(cc.GossipSeeds, n.GossipAddr())
		}
	}
	if cfg.Schema != nil {
		cc.Schema = cfg.Schema
		cc.Switches = []SwitchEndpoint{{Name: "model", Addr: p.Switch.P4RuntimeAddr(), DeviceID: 1, ElectionID: 1}}
	} else {
		cc.Planes = []controller.DataPlane{newAPIPlane(p.Switch.Switch)}
	}
	if cfg.Replicas <= 1 {
		if p.Controller, err = StartController(ctx, cc); err != nil {
			return nil, err
		}
		return p, nil
	}
	if cfg.Schema == nil || cfg.Replicas > len(c.apis) {
		return nil, fmt.Errorf("cluster: %d controller replicas need a P4Info schema and Options.Controllers >= %d", cfg.Replicas, cfg.Replicas)
	}
	var peers []controller.RaftPeer
	for i := range cfg.Replicas {
		peers = append(peers, controller.RaftPeer{ID: fmt.Sprintf("c%d", i+1), Raft: c.rafts[i], API: c.apis[i]})
	}
	for i, peer := range peers {
		rc := cc
		rc.API, rc.GossipBind = peer.API, c.gossips[i]
		// The other controllers too, at their fixed addresses: a replica
		// restarted after the nodes moved (a restarted node gossips on a
		// new port) joins at once and learns every member's liveness,
		// instead of waiting for the nodes to rejoin it.
		rc.GossipSeeds = slices.Clone(cc.GossipSeeds)
		for j := range cfg.Replicas {
			if j != i {
				rc.GossipSeeds = append(rc.GossipSeeds, c.gossips[j])
			}
		}
		rc.Raft = &controller.RaftConfig{ID: peer.ID, Bind: peer.Raft, Peers: peers,
			Dir: filepath.Join(c.opts.Dir, "controller-"+peer.ID)}
		if err := os.MkdirAll(rc.Raft.Dir, 0o755); err != nil {
			return nil, err
		}
		p.cfgs = append(p.cfgs, rc)
		p.ctls = append(p.ctls, nil)
		if err := p.RestartController(ctx, i); err != nil {
			return nil, err
		}
	}
	if _, err := p.WaitLeader(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Controllers is how many controllers the plane has (1 for a lone one).
func (p *Plane) Controllers() int { return max(len(p.cfgs), 1) }

// Lead is the controller that leads and has programmed the switch in its
// current session (the lone controller if not replicated), or nil.
func (p *Plane) Lead() *Controller {
	if p.Controller != nil {
		return p.Controller
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.ctls {
		if c != nil && c.Leading() == nil {
			return c
		}
	}
	return nil
}

// View is a controller whose state (layout, entries) can be read: the
// leader if there is one, else any running replica (its state may lag
// the leader's by the commands in flight).
func (p *Plane) View() *Controller {
	if c := p.Lead(); c != nil {
		return c
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.ctls {
		if c != nil {
			return c
		}
	}
	return nil
}

// WaitLeader waits until a controller leads and has programmed the
// switch in its current session, and returns it.
func (p *Plane) WaitLeader(ctx context.Context) (*Controller, error) {
	for {
		if c := p.Lead(); c != nil && c.Serving() {
			return c, nil
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: no controller leads: %w", ctx.Err())
		}
	}
}

// Replica is controller replica i, nil while it is stopped.
func (p *Plane) Replica(i int) *Controller {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctls[i]
}

// KillLeader stops the leading replica at once, as kill -9 does (no
// leadership transfer; its raft log stays on disk), and returns its
// index for RestartController.
func (p *Plane) KillLeader() (int, error) {
	p.mu.Lock()
	i := slices.IndexFunc(p.ctls, func(c *Controller) bool { return c != nil && c.Leading() == nil })
	var c *Controller
	if i >= 0 {
		c, p.ctls[i] = p.ctls[i], nil
	}
	p.mu.Unlock()
	if c == nil {
		return -1, errors.New("cluster: no controller leads")
	}
	c.Close()
	return i, nil
}

// RestartController starts replica i again from its data directory.
func (p *Plane) RestartController(ctx context.Context, i int) error {
	var c *Controller
	var err error
	for try := 0; ; try++ { // a stopped controller's ports may linger
		if c, err = StartController(ctx, p.cfgs[i]); err == nil || try == 50 {
			break
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: controller %d: %w", i+1, err)
	}
	p.mu.Lock()
	p.ctls[i] = c
	p.mu.Unlock()
	return nil
}

// KillSwitch stops the switch, as kill -9 does: its state is gone.
func (p *Plane) KillSwitch() error {
	p.mu.Lock()
	sw := p.Switch
	p.Switch = nil
	p.mu.Unlock()
	if sw == nil {
		return errors.New("cluster: the switch is not running")
	}
	return sw.Close()
}

// ReviveSwitch starts a fresh switch, with no state, on the killed one's
// addresses; the controller notices and programs it again.
func (p *Plane) ReviveSwitch() error {
	var err error
	for try := 0; try < 100; try++ { // the old sockets may linger for a moment
		var sw *Switch
		if sw, err = StartSwitch(p.sc); err == nil {
			p.mu.Lock()
			p.Switch = sw
			p.mu.Unlock()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// RestartSwitch stops the switch and starts a fresh one, with no state,
// on the same addresses, as a switch reboot does; a controller on
// P4Runtime (PlaneConfig.Schema) notices and programs it again. It returns
// when the new switch listens.
func (p *Plane) RestartSwitch() error {
	if err := p.KillSwitch(); err != nil {
		return err
	}
	return p.ReviveSwitch()
}

// Close stops the controllers, then the switch.
func (p *Plane) Close() error {
	var errs []error
	if p.Controller != nil {
		errs = append(errs, p.Controller.Close())
	}
	p.mu.Lock()
	ctls, sw := p.ctls, p.Switch
	p.ctls, p.Switch = nil, nil
	p.mu.Unlock()
	for _, c := range ctls {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	if sw != nil {
		errs = append(errs, sw.Close())
	}
	return errors.Join(errs...)
}
