package nicagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/netnsrun"
	"github.com/netdir/netdir/wire"
)

// DefaultService is the service address clients of an agent host send to:
// a link-local address that the agent routes out of its interface (with a
// permanent neighbour entry), for the TC program to rewrite.
var DefaultService = netip.MustParseAddrPort("169.254.74.20:7420")

// Config configures an Agent.
type Config struct {
	Iface string // the interface to attach to (required)
	// Controller is the controller's gRPC API address, or several,
	// comma-separated (replicated controllers): the agent subscribes to
	// and reports to the leader, following a follower's refusal to it
	// (controller.Controllers, as netdir ctl does). Required.
	Controller string
	// Service is the address clients send requests to; default
	// DefaultService. Requests to any other address pass untouched, so
	// clients' home-path retries straight to a node bypass the directory.
	Service netip.AddrPort
	// NoServiceRoute leaves routing the service address to the operator;
	// by default the agent installs a /32 route out of Iface and a
	// permanent neighbour entry for it, and removes them on Close.
	NoServiceRoute bool
	Policy         directory.Policy
	// Router runs the contract's ToR mode, with XDP routing requests that
	// arrive on Iface and sending them back out (XDP_TX): for a host on the
	// path of every request and reply of its keys. Off, the agent is a host
	// agent (directory.ModeHost).
	Router bool
	// XDPMode is "auto" (native, else generic; the default), "native" or
	// "generic".
	XDPMode string
	// Netns is the path of the network namespace Iface lives in (such as
	// /var/run/netns/NAME); empty means the agent's own.
	Netns string
	// Options size the maps; zero values take Load's defaults.
	Options Options
	// ResolveEvery is how often node addresses are resolved again (routes
	// and neighbours change); default 5s.
	ResolveEvery time.Duration
	// ReportEvery is how often the agent reports its counters to the
	// controller (each directory key's hits and the miss sketch's growth,
	// for the hot-key loop); default 500ms (the controller's round);
	// negative: never.
	ReportEvery time.Duration
	// Name names the agent in its reports; default the host name and the
	// interface ("host/eth0").
	Name string
	// DialOptions are added to the controller connection's (the default is
	// insecure transport credentials).
	DialOptions []grpc.DialOption
	Log         *slog.Logger
}

// Agent is a running host agent.
type Agent struct {
	cfg     Config
	dp      *Dataplane
	nl      *netlink.Handle
	ns      netns.NsHandle // netns.None() for the agent's own
	ifindex int
	ifmac   net.HardwareAddr
	xdpMode string
	links   []link.Link
	route   *netlink.Route
	neigh   *netlink.Neigh
	log     *slog.Logger

	mu       sync.Mutex
	bits     uint
	nodes    map[wire.NodeID]netip.AddrPort // from the controller
	resolved map[wire.NodeID]NodeAddr       // installed in the maps
	seq      uint64
	synced   bool // a snapshot was applied and no delta has been missed since

	snapshots, deltas, resubscribes, syncErrors atomic.Uint64
	resolveKick                                 chan struct{}
	reporter                                    *reporter
}

