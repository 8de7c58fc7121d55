// Package cluster is the one assembly of netdir: it starts storage nodes
// (StartNode), software data planes (StartSwitch) and controllers
// (StartController), each with the telemetry it has in a deployment: nodes
// report hot keys and tree stats to the controller's gRPC API and gossip
// their stats with hashicorp/memberlist, the controller gossips expected
// loads back. `netdir node`, `netdir switch` and `netdir controller` each
// run one of them; the in-process system of `netdir demo`, `netdir bench`
// and the tests runs them all on loopback (Cluster, Plane).
//
// A Cluster is N storage nodes on 127.0.0.1, each optionally behind a
// fault-injecting UDP proxy (loss, duplication, reordering, delay) that
// carries all of the node's traffic (clients' and peers'), with node crash
// and restart. Node i (0-based) has id i+1. The layout's node addresses are
// the proxies' when proxies are on, so faults hit chain traffic too. A data
// plane (the model package's software switch) can be placed in front by
// setting Options.DataPlane to its address and giving clients that address
// as their service; with Options.Controller, StartPlane starts a switch and
// a controller on addresses the cluster reserved, as often as a caller
// wants a fresh pair.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// Options size a cluster.
type Options struct {
	N             int  // nodes (default 3)
	R             int  // chain length (default min(3, N))
	PartitionBits uint // default 4: small clusters need few partitions
	Epoch         uint32
	Dir           string // data root (required; tests pass t.TempDir())
	Proxy         bool   // put a fault-injecting proxy in front of every node
	Faults        Faults // initial faults when Proxy is on
	Seed          uint64 // seeds the proxies' randomness
	DataPlane     string // address nodes send VSBs to (optional; set by Switch)
	// Switch puts the software data plane (model.Switch) in front: clients
	// given Service() as their service address reach the nodes through it,
	// and nodes send VSBs to it. The switch talks to the nodes' own sockets;
	// with Proxy on, a further fault proxy stands between clients and the
	// switch, so faults hit client↔switch and node↔node traffic.
	Switch bool
	// Node adjusts each node's options before it starts (optional).
	Node func(*storagenode.Options)
	// Controller reserves loopback addresses for a switch (DataPlane, unless
	// set), a controller's gRPC API and its gossip member, where StartPlane
	// starts them; every node reports to that API each Round (default
	// DefaultReportEvery) and gossips with that member, as `netdir node
	// --controller --gossip-seeds` does.
	Controller bool
	Round      time.Duration
	// Controllers is how many controllers' addresses to reserve (default
	// 1): a plane with PlaneConfig.Replicas up to this many raft-replicated
	// controllers; the nodes report to whichever leads and gossip with all.
	Controllers int
	// FailureTimeout is the nodes' and the plane's controller's gossip
	// failure timeout (0: gossip.DefaultFailureTimeout), after which the
	// controller splices a silent node out of its chains.
	FailureTimeout time.Duration
	// Keys is the cluster key sealing node ops (nodeauth); nil: a random
	// one, so every cluster authenticates its node ops as a deployment
	// does.
	Keys *nodeauth.Keys
}

// Cluster is a running in-process cluster.
type Cluster struct {
	Layout  *layout.Map
	opts    Options
	mu      sync.Mutex
	nodes   []*Node
	keys    nodeauth.Keys
	auths   []*nodeauth.Auth // each node's, by index (replaced by a restart)
	listen  []netip.AddrPort
	proxies []*Proxy
	sw      *Switch
	swProxy *Proxy
	// The controllers' reserved addresses (Options.Controller), one of
	// each per replica (Options.Controllers): API, gossip and raft.
	apis, gossips, rafts []string
	// nodeGossips are the nodes' gossip addresses, by index, kept across
	// restarts: a node back on another port is refused as a conflicting
	// address by members that still hold the old one alive, until
	// memberlist's reclaim time (seen under CPU load as a missed splice-out).
	nodeGossips []string
}

