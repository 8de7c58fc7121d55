package system

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// PolicyC3 is the client-side policy: C3 replica ranking over the chain.
const PolicyC3 = "c3"

// Policies lists the policies StartPlane accepts, in report order.
func Policies() []string { return bench.Policies }

// Plane is one policy's data path over the system's storage nodes: for the
// data-plane policies a fresh switch and controller (cluster.Plane) and
// clients through the switch; for c3 clients that pick nodes themselves.
type Plane struct {
	Policy string

	sys    *System
	plane  *cluster.Plane
	acct   *accounting
	target interface {
		bench.Target
		Close()
	}
	closeOnce sync.Once
}

// dirPolicy reports whether the policy routes hot keys by the directory, so
// the controller's loops run.
func dirPolicy(p directory.Policy) bool {
	return p == directory.PolicyNetdir || p == directory.PolicyPegasus || p == directory.PolicyCoarse
}

// StartPlane starts policy's data path. Close it before starting another:
// every switch and controller binds the same addresses.
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
	p.plane, err = s.cl.StartPlane(ctx, cluster.PlaneConfig{
		Directory: directory.Config{PartitionBits: s.cfg.PartitionBits, Policy: pol, Window: sched.FineWindow(s.meanReadTime())},
		Schema:    s.schema,
		Controller: cluster.ControllerConfig{
			Round: s.cfg.Round, PromoteMin: s.cfg.PromoteMin, CoarseEpoch: CoarseEpoch, NodeCapacity: s.cfg.boundRate(),
			ProgramOnly: !dirPolicy(pol), Log: s.log.With("component", "controller"),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("system: %s: %w", policy, err)
	}
	st := &switchTarget{acct: p.acct}
	p.target = st
	for range s.cfg.Clients {
		c, err := s.cl.Client(clientOptions(s.cl.DataPlane()))
		if err != nil {
			return nil, err
		}
		st.cls = append(st.cls, c)
	}
	return p, nil
}

// meanReadTime is the nodes' mean read time so far (HATS's T, device time
// included), weighted by reads; before any read, the device's read service
// time. A plane's fine-score window is fitted to it (sched.FineWindow).
func (s *System) meanReadTime() time.Duration {
	var reads, sum float64
	for i := range s.N() {
		if n := s.Node(i); n != nil {
			for _, t := range n.Stats().Trees {
				reads += float64(t.Reads)
				sum += float64(t.Reads) * float64(t.MeanReadLatency)
			}
		}
	}
	if reads == 0 {
		return s.cfg.Device.ReadService
	}
	return time.Duration(sum / reads)
}

// CoarseEpoch is the controller's HATS epoch in a run: the shortest valid
// one, so that a run's warm-up and measurement span several. The first
// epoch after a plane starts only takes the nodes' read counts as a
// baseline, so partition weights from measured load are installed from the
// second, 2 × CoarseEpoch after the start.
const CoarseEpoch = sched.MinEpoch

// trackHot counts the reads of key per node (Sample.HotReads).
func (p *Plane) trackHot(key []byte) { p.acct.trackHot(key) }

// Target is the policy's bench.Target.
func (p *Plane) Target() bench.Target { return p.target }

// Controller is the plane's controller (nil for c3).
func (p *Plane) Controller() *cluster.Controller {
	if p.plane == nil {
		return nil
	}
	return p.plane.Controller
}

// Switch is the plane's switch (nil for c3).
func (p *Plane) Switch() *model.Switch {
	if p.plane == nil {
		return nil
	}
	return p.plane.Switch.Switch
}

// Sample is a reading of the cumulative counters a run's metrics come from.
type Sample struct {
	At       time.Time
	Requests []uint64 // per node: client requests admitted (node counters)
	Gets     []uint64 // per node: of those, GETs
	// DeviceReads per node: block reads from the device (block cache
	// misses).
	DeviceReads []uint64
	Reads       []uint64 // per node: reads the clients saw it serve
	LatSum      []uint64 // per node: the response times of those reads, ns
	Hits        uint64   // switch: requests routed from the directory
	Misses      uint64   // switch: requests routed by the partition table
	Switched    uint64   // switch: requests the fine score sent to its second candidate
	DirSize     int      // keys in the directory
	VSBs        uint64   // switch: VSBs accepted
	VSBDrops    map[string]uint64
	// HotReads per node: reads of the workload's hottest key it served, as
	// the clients saw them; HotLocs that key's locations (its LocationList
	// if it is in the directory, else its chain), of which the first HotR
	// are its chain.
	HotReads []uint64
	HotLocs  []wire.NodeID
	HotR     int

	// NodeTime per node: its emulated processor's and device's time
	// (zero without a device).
	NodeTime []nodeTime
}

// Sample reads the counters.
func (p *Plane) Sample() Sample {
	s := Sample{At: time.Now()}
	s.Requests, s.Gets, s.DeviceReads, s.NodeTime = p.sys.nodeCounts()
	s.Reads, s.LatSum = p.acct.latency()
	if key, reads := p.acct.hot(); key != nil {
		h := wire.HashKey(key)
		s.HotReads, s.HotLocs = reads, p.sys.cl.Layout.ChainOf(h)
		s.HotR = len(s.HotLocs)
		if sw := p.Switch(); sw != nil {
			if sl, ok := sw.Lookup(h); ok {
				s.HotLocs, s.HotR = slices.Clone(sl.Locs[:sl.N]), int(sl.R)
			}
		}
	}
	if sw := p.Switch(); sw != nil {
		c, _ := sw.Counters()
		s.Hits, s.Misses, s.Switched, s.VSBs = c.Hits, c.Misses, c.Switched, c.VSBs
		s.VSBDrops = map[string]uint64{}
		for _, r := range directory.Reasons() {
			if strings.HasPrefix(r.String(), "vsb") && c.Drops[r] > 0 {
				s.VSBDrops[r.String()] = c.Drops[r]
			}
		}
	}
	if ctl := p.Controller(); ctl != nil {
		es := ctl.Entries()
		s.DirSize = len(es)
		p.sys.mu.Lock()
		for _, e := range es {
			p.sys.keys[e.Hash] = e.Key
		}
		p.sys.mu.Unlock()
	}
	return s
}

// Close stops the controller's loops, evicts every directory entry (so the
// chain heads drop their promotions and extra copies, and the next policy
// starts from plain chains), and stops the clients, the controller and the
// switch. On a system Fresh started for one run, the keys are not
// evicted: the system is dropped next.
func (p *Plane) Close() error {
	var errs []error
	p.closeOnce.Do(func() {
		if ctl := p.Controller(); ctl != nil && p.sys.discard {
			ctl.StopLoops()
		} else if ctl != nil {
			ctl.StopLoops()
			p.Sample() // remember the keys
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			for _, e := range ctl.Entries() {
				if err := ctl.Unpin(ctx, e.Key); err != nil {
					errs = append(errs, err)
				}
			}
			errs = append(errs, p.sys.demoteLeftovers(ctx))
			cancel()
		}
		if p.target != nil {
			p.target.Close()
		}
		if p.plane != nil {
			errs = append(errs, p.plane.Close())
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
// samples (for the run's note): how often extra copies became fresh. Empty
// where no switch was read (c3, a remote deployment).
func vsbNote(a, b Sample) string {
	if b.VSBs == a.VSBs && len(b.VSBDrops) == 0 {
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