// New loads the programs, attaches them to the interface and installs the
// service route; Run then keeps the maps in step with the controller.
func New(cfg Config) (a *Agent, err error) {
	if cfg.Iface == "" {
		return nil, errors.New("nicagent: no interface")
	}
	if cfg.Controller == "" {
		return nil, errors.New("nicagent: no controller address")
	}
	if !cfg.Service.IsValid() {
		cfg.Service = DefaultService
	}
	if !cfg.Service.Addr().Is4() || cfg.Service.Addr().IsUnspecified() {
		return nil, fmt.Errorf("nicagent: service %s: want an IPv4 address", cfg.Service)
	}
	if cfg.XDPMode == "" {
		cfg.XDPMode = "auto"
	}
	if cfg.ResolveEvery <= 0 {
		cfg.ResolveEvery = 5 * time.Second
	}
	if cfg.ReportEvery == 0 {
		cfg.ReportEvery = 500 * time.Millisecond
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = host + "/" + cfg.Iface
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	a = &Agent{cfg: cfg, ns: netns.None(), log: cfg.Log.With("iface", cfg.Iface),
		nodes: map[wire.NodeID]netip.AddrPort{}, resolved: map[wire.NodeID]NodeAddr{},
		resolveKick: make(chan struct{}, 1), reporter: newReporter(cfg.Name)}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if cfg.Netns != "" {
		if a.ns, err = netns.GetFromPath(cfg.Netns); err != nil {
			return nil, fmt.Errorf("nicagent: netns %s: %w", cfg.Netns, err)
		}
	}
	if a.nl, err = netlink.NewHandleAt(a.ns); err != nil {
		return nil, fmt.Errorf("nicagent: netlink: %w", err)
	}
	l, err := a.nl.LinkByName(cfg.Iface)
	if err != nil {
		return nil, fmt.Errorf("nicagent: interface %s: %w", cfg.Iface, err)
	}
	a.ifindex, a.ifmac = l.Attrs().Index, l.Attrs().HardwareAddr
	if len(a.ifmac) != 6 {
		return nil, fmt.Errorf("nicagent: interface %s has no Ethernet address", cfg.Iface)
	}
	if a.dp, err = Load(cfg.Options); err != nil {
		return nil, err
	}
	if err := a.configure(10); err != nil {
		return nil, err
	}
	if err := a.inNetns(a.attach); err != nil {
		return nil, err
	}
	if !cfg.NoServiceRoute {
		if err := a.routeService(); err != nil {
			return nil, err
		}
	}
	a.log.Info("agent attached", "xdp", a.xdpMode, "tcx", "egress", "service", cfg.Service,
		"mode", map[bool]string{false: "host", true: "router"}[cfg.Router])
	return a, nil
}

// configure resets the maps for a partition count and sets the config.
func (a *Agent) configure(bits uint) error {
	mode := directory.ModeHost
	if a.cfg.Router {
		mode = directory.ModeToR
	}
	slots := a.cfg.Options.SlotCap
	if slots == 0 {
		slots = 4096
	}
	if err := a.dp.Reset(directory.Config{PartitionBits: bits, Slots: slots, Mode: mode, Policy: a.cfg.Policy}); err != nil {
		return err
	}
	a.bits = bits
	if err := a.dp.SetService(a.cfg.Service); err != nil {
		return err
	}
	if err := a.dp.SetInterfaceMAC(a.ifmac); err != nil {
		return err
	}
	if err := a.dp.SetRouter(a.cfg.Router); err != nil {
		return err
	}
	if err := a.dp.SetConsumeVSB(!a.cfg.Router); err != nil {
		return err
	}
	a.resolved = map[wire.NodeID]NodeAddr{}
	return nil
}

// inNetns runs f on a thread in the interface's namespace: attaching XDP
// and TCX names the interface by index in the caller's namespace.
func (a *Agent) inNetns(f func() error) error {
	if !a.ns.IsOpen() {
		return f()
	}
	return netnsrun.InHandle(a.ns, f)
}

func (a *Agent) attach() error {
	modes := map[string][]link.XDPAttachFlags{
		"auto":    {link.XDPDriverMode, link.XDPGenericMode},
		"native":  {link.XDPDriverMode},
		"generic": {link.XDPGenericMode},
	}[a.cfg.XDPMode]
	if modes == nil {
		return fmt.Errorf("nicagent: XDP mode %q: want auto, native or generic", a.cfg.XDPMode)
	}
	var errs []error
	for _, m := range modes {
		l, err := link.AttachXDP(link.XDPOptions{Program: a.dp.XDP(), Interface: a.ifindex, Flags: m})
		if err == nil {
			a.links = append(a.links, l)
			a.xdpMode = map[link.XDPAttachFlags]string{link.XDPDriverMode: "native", link.XDPGenericMode: "generic"}[m]
			break
		}
		errs = append(errs, err)
	}
	if a.xdpMode == "" {
		return fmt.Errorf("nicagent: attach XDP to %s: %w", a.cfg.Iface, errors.Join(errs...))
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: a.ifindex, Program: a.dp.TC(), Attach: ebpf.AttachTCXEgress})
	if err != nil {
		return fmt.Errorf("nicagent: attach TCX egress to %s: %w", a.cfg.Iface, err)
	}
	a.links = append(a.links, l)
	return nil
}