// Start starts the cluster and waits until every node serves.
func Start(o Options) (*Cluster, error) {
	if o.N <= 0 {
		o.N = 3
	}
	if o.R <= 0 {
		o.R = min(3, o.N)
	}
	if o.PartitionBits == 0 {
		o.PartitionBits = 4
	}
	if o.Dir == "" {
		return nil, errors.New("cluster: no data directory")
	}
	c := &Cluster{opts: o, nodes: make([]*Node, o.N), auths: make([]*nodeauth.Auth, o.N), listen: make([]netip.AddrPort, o.N)}
	if o.Keys != nil {
		c.keys = *o.Keys
	} else {
		k, err := nodeauth.NewKey(nodeauth.GenerateSecret())
		if err != nil {
			return nil, err
		}
		c.keys = nodeauth.Keys{Seal: k}
	}
	for i := range o.N {
		a, err := freePort()
		if err != nil {
			c.Close()
			return nil, err
		}
		c.listen[i] = a
	}
	if o.Controller {
		if err := c.reserveControl(); err != nil {
			c.Close()
			return nil, err
		}
	}
	cfg := layout.Config{Epoch: o.Epoch, PartitionBits: o.PartitionBits, Replicas: o.R, DataPlane: c.opts.DataPlane}
	if o.Switch {
		if err := c.startSwitch(); err != nil {
			c.Close()
			return nil, err
		}
		c.opts.DataPlane = c.sw.Addr().String()
		cfg.DataPlane = c.opts.DataPlane
	}
	for i := range o.N {
		a := c.listen[i]
		addr := a
		if o.Proxy {
			p, err := NewProxy(o.Seed*1000 + uint64(i))
			if err != nil {
				c.Close()
				return nil, err
			}
			p.SetUpstream(a)
			p.SetFaults(o.Faults)
			c.proxies = append(c.proxies, p)
			addr = p.Addr()
		}
		cfg.Nodes = append(cfg.Nodes, layout.Node{ID: wire.NodeID(i + 1), Addr: addr.String()})
	}
	m, err := layout.New(cfg)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.Layout = m
	if c.sw != nil {
		if err := directory.InstallLayout(c.sw, m); err != nil {
			c.Close()
			return nil, err
		}
	}
	for i := range o.N {
		if err := c.start(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if !n.WaitReady(30 * time.Second) {
			c.Close()
			return nil, fmt.Errorf("cluster: node %d not ready", n.ID())
		}
	}
	return c, nil
}

func freePort() (netip.AddrPort, error) {
	a, err := ReserveAddr()
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.ParseAddrPort(a)
}

// reserveControl picks the loopback addresses that every plane's switch,
// controller API and gossip member bind, so the nodes' layout, reports
// and gossip seeds name one of each for the cluster's life.
func (c *Cluster) reserveControl() error {
	if c.opts.DataPlane == "" {
		a, err := freePort()
		if err != nil {
			return err
		}
		c.opts.DataPlane = a.String()
	}
	for range max(c.opts.Controllers, 1) {
		for _, l := range []*[]string{&c.apis, &c.gossips, &c.rafts} {
			a, err := ReserveAddr()
			if err != nil {
				return err
			}
			*l = append(*l, a)
		}
	}
	for range c.opts.N {
		a, err := ReserveAddr()
		if err != nil {
			return err
		}
		c.nodeGossips = append(c.nodeGossips, a)
	}
	return nil
}

func (c *Cluster) start(i int) error {
	so := storagenode.Options{
		ID: wire.NodeID(i + 1), Dir: filepath.Join(c.opts.Dir, fmt.Sprintf("node-%d", i+1)),
		Layout: c.Layout, Listen: c.listen[i].String(),
		Workers: 4, CacheBytes: 8 << 20, MemTableBytes: 4 << 20,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Auth:   c.NewAuth(),
	}
	if c.opts.Node != nil {
		c.opts.Node(&so)
	}
	cfg := NodeConfig{Storage: so, Log: so.Logger}
	if c.opts.Controller {
		cfg.Controller, cfg.ReportEvery = strings.Join(c.apis, ","), c.opts.Round
		cfg.GossipBind, cfg.GossipSeeds = c.nodeGossips[i], c.gossips
		cfg.FailureTimeout = c.opts.FailureTimeout
	}
	var n *Node
	var err error
	for try := 0; try < 50; try++ { // the port may linger briefly after a crash
		if n, err = StartNode(context.Background(), cfg); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.auths[i] = so.Auth
	c.mu.Unlock()
	return nil
}

// Node is node i (id i+1), nil while crashed.
func (c *Cluster) Node(i int) *storagenode.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] == nil {
		return nil
	}
	return c.nodes[i].Node
}

// N is the node count.
func (c *Cluster) N() int { return len(c.nodes) }

// Proxy is node i's proxy, nil without proxies.
func (c *Cluster) Proxy(i int) *Proxy {
	if i < len(c.proxies) {
		return c.proxies[i]
	}
	return nil
}

// SetFaults changes every proxy's faults.
func (c *Cluster) SetFaults(f Faults) {
	for _, p := range c.proxies {
		p.SetFaults(f)
	}
}

// Crash stops node i abruptly: its socket closes at once and nothing more
// is processed. (In process, Pebble's already-synced WAL is what survives;
// the kill -9 test covers a real SIGKILL.)
func (c *Cluster) Crash(i int) error {
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n == nil {
		return nil
	}
	return n.Close()
}

// Restart starts a crashed node i on its data directory and waits until it
// has caught up and serves.
func (c *Cluster) Restart(i int) error {
	if c.Node(i) != nil {
		return fmt.Errorf("cluster: node %d is running", i+1)
	}
	if err := c.start(i); err != nil {
		return err
	}
	if !c.Node(i).WaitReady(30 * time.Second) {
		return fmt.Errorf("cluster: node %d not ready after restart", i+1)
	}
	return nil
}

