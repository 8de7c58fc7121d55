package system

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// The policies a running deployment can be measured under
// (RemotePolicies). Its data plane runs its own program (BMv2, Tofino, an agent, a
// `netdir switch`), so only what the controller's API sets differs between
// runs:
//
//	static  the loops paused, every key evicted, every partition's
//	        weights on its chain head: the chain head only, the directory off
//	netdir  the loops running from even partition weights
const (
	RemoteStatic = "static"
	RemoteNetdir = "netdir"
)

// RemotePolicies lists them in report order.
var RemotePolicies = []string{RemoteStatic, RemoteNetdir}

// RemoteConfig is a running deployment to measure.
type RemoteConfig struct {
	Service string // the data plane's service address (host:port)
	// Controller is the controller's gRPC API (host:port), or several,
	// comma-separated: calls go to the raft leader (controller.Controllers).
	Controller string
	// Capacity is the nodes' emulated capacity (their --max-ops), for the
	// report only; 0: unknown or unlimited.
	Capacity float64
	Clients  int // client sockets shared by the workers (default 4)
	// Auth is the deployment's cluster key, which the nodes' stats op
	// needs (nil: none; nodes holding a key then do not answer).
	Auth *nodeauth.Auth
	// Progress, if set, receives one human-readable line per setup step.
	Progress func(string)
}

// Remote is a running deployment driven through its data plane's service
// address: the clients send there, the controller's API sets up each
// policy (RemotePolicies), and the node counters come from the nodes'
// stats op. Close leaves the controller's loops running.
//
// Not measured there: the directory's hit rate and the VSBs (the switch's
// counters are the controller's to read), and the deployment's CPU (the
// report's CPU is this process's).
type Remote struct {
	cfg    RemoteConfig
	ctl    *controller.Controllers
	lay    *layout.Map
	direct *client.Client // to the nodes: their stats
	target *switchTarget
	paused bool // a baseline paused the controller's loops

	mu        sync.Mutex
	sampleErr error // the first failed node-stats read of a run
}