// routeService routes the service address out of the interface, to a
// neighbour entry that never needs resolving: TC rewrites the MAC.
func (a *Agent) routeService() error {
	ip := a.cfg.Service.Addr().AsSlice()
	r := &netlink.Route{LinkIndex: a.ifindex, Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}
	if err := a.nl.RouteReplace(r); err != nil {
		return fmt.Errorf("nicagent: route %s via %s: %w", a.cfg.Service.Addr(), a.cfg.Iface, err)
	}
	a.route = r
	n := &netlink.Neigh{LinkIndex: a.ifindex, Family: netlink.FAMILY_V4, IP: ip, HardwareAddr: a.ifmac, State: netlink.NUD_PERMANENT}
	if err := a.nl.NeighSet(n); err != nil {
		return fmt.Errorf("nicagent: neighbour %s on %s: %w", a.cfg.Service.Addr(), a.cfg.Iface, err)
	}
	a.neigh = n
	return nil
}

// Close detaches the programs, removes the service route and releases
// everything.
func (a *Agent) Close() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	a.links = nil
	if a.nl != nil {
		if a.neigh != nil {
			if err := a.nl.NeighDel(a.neigh); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENODEV) {
				errs = append(errs, err)
			}
		}
		if a.route != nil {
			_ = a.nl.RouteDel(a.route) // gone with the interface, perhaps
		}
		a.nl.Close()
		a.nl = nil
	}
	if a.dp != nil {
		errs = append(errs, a.dp.Close())
		a.dp = nil
	}
	if a.ns.IsOpen() {
		a.ns.Close()
		a.ns = netns.None()
	}
	return errors.Join(errs...)
}

// Dataplane is the agent's loaded programs and maps.
func (a *Agent) Dataplane() *Dataplane { return a.dp }

// XDPMode is how XDP is attached: "native" or "generic".
func (a *Agent) XDPMode() string { return a.xdpMode }

// SyncStats describe the directory subscription.
type SyncStats struct {
	Snapshots, Deltas, Resubscribes, Errors uint64
	Synced                                  bool
	Sequence                                uint64
	Nodes, Resolved                         int
}

// SyncStats returns the subscription's state.
func (a *Agent) SyncStats() SyncStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return SyncStats{
		Snapshots: a.snapshots.Load(), Deltas: a.deltas.Load(), Resubscribes: a.resubscribes.Load(),
		Errors: a.syncErrors.Load(), Synced: a.synced, Sequence: a.seq,
		Nodes: len(a.nodes), Resolved: len(a.resolved),
	}
}

// Ready reports whether the maps hold the controller's directory and every
// node's address is resolved.
func (a *Agent) Ready() bool {
	s := a.SyncStats()
	return s.Synced && s.Nodes > 0 && s.Resolved == s.Nodes
}

// Run subscribes to the controller's directory and keeps the maps in step
// (a snapshot, then deltas; on any error it resubscribes with backoff, and
// the next snapshot reconciles), resolves node addresses, and reports the
// maps' counters to the controller every ReportEvery. It returns when ctx
// ends.
func (a *Agent) Run(ctx context.Context) error {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, a.cfg.DialOptions...)
	cs, err := controller.DialControllers(strings.Split(a.cfg.Controller, ","), opts...)
	if err != nil {
		return fmt.Errorf("nicagent: %w", err)
	}
	defer cs.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.resolveLoop(ctx)
	}()
	if a.cfg.ReportEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.reportLoop(ctx, cs)
		}()
	}
	a.subscribe(ctx, cs)
	wg.Wait()
	return nil
}