// Client makes a client of the cluster; o.Layout is filled in, and with no
// Service the client talks to the nodes (through their proxies) directly.
// Unless o.Refresh is set, the client refreshes its layout from
// CurrentLayout.
func (c *Cluster) Client(o client.Options) (*client.Client, error) {
	o.Layout = c.Layout
	if o.Auth == nil {
		o.Auth = c.NewAuth()
	}
	if o.Refresh == nil {
		o.Refresh = func(context.Context) (*layout.Map, error) { return c.CurrentLayout(), nil }
	}
	return client.New(o)
}

// NewAuth is a new holder of the cluster's keys: for a controller, a
// client's control ops, or a test's forger of node ops.
func (c *Cluster) NewAuth() *nodeauth.Auth {
	c.mu.Lock()
	defer c.mu.Unlock()
	return nodeauth.New(c.keys, nil)
}

// Keys are the cluster keys in force.
func (c *Cluster) Keys() nodeauth.Keys {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keys
}

// Auth is node i's key holder (nil while crashed): a test rotates the
// nodes' keys one at a time, as their key files change.
func (c *Cluster) Auth(i int) *nodeauth.Auth {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] == nil {
		return nil
	}
	return c.auths[i]
}

// SetKeys installs new cluster keys in every running node, as each
// reloading its key file does (a rotation's step), and in the nodes
// started later.
func (c *Cluster) SetKeys(ks nodeauth.Keys) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = ks
	for i, a := range c.auths {
		if a != nil && c.nodes[i] != nil {
			a.SetKeys(ks)
		}
	}
}

// CurrentLayout is the newest layout a running node holds (the nodes take
// the controller's through gossip), or the cluster's first.
func (c *Cluster) CurrentLayout() *layout.Map {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.Layout
	for _, n := range c.nodes {
		if n != nil {
			if l := n.Layout(); l.Epoch() > m.Epoch() {
				m = l
			}
		}
	}
	return m
}

// Close stops every node, proxy and the switch.
func (c *Cluster) Close() {
	for i := range c.nodes {
		c.Crash(i)
	}
	for _, p := range c.proxies {
		p.Close()
	}
	if c.swProxy != nil {
		c.swProxy.Close()
	}
	if c.sw != nil {
		c.sw.Close()
	}
}

func (c *Cluster) startSwitch() error {
	var nodes []model.Node
	for i, a := range c.listen {
		nodes = append(nodes, model.Node{ID: wire.NodeID(i + 1), Addr: a})
	}
	sw, err := StartSwitch(SwitchConfig{
		Listen: "127.0.0.1:0", Nodes: nodes,
		Directory: directory.Config{PartitionBits: c.opts.PartitionBits, Mode: directory.ModeToR},
	})
	if err != nil {
		return err
	}
	c.sw = sw
	if c.opts.Proxy {
		p, err := NewProxy(c.opts.Seed*1000 + 999)
		if err != nil {
			return err
		}
		p.SetUpstream(sw.Addr())
		p.SetFaults(c.opts.Faults)
		c.swProxy = p
	}
	return nil
}

// DataPlane is the address the nodes send VSBs to: the switch's with
// Options.Switch, StartPlane's with Options.Controller ("" if none).
func (c *Cluster) DataPlane() string { return c.opts.DataPlane }

// Switch is the software data plane, nil without Options.Switch.
func (c *Cluster) Switch() *model.Switch {
	if c.sw == nil {
		return nil
	}
	return c.sw.Switch
}

// Service is the address clients send to: the switch (through its proxy
// when proxies are on), or "" without a switch.
func (c *Cluster) Service() string {
	switch {
	case c.swProxy != nil:
		return c.swProxy.Addr().String()
	case c.sw != nil:
		return c.sw.Addr().String()
	}
	return ""
}

// Promote makes key hot, as the controller does: the chain head is told
// first (it starts refusing unstamped writes and copies the committed
// version to the extras), then the key enters the switch's directory with
// the head's version, its chain and the extras as its LocationList.
func (c *Cluster) Promote(ctx context.Context, cl *client.Client, key []byte, extras []wire.NodeID) error {
	ver, err := cl.Promote(ctx, key, extras)
	if err != nil {
		return err
	}
	if c.sw == nil {
		return nil
	}
	h := wire.HashKey(key)
	locs := append(slices.Clone(c.Layout.ChainOf(h)), extras...)
	_, err = c.sw.Insert(h, locs, c.Layout.R(), ver, nil)
	return err
}

// Evict makes key cold in the safe order: out of the directory first (so
// no read goes to an extra and writes are no longer stamped), then the head
// is told (it accepts unstamped writes again and the extras drop copies).
func (c *Cluster) Evict(ctx context.Context, cl *client.Client, key []byte) error {
	if c.sw != nil {
		if err := c.sw.Evict(wire.HashKey(key)); err != nil && !errors.Is(err, directory.ErrNotFound) {
			return err
		}
	}
	return cl.Demote(ctx, key)
}
