package cluster

import (
	"context"
	"errors"
	"fmt"
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
}

// Plane is a running switch and its controller.
type Plane struct {
	Switch     *Switch
	Controller *Controller
	sc         SwitchConfig // the switch's, on the addresses it bound
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
	cc.API, cc.GossipBind, cc.GossipSeeds = c.api, c.gossip, nil
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
	if p.Controller, err = StartController(ctx, cc); err != nil {
		return nil, err
	}
	return p, nil
}

// RestartSwitch stops the switch and starts a fresh one, with no state,
// on the same addresses, as a switch reboot does; a controller on
// P4Runtime (PlaneConfig.Schema) notices and programs it again. It returns
// when the new switch listens.
func (p *Plane) RestartSwitch() error {
	if err := p.Switch.Close(); err != nil {
		return err
	}
	var err error
	for try := 0; try < 100; try++ { // the old sockets may linger for a moment
		if p.Switch, err = StartSwitch(p.sc); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// Close stops the controller, then the switch.
func (p *Plane) Close() error {
	var errs []error
	if p.Controller != nil {
		errs = append(errs, p.Controller.Close())
	}
	if p.Switch != nil {
		errs = append(errs, p.Switch.Close())
	}
	return errors.Join(errs...)
}
