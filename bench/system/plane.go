package system

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/model/p4rtserver"
	"github.com/netdir/netdir/sched"
)

// PolicyC3 is the client-side policy: C3 replica ranking over the chain.
const PolicyC3 = "c3"

// Policies lists the policies StartPlane accepts, in report order.
func Policies() []string { return bench.Policies }

// Plane is one policy's data path over the system's storage nodes: for the
// data-plane policies a fresh switch (with its P4Runtime server), the
// controller and clients through the switch; for c3 clients that pick nodes
// themselves.
type Plane struct {
	Policy string

	sys    *System
	sw     *model.Switch
	swDone chan error
	gs     *grpc.Server
	p4c    *p4rt.Client
	ctl    *controller.Controller
	cancel context.CancelFunc
	wg     sync.WaitGroup
	acct   *accounting
	target interface {
		bench.Target
		Close()
	}
	closeOnce sync.Once
}

// dirPolicy reports whether the policy routes hot keys by the directory, so
// the controller's hot-key loop runs.
func dirPolicy(p directory.Policy) bool {
	return p == directory.PolicyNetdir || p == directory.PolicyPegasus || p == directory.PolicyCoarse
}

// StartPlane starts policy's data path. Close it before starting another:
// every switch binds the same address.
func (s *System) StartPlane(ctx context.Context, policy string) (_ *Plane, err error) {
	p := &Plane{Policy: policy, sys: s, acct: newAccounting(s.N())}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if policy == PolicyC3 {
		cl, err := s.cl.Client(clientOptions(""))
		if err != nil {
			return nil, err
		}
		t, err := newC3Target(s.cl.Layout, cl, p.acct)
		if err != nil {
			cl.Close()
			return nil, err
		}
		p.target = t
		return p, nil
	}
	pol, err := directory.ParsePolicy(policy)
	if err != nil {
		return nil, fmt.Errorf("system: policy %q: want one of %v", policy, Policies())
	}
	dcfg := directory.Config{PartitionBits: s.cfg.PartitionBits, Policy: pol}
	for try := 0; ; try++ { // the previous run's socket may linger for a moment
		p.sw, err = model.New(model.Config{Listen: s.swAddr.String(), Directory: dcfg})
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
		return nil, fmt.Errorf("system: switch on %s: %w", s.swAddr, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.swDone = make(chan error, 1)
	go func() { p.swDone <- p.sw.Run(rctx) }()

	var plane controller.DataPlane
	if s.schema != nil {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p.gs = grpc.NewServer()
		p4.RegisterP4RuntimeServer(p.gs, p4rtserver.New(1, model.NewP4Target(p.sw)))
		go p.gs.Serve(lis)
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		p.p4c, err = p4rt.Dial(dctx, p4rt.Config{Addr: lis.Addr().String(), DeviceID: 1, Election: 1, Log: s.log})
		dcancel()
		if err != nil {
			return nil, fmt.Errorf("system: P4Runtime: %w", err)
		}
		if err := p.p4c.SetPipeline(ctx, s.schema.Info, nil); err != nil {
			return nil, fmt.Errorf("system: P4Runtime pipeline: %w", err)
		}
		plane = controller.NewP4Plane("model", p.p4c, s.schema)
	} else {
		plane = newAPIPlane(p.sw)
	}
	p.ctl, err = controller.New(controller.Config{
		Layout: s.cl.Layout, Round: s.cfg.Round, PromoteMin: s.cfg.PromoteMin, Log: s.log.With("component", "controller"),
		Epoch: CoarseEpoch, NodeCapacity: s.cfg.Capacity,
	}, []controller.DataPlane{plane}, &controller.UDPStorage{})
	if err != nil {
		return nil, err
	}
	if err := p.ctl.Setup(ctx); err != nil {
		return nil, err
	}
	st := &switchTarget{acct: p.acct}
	p.target = st
	for range s.cfg.Clients {
		c, err := s.cl.Client(clientOptions(p.sw.Addr().String()))
		if err != nil {
			return nil, err
		}
		st.cls = append(st.cls, c)
	}
	if dirPolicy(pol) {
		// Start the nodes' hot-key rounds afresh: counts since the last
		// report include earlier policies' runs.
		for i := range s.N() {
			if n := s.cl.Node(i); n != nil {
				n.HotKeys(0)
			}
		}
		p.wg.Add(3)
		go func() {
			defer p.wg.Done()
			p.ctl.Run(rctx)
		}()
		go func() {
			defer p.wg.Done()
			p.report(rctx)
		}()
		go func() {
			defer p.wg.Done()
			p.feedStats(rctx)
		}()
	}
	return p, nil
}

// CoarseEpoch is the controller's HATS epoch in a run: the shortest valid
// one, so that a run's warm-up and measurement span several. The first
// epoch after a plane starts only takes the nodes' read counts as a
// baseline, so partition weights from measured load are installed from the
// second, 2 × CoarseEpoch after the start.
const CoarseEpoch = sched.MinEpoch

// report sends each node's hot keys (storagenode.Node.HotKeys: the keys of
// the client requests it served in the round, Space-Saving top-k) and its
// trees' reads and read latencies (the coarse loop's C and T) to the
// controller once per round, as `netdir node --controller` does over the
// controller's API.
func (p *Plane) report(ctx context.Context) {
	t := time.NewTicker(p.sys.cfg.Round)
	defer t.Stop()
	var version uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		version++
		for i := range p.sys.N() {
			n := p.sys.cl.Node(i)
			if n == nil {
				continue
			}
			r := controller.NodeReport{Node: n.ID(), Version: version, HotKeys: n.HotKeys(reportTopK)}
			for _, t := range n.Stats().Trees {
				r.Trees = append(r.Trees, controller.TreeReport{Position: uint32(t.Position), Reads: t.Reads,
					MeanReadLatency: t.MeanReadLatency})
			}
			p.ctl.Report(r)
		}
	}
}

// Target is the policy's bench.Target.
func (p *Plane) Target() bench.Target { return p.target }

// Controller is the plane's controller (nil for c3).
func (p *Plane) Controller() *controller.Controller { return p.ctl }

// Switch is the plane's switch (nil for c3).
func (p *Plane) Switch() *model.Switch { return p.sw }

// Sample is a reading of the cumulative counters a run's metrics come from.
type Sample struct {
	At       time.Time
	Requests []uint64 // per node: client requests admitted (node counters)
	Reads    []uint64 // per node: reads the clients saw it serve
	LatSum   []uint64 // per node: the response times of those reads, ns
	Hits     uint64   // switch: requests routed from the directory
	Misses   uint64   // switch: requests routed by the partition table
	Switched uint64   // switch: requests the fine score sent to its second candidate
	DirSize  int      // keys in the directory
	VSBs     uint64   // switch: VSBs accepted
	VSBDrops map[string]uint64
}

// Sample reads the counters.
func (p *Plane) Sample() Sample {
	s := Sample{At: time.Now(), Requests: p.sys.nodeRequests()}
	s.Reads, s.LatSum = p.acct.latency()
	if p.sw != nil {
		c, _ := p.sw.Counters()
		s.Hits, s.Misses, s.Switched, s.VSBs = c.Hits, c.Misses, c.Switched, c.VSBs
		s.VSBDrops = map[string]uint64{}
		for _, r := range directory.Reasons() {
			if strings.HasPrefix(r.String(), "vsb") && c.Drops[r] > 0 {
				s.VSBDrops[r.String()] = c.Drops[r]
			}
		}
	}
	if p.ctl != nil {
		es := p.ctl.Entries()
		s.DirSize = len(es)
		p.sys.mu.Lock()
		for _, e := range es {
			p.sys.keys[e.Hash] = e.Key
		}
		p.sys.mu.Unlock()
	}
	return s
}

// Close stops the controller, evicts every directory entry (so the chain
// heads drop their promotions and extra copies, and the next policy starts
// from plain chains), and stops the switch and clients.
func (p *Plane) Close() error {
	var errs []error
	p.closeOnce.Do(func() {
		if p.cancel != nil {
			p.cancel()
		}
		p.wg.Wait()
		if p.ctl != nil {
			p.Sample() // remember the keys
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			for _, e := range p.ctl.Entries() {
				if err := p.ctl.Unpin(ctx, e.Key); err != nil {
					errs = append(errs, err)
				}
			}
			errs = append(errs, p.sys.demoteLeftovers(ctx))
			cancel()
		}
		if p.target != nil {
			p.target.Close()
		}
		if p.p4c != nil {
			p.p4c.Close()
		}
		if p.gs != nil {
			p.gs.Stop()
		}
		if p.sw != nil {
			p.sw.Close()
			<-p.swDone
		}
	})
	return errors.Join(errs...)
}

// demoteLeftovers demotes keys that a chain head still holds as promoted
// after the controller evicted them (a demote lost beyond its retries).
func (s *System) demoteLeftovers(ctx context.Context) error {
	var errs []error
	for i := range s.N() {
		n := s.cl.Node(i)
		if n == nil {
			continue
		}
		for h := range n.Promoted() {
			s.mu.Lock()
			key, ok := s.keys[h]
			s.mu.Unlock()
			if !ok {
				errs = append(errs, fmt.Errorf("system: node %d holds promoted key %s of unknown name", n.ID(), h))
				continue
			}
			if err := s.direct.Demote(ctx, key); err != nil {
				errs = append(errs, fmt.Errorf("system: demote %q: %w", key, err))
			}
		}
	}
	return errors.Join(errs...)
}

// vsbNote summarises the VSBs the switch accepted and refused between two
// samples (for the run's note): how often extra copies became fresh.
func (p *Plane) vsbNote(a, b Sample) string {
	if p.sw == nil || b.VSBs == a.VSBs && len(b.VSBDrops) == 0 {
		return ""
	}
	out := fmt.Sprintf("VSBs accepted %d", b.VSBs-a.VSBs)
	var rs []string
	for r := range b.VSBDrops {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	for _, r := range rs {
		if d := b.VSBDrops[r] - a.VSBDrops[r]; d > 0 {
			out += fmt.Sprintf(", refused %s %d", r, d)
		}
	}
	return out
}