// Dial reads the deployment's layout from its controller and checks that
// every node answers; the layout's node ids must be 1..N.
func Dial(ctx context.Context, cfg RemoteConfig) (_ *Remote, err error) {
	if cfg.Clients <= 0 {
		cfg.Clients = DefaultClients
	}
	r := &Remote{cfg: cfg}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.ctl, err = controller.DialControllers(strings.Split(cfg.Controller, ","), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ly, err := controller.Ask(cctx, r.ctl, api.ControllerClient.GetLayout, &api.GetLayoutRequest{})
	if err != nil {
		return nil, fmt.Errorf("controller at %s: %w", cfg.Controller, err)
	}
	if r.lay, err = layout.Parse([]byte(ly.GetYaml())); err != nil {
		return nil, fmt.Errorf("controller at %s: layout: %w", cfg.Controller, err)
	}
	for i, id := range r.lay.Nodes() {
		if int(id) != i+1 {
			return nil, fmt.Errorf("system: the deployment's node ids are %v: want 1..%d", r.lay.Nodes(), len(r.lay.Nodes()))
		}
	}
	o := clientOptions("")
	o.Layout, o.Auth = r.lay, cfg.Auth
	if r.direct, err = client.New(o); err != nil {
		return nil, err
	}
	r.target = &switchTarget{acct: newAccounting(r.N())}
	for range cfg.Clients {
		o := clientOptions(cfg.Service)
		o.Layout = r.lay
		c, err := client.New(o)
		if err != nil {
			return nil, err
		}
		r.target.cls = append(r.target.cls, c)
	}
	if _, err := r.requests(cctx); err != nil {
		return nil, err
	}
	r.progress("deployment: controller at %s, service address %s, %d nodes (R=%d, %d partitions, layout epoch %d)",
		cfg.Controller, cfg.Service, r.N(), r.lay.R(), r.lay.Partitions(), r.lay.Epoch())
	return r, nil
}

func (r *Remote) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		r.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// N is the number of storage nodes.
func (r *Remote) N() int { return len(r.lay.Nodes()) }

// Close resumes the controller's loops from even partition weights if a
// baseline paused them, and closes the clients.
func (r *Remote) Close() error {
	var errs []error
	if r.paused {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		errs = append(errs, r.setUp(ctx, RemoteNetdir))
		cancel()
	}
	if r.target != nil {
		r.target.Close()
	}
	if r.direct != nil {
		r.direct.Close()
	}
	if r.ctl != nil {
		errs = append(errs, r.ctl.Close())
	}
	return errors.Join(errs...)
}

// Preload writes the workload's keys through the service address with
// workers goroutines, calling progress (if set) about once a second.
func (r *Remote) Preload(ctx context.Context, src *bench.Source, workers int, progress func(done, total int64)) error {
	return preload(ctx, r.target, src, workers, progress)
}

// Run sets the deployment up for policy (RemotePolicies), then runs the
// warm-up and the measured run through the service address.
func (r *Remote) Run(ctx context.Context, policy string, o RunOptions) (bench.Run, error) {
	src, err := o.prepare()
	if err != nil {
		return bench.Run{}, err
	}
	if !slices.Contains(RemotePolicies, policy) {
		return bench.Run{}, fmt.Errorf("system: policy %q on a running deployment: want one of %v", policy, RemotePolicies)
	}
	r.progress("%s: setting up the deployment through the controller's API", policy)
	if err := r.setUp(ctx, policy); err != nil {
		return bench.Run{}, fmt.Errorf("system: %s: %w", policy, err)
	}
	r.target.acct = newAccounting(r.N())
	r.mu.Lock()
	r.sampleErr = nil
	r.mu.Unlock()
	run, err := measure(ctx, r, policy, src, o)
	if err != nil {
		return bench.Run{}, err
	}
	r.mu.Lock()
	err = r.sampleErr
	r.mu.Unlock()
	if err != nil {
		return bench.Run{}, fmt.Errorf("system: %s: %w", policy, err)
	}
	run.CapacityOps = r.cfg.Capacity
	run.Control = "deployment"
	run.Note = strings.TrimPrefix(run.Note+"; hit rate not measured (the switch's counters are the controller's)", "; ")
	return run, nil
}

// setUp puts the deployment in policy's state: static pauses the loops,
// evicts every key and puts every partition's weights on its head; netdir
// sets even partition weights and resumes the loops.
func (r *Remote) setUp(ctx context.Context, policy string) error {
	if policy == RemoteStatic {
		if _, err := controller.Ask(ctx, r.ctl, api.ControllerClient.SetLoops, &api.SetLoopsRequest{Paused: true}); err != nil {
			return err
		}
		r.paused = true
		dir, err := controller.Ask(ctx, r.ctl, api.ControllerClient.ListDirectory, &api.ListDirectoryRequest{})
		if err != nil {
			return err
		}
		for _, e := range dir.GetEntries() {
			if _, err := controller.Ask(ctx, r.ctl, api.ControllerClient.Unpin, &api.PinRequest{Key: e.GetKey()}); err != nil {
				return fmt.Errorf("evict %q: %w", e.GetKey(), err)
			}
		}
	}
	for p, chain := range r.lay.Chains() {
		w := slices.Repeat([]uint32{1}, len(chain))
		if policy == RemoteStatic {
			w = make([]uint32, len(chain))
			w[0] = 1
		}
		req := &api.SetWeightsRequest{Target: &api.SetWeightsRequest_Partition{Partition: uint32(p)}, Weights: w}
		if _, err := controller.Ask(ctx, r.ctl, api.ControllerClient.SetWeights, req); err != nil {
			return fmt.Errorf("partition %d weights: %w", p, err)
		}
	}
	if policy == RemoteNetdir {
		if _, err := controller.Ask(ctx, r.ctl, api.ControllerClient.SetLoops, &api.SetLoopsRequest{Paused: false}); err != nil {
			return err
		}
		r.paused = false
	}
	return nil
}

// Target is the clients through the service address.
func (r *Remote) Target() bench.Target { return r.target }

// trackHot counts the reads of key per node (Sample.HotReads).
func (r *Remote) trackHot(key []byte) { r.target.acct.trackHot(key) }

// Sample reads the nodes' request counters (their stats op), the clients'
// latencies and the directory's size; the switch's counters are not read,
// so hits, misses and VSBs stay zero. A failed read is kept for Run.
func (r *Remote) Sample() Sample {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := Sample{At: time.Now()}
	var err error
	s.Requests, err = r.requests(ctx)
	s.Reads, s.LatSum = r.target.acct.latency()
	if key, reads := r.target.acct.hot(); key != nil {
		s.HotReads, s.HotLocs = reads, r.lay.ChainOf(wire.HashKey(key))
		s.HotR = len(s.HotLocs)
	}
	if st, serr := controller.Ask(ctx, r.ctl, api.ControllerClient.Status, &api.StatusRequest{}); serr == nil {
		s.DirSize = int(st.GetDirectorySize())
	} else {
		err = errors.Join(err, serr)
	}
	if err != nil {
		r.mu.Lock()
		if r.sampleErr == nil {
			r.sampleErr = err
		}
		r.mu.Unlock()
	}
	return s
}

// requests reads each node's client requests admitted, in parallel.
func (r *Remote) requests(ctx context.Context) ([]uint64, error) {
	out := make([]uint64, r.N())
	errs := make([]error, r.N())
	var wg sync.WaitGroup
	for i, id := range r.lay.Nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st storagenode.Stats
			if err := r.direct.NodeStats(ctx, id, &st); err != nil {
				errs[i] = fmt.Errorf("node %d stats: %w", id, err)
				return
			}
			out[i] = st.Gets + st.Puts + st.Dels
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