// subscribe keeps the directory subscription until ctx ends: at the
// controller that leads (a follower's refusal names it), resubscribing
// with backoff when a stream ends.
func (a *Agent) subscribe(ctx context.Context, cs *controller.Controllers) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		cl, addr, err := cs.Client()
		if err == nil {
			err = a.watch(ctx, cl)
		}
		if ctx.Err() != nil {
			break
		}
		if hinted, _ := cs.Next(addr, err); hinted {
			// A follower named the leader: subscribe there at once.
			a.log.Info("following the controller leader", "leader", cs.Current())
			backoff = 100 * time.Millisecond
			continue
		}
		a.mu.Lock()
		a.synced = false
		a.mu.Unlock()
		a.resubscribes.Add(1)
		if time.Since(start) > 10*time.Second {
			backoff = 100 * time.Millisecond // it was a working stream
		}
		a.log.Warn("directory subscription ended; resubscribing", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff/2 + rand.N(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// errGap means a delta was missed: only a fresh snapshot can repair it.
var errGap = errors.New("nicagent: directory update out of sequence")

func (a *Agent) watch(ctx context.Context, cl api.ControllerClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A router stamps writes: until its maps hold a snapshot, they are
	// new, and the stamps its last run issued may still be in flight. So
	// it subscribes asking for a new incarnation (spec/README.md, flaw G).
	lost := a.cfg.Router && a.snapshots.Load() == 0
	st, err := cl.WatchDirectory(ctx, &api.WatchDirectoryRequest{LostState: lost})
	if err != nil {
		return err
	}
	first := true
	for {
		u, err := st.Recv()
		if err != nil {
			return err
		}
		if first != (u.GetKind() == api.DirectoryUpdate_SNAPSHOT) {
			return fmt.Errorf("nicagent: %s where the stream's %s update was due", u.GetKind(), map[bool]string{true: "first (snapshot)", false: "next (delta)"}[first])
		}
		first = false
		if err := a.Apply(u); err != nil {
			a.syncErrors.Add(1)
			return err
		}
	}
}

// Apply applies one update of the directory subscription to the maps. A
// snapshot reconciles them with it (entries that stay keep their fresh bits
// and versions); a delta must follow the last update's sequence.
func (a *Agent) Apply(u *api.DirectoryUpdate) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if u.GetKind() == api.DirectoryUpdate_SNAPSHOT {
		if err := a.applySnapshotLocked(u); err != nil {
			return err
		}
		a.snapshots.Add(1)
		a.seq, a.synced = u.GetSequence(), true
		a.kickResolve()
		return nil
	}
	if !a.synced {
		return errors.New("nicagent: a delta before any snapshot")
	}
	if u.GetSequence() != a.seq+1 {
		return fmt.Errorf("%w: %d after %d", errGap, u.GetSequence(), a.seq)
	}
	var err error
	switch u.GetKind() {
	case api.DirectoryUpdate_UPSERT:
		for _, e := range u.GetEntries() {
			err = errors.Join(err, a.upsertLocked(e))
		}
	case api.DirectoryUpdate_DELETE:
		for _, e := range u.GetEntries() {
			h, herr := keyHash(e)
			if herr != nil {
				err = errors.Join(err, herr)
				continue
			}
			if eerr := a.dp.Evict(h); eerr != nil && !errors.Is(eerr, directory.ErrNotFound) {
				err = errors.Join(err, eerr)
			}
		}
	case api.DirectoryUpdate_PARTITIONS:
		if u.GetPartitionBits() != 0 && uint(u.GetPartitionBits()) != a.bits {
			return fmt.Errorf("nicagent: the partition count changed (%d bits to %d): resubscribing for a snapshot", a.bits, u.GetPartitionBits())
		}
		err = a.setPartitionsLocked(u.GetPartitions())
		if len(u.GetNodes()) > 0 {
			err = errors.Join(err, a.setNodesLocked(u.GetNodes()))
		}
	default:
		err = fmt.Errorf("nicagent: update kind %s", u.GetKind())
	}
	if err != nil {
		return err
	}
	a.seq = u.GetSequence()
	a.deltas.Add(1)
	return nil
}

func (a *Agent) applySnapshotLocked(u *api.DirectoryUpdate) error {
	bits := uint(u.GetPartitionBits())
	if bits == 0 {
		bits = a.bits
	}
	if bits != a.bits || a.snapshots.Load() == 0 {
		if err := a.configure(bits); err != nil {
			return err
		}
	}
	if err := a.setNodesLocked(u.GetNodes()); err != nil {
		return err
	}
	if err := a.setPartitionsLocked(u.GetPartitions()); err != nil {
		return err
	}
	keep := map[wire.KeyHash]bool{}
	var errs []error
	for _, e := range u.GetEntries() {
		h, err := keyHash(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		keep[h] = true
		errs = append(errs, a.upsertLocked(e))
	}
	for _, h := range a.dp.Keys() {
		if !keep[h] {
			errs = append(errs, a.dp.Evict(h))
		}
	}
	return errors.Join(errs...)
}

func keyHash(e *api.DirectoryEntry) (wire.KeyHash, error) {
	var h wire.KeyHash
	if len(e.GetKeyHash()) != wire.KeyHashLen {
		if len(e.GetKey()) == 0 {
			return h, fmt.Errorf("nicagent: directory entry with a %d-byte key hash", len(e.GetKeyHash()))
		}
		return wire.HashKey(e.GetKey()), nil
	}
	copy(h[:], e.GetKeyHash())
	return h, nil
}

func nodeIDs(xs []uint32) ([]wire.NodeID, error) {
	out := make([]wire.NodeID, len(xs))
	for i, x := range xs {
		if x > 0xffff {
			return nil, fmt.Errorf("nicagent: node id %d", x)
		}
		out[i] = wire.NodeID(x)
	}
	return out, nil
}

func bucketBytes(xs []uint32) ([]uint8, error) {
	if len(xs) == 0 {
		return nil, nil
	}
	out := make([]uint8, len(xs))
	for i, x := range xs {
		if x > 255 {
			return nil, directory.ErrBadBucket
		}
		out[i] = uint8(x)
	}
	return out, nil
}

// upsertLocked installs an entry; one already there with the same
// LocationList and incarnation keeps its coherence state and gets the new
// buckets. An entry in a new incarnation (another plane lost its state)
// is installed again, seeded as a promotion is: the heads now refuse the
// last incarnation's stamps.
func (a *Agent) upsertLocked(e *api.DirectoryEntry) error {
	h, err := keyHash(e)
	if err != nil {
		return err
	}
	locs, err := nodeIDs(e.GetLocations())
	if err != nil {
		return err
	}
	b, err := bucketBytes(e.GetBuckets())
	if err != nil {
		return err
	}
	r := int(e.GetChainLength())
	present, same := a.dp.Has(h, locs, r, wire.StampIncarnation(e.GetVersion()))
	if same {
		return a.dp.SetSlotBuckets(h, b)
	}
	if present {
		if err := a.dp.Evict(h); err != nil {
			return err
		}
	}
	if err := a.dp.Insert(h, locs, r, e.GetVersion(), b); err != nil {
		return fmt.Errorf("nicagent: install %x: %w", h[:4], err)
	}
	return nil
}

func (a *Agent) setPartitionsLocked(ps []*api.Partition) error {
	batch := make([]PartitionEntry, 0, len(ps))
	for _, p := range ps {
		chain, err := nodeIDs(p.GetChain())
		if err != nil {
			return fmt.Errorf("nicagent: partition %d: %w", p.GetIndex(), err)
		}
		b, err := bucketBytes(p.GetBuckets())
		if err != nil {
			return fmt.Errorf("nicagent: partition %d: %w", p.GetIndex(), err)
		}
		batch = append(batch, PartitionEntry{Index: p.GetIndex(), Chain: chain, Buckets: b})
	}
	if err := a.dp.SetPartitions(batch); err != nil {
		return fmt.Errorf("nicagent: %w", err)
	}
	return nil
}

// setNodesLocked records the node table: each node's address is a storage
// source (its VSBs are accepted), and is resolved to a next-hop MAC.
func (a *Agent) setNodesLocked(ns []*api.Node) error {
	next := map[wire.NodeID]netip.AddrPort{}
	var errs []error
	for _, n := range ns {
		if n.GetId() > 0xffff {
			errs = append(errs, fmt.Errorf("nicagent: node id %d", n.GetId()))
			continue
		}
		ap, err := resolveAddr(n.GetAddr())
		if err != nil {
			errs = append(errs, fmt.Errorf("nicagent: node %d: %w", n.GetId(), err))
			continue
		}
		next[wire.NodeID(n.GetId())] = ap
	}
	for id, ap := range a.nodes {
		if nap, ok := next[id]; !ok || nap != ap {
			errs = append(errs, a.dp.SetSource(ap, directory.PortClient))
			if !ok {
				errs = append(errs, a.dp.SetNodeAddr(id, NodeAddr{}))
				delete(a.resolved, id)
			}
		}
	}
	for id, ap := range next {
		errs = append(errs, a.dp.SetSource(ap, directory.PortStorage))
		if old, ok := a.nodes[id]; ok && old != ap {
			delete(a.resolved, id)
		}
	}
	a.nodes = next
	a.kickResolve()
	return errors.Join(errs...)
}

func resolveAddr(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if !ap.Addr().Unmap().Is4() {
			return ap, fmt.Errorf("%s: IPv4 only", s)
		}
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	ua, err := net.ResolveUDPAddr("udp4", s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ap := ua.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

func (a *Agent) kickResolve() {
	select {
	case a.resolveKick <- struct{}{}:
	default:
	}
}

// resolveLoop keeps the node address map: each node's next hop (itself or
// its gateway) looked up in the routing table, and its MAC in the
// neighbour table; an unresolved next hop is asked for (NTF_USE makes the
// kernel send the ARP request) and tried again shortly.
func (a *Agent) resolveLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.ResolveEvery)
	defer t.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		if pending := a.resolveOnce(); pending > 0 {
			retry.Reset(50 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.resolveKick:
		case <-retry.C:
		}
	}
}

// resolveOnce resolves every node and returns how many are still pending.
func (a *Agent) resolveOnce() int {
	a.mu.Lock()
	nodes := make(map[wire.NodeID]netip.AddrPort, len(a.nodes))
	for id, ap := range a.nodes {
		nodes[id] = ap
	}
	a.mu.Unlock()
	neighs, err := a.nl.NeighList(a.ifindex, netlink.FAMILY_V4)
	if err != nil {
		a.log.Warn("neighbour table", "err", err)
		return len(nodes)
	}
	pending := 0
	for id, ap := range nodes {
		na, err := a.resolveNode(ap, neighs)
		a.mu.Lock()
		cur, had := a.resolved[id]
		if a.nodes[id] != ap { // changed meanwhile; the next round has it
			a.mu.Unlock()
			continue
		}
		switch {
		case err != nil:
			pending++
			if had {
				// Keep the last MAC while the neighbour is re-learnt.
				a.mu.Unlock()
				continue
			}
		case !had || cur.Addr != na.Addr || !slices.Equal(cur.MAC, na.MAC):
			if serr := a.dp.SetNodeAddr(id, na); serr != nil {
				a.log.Warn("install node address", "node", id, "err", serr)
			} else {
				a.resolved[id] = na
				a.log.Debug("node resolved", "node", id, "addr", na.Addr, "mac", na.MAC)
			}
		}
		a.mu.Unlock()
	}
	return pending
}

var errUnresolved = errors.New("next hop not resolved yet")

func (a *Agent) resolveNode(ap netip.AddrPort, neighs []netlink.Neigh) (NodeAddr, error) {
	ip := ap.Addr().AsSlice()
	routes, err := a.nl.RouteGet(ip)
	if err != nil || len(routes) == 0 {
		return NodeAddr{}, fmt.Errorf("no route to %s: %v", ap.Addr(), err)
	}
	r := routes[0]
	if r.LinkIndex != a.ifindex {
		return NodeAddr{}, fmt.Errorf("%s is routed via interface %d, not %s", ap.Addr(), r.LinkIndex, a.cfg.Iface)
	}
	hop := net.IP(ip)
	if r.Gw != nil {
		hop = r.Gw
	}
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, n := range neighs {
		if n.IP.Equal(hop) && len(n.HardwareAddr) == 6 && n.State&usable != 0 {
			return NodeAddr{MAC: n.HardwareAddr, Addr: ap}, nil
		}
	}
	// Ask the kernel to resolve it.
	_ = a.nl.NeighSet(&netlink.Neigh{LinkIndex: a.ifindex, Family: netlink.FAMILY_V4, IP: hop, Flags: netlink.NTF_USE})
	return NodeAddr{}, errUnresolved
}
