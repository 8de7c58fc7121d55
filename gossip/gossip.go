package gossip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/netdir/netdir/wire"
)

// Defaults of the command-line flags.
const (
	// DefaultControllerBind is where `netdir controller` gossips, and what
	// nodes name as their seed.
	DefaultControllerBind = "127.0.0.1:7946"
	// DefaultNodeBind lets a node pick a free loopback port: nodes are found
	// through the seeds, so their own port needs no configuration.
	DefaultNodeBind = "127.0.0.1:0"
	// DefaultInterval is how often a node publishes a new version.
	DefaultInterval = time.Second
	// DefaultFailureTimeout is about how long a member that stopped
	// answering takes to be declared dead.
	DefaultFailureTimeout = time.Second
)

// Config configures a gossip member.
type Config struct {
	// Name is the member's name, unique in the cluster ("node-3",
	// "controller").
	Name string
	// Bind is the host:port for memberlist's UDP and TCP; port 0 picks a
	// free one. A loopback host gets memberlist's local-network timings,
	// any other its LAN ones.
	Bind string
	// Advertise is the host:port others reach this member at, if not Bind.
	Advertise string
	// Seeds are members to join (host:port). Joining is retried in the
	// background while a seed is not a live member, so members may start in
	// any order.
	Seeds []string
	// FailureTimeout is about how long a member that stopped answering
	// takes to be declared dead (default DefaultFailureTimeout): a fifth of
	// it is the probe interval, a tenth the probe timeout, and two fifths
	// the suspicion time before a suspect is declared dead.
	FailureTimeout time.Duration
	// OnStats, OnExpected and OnLayout, if set, are called for every
	// version newer than the member held, its own included, and OnMember
	// when a member joins (alive) or leaves or is declared dead (not
	// alive); all from memberlist's goroutines: they must not block.
	OnStats    func(NodeStats)
	OnExpected func(Expected)
	OnLayout   func(yaml []byte)
	OnMember   func(name string, alive bool)
	Log        *slog.Logger
	// Keys, if any, encrypt and authenticate every gossip message
	// (memberlist's keyring, AES-GCM): the first is used to send, all are
	// accepted. Members without one of them cannot join or be heard.
	Keys [][]byte
}

// Gossip is a running member.
type Gossip struct {
	cfg Config
	ml  *memberlist.Memberlist
	q   *memberlist.TransmitLimitedQueue
	// keyring is memberlist's (Config.Keys; nil without), which
	// memberlist offers no accessor for.
	keyring *memberlist.Keyring
	tab     table
	log     *slog.Logger

	// live holds the addresses of live members, and members copies of
	// them by name (the ones sendAll sends to), kept by memberlist's join,
	// update and leave events: the *Node values that Members returns are
	// written by memberlist's own goroutines (a member back at a new
	// address), so reading them races.
	liveMu  sync.Mutex
	live    map[string]bool
	members map[string]memberlist.Node

	// deliverMu and closed keep the callbacks (OnStats, OnLayout,
	// OnExpected) from running once Close has returned: memberlist's
	// Shutdown does not wait for its packet handler, which delivered a
	// layout to a node being closed (a data race under -race, ci43).
	deliverMu sync.RWMutex
	closed    bool

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Start creates the member, binds it, and joins the seeds (in the
// background if none answers yet).
func Start(cfg Config) (*Gossip, error) {
	if cfg.Name == "" {
		return nil, errors.New("gossip: no member name")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	host, port, err := splitHostPort(cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("gossip: bind %q: %w", cfg.Bind, err)
	}
	mc := memberlist.DefaultLANConfig()
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		mc = memberlist.DefaultLocalConfig()
		mc.PushPullInterval = 5 * time.Second // the table is small: catch up fast
		// Bandwidth is free on loopback, CPU is not: every member of an
		// in-process system shares the machine, and LZW allocates tables
		// per message.
		mc.EnableCompression = false
	}
	if cfg.FailureTimeout <= 0 {
		cfg.FailureTimeout = DefaultFailureTimeout
	}
	// Suspicion lasts SuspicionMult probe intervals with fewer than ten
	// members (memberlist scales it by log10 of the members above that).
	mc.ProbeInterval = cfg.FailureTimeout / 5
	mc.ProbeTimeout = cfg.FailureTimeout / 10
	mc.SuspicionMult = 2
	// A node restarted on another port after a crash takes its name back.
	mc.DeadNodeReclaimTime = cfg.FailureTimeout
	mc.Name = cfg.Name
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertisePort = port
	if cfg.Advertise != "" {
		ah, ap, err := splitHostPort(cfg.Advertise)
		if err != nil {
			return nil, fmt.Errorf("gossip: advertise %q: %w", cfg.Advertise, err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = ah, ap
	}
	if len(cfg.Keys) > 0 {
		if mc.Keyring, err = memberlist.NewKeyring(cfg.Keys[1:], cfg.Keys[0]); err != nil {
			return nil, fmt.Errorf("gossip: keys: %w", err)
		}
	}
	g := &Gossip{cfg: cfg, keyring: mc.Keyring, log: cfg.Log.With("component", "gossip", "member", cfg.Name), live: map[string]bool{}, members: map[string]memberlist.Node{}, stop: make(chan struct{})}
	mc.Delegate = (*delegate)(g)
	mc.Events = (*events)(g)
	mc.Logger = log.New(slogWriter{g.log}, "", 0)
	// Every entry is sent to more members than memberlist's own messages:
	// a piggybacked entry is lost with its packet, and the push-pull that
	// repairs it comes only every PushPullInterval.
	g.q = &memberlist.TransmitLimitedQueue{RetransmitMult: max(mc.RetransmitMult, 4), NumNodes: func() int {
		if g.ml == nil {
			return 1
		}
		return g.ml.NumMembers()
	}}
	if g.ml, err = memberlist.Create(mc); err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	if len(cfg.Seeds) > 0 {
		g.join()
		g.wg.Add(1)
		go g.rejoin()
	}
	return g, nil
}

func splitHostPort(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q", p)
	}
	if h == "" {
		h = "0.0.0.0"
	}
	return h, port, nil
}

// join joins the seeds that are not live members.
func (g *Gossip) join() {
	var todo []string
	g.liveMu.Lock()
	for _, s := range g.cfg.Seeds {
		if a, err := net.ResolveUDPAddr("udp", s); err == nil && g.live[a.String()] {
			continue
		}
		todo = append(todo, s)
	}
	g.liveMu.Unlock()
	if len(todo) == 0 {
		return
	}
	if n, err := g.ml.Join(todo); err != nil {
		g.log.Debug("join", "seeds", todo, "joined", n, "err", err)
	} else {
		g.log.Info("joined", "seeds", todo, "members", g.ml.NumMembers())
	}
}

// rejoin retries the seeds that are not live members: a controller that
// restarted, or started after its nodes, is found again.
func (g *Gossip) rejoin() {
	defer g.wg.Done()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.join()
		}
	}
}

// SetKeys replaces the gossip's keys (a cluster key rotation's step): the
// first is used to send from now on, the others are still accepted, and
// keys not listed are dropped. A member started without keys has none to
// replace.
func (g *Gossip) SetKeys(keys [][]byte) error {
	kr := g.keyring
	if kr == nil || len(keys) == 0 {
		return nil
	}
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("gossip: keys: %w", err)
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("gossip: keys: %w", err)
	}
	for _, old := range kr.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := kr.RemoveKey(old); err != nil {
				return fmt.Errorf("gossip: keys: %w", err)
			}
		}
	}
	return nil
}

// Addr is the host:port others reach this member at.
func (g *Gossip) Addr() string { return g.ml.LocalNode().Address() }

// Members is the number of live members, this one included.
func (g *Gossip) Members() int { return g.ml.NumMembers() }

// Close leaves the cluster and stops.
func (g *Gossip) Close() error {
	var err error
	g.once.Do(func() {
		close(g.stop)
		g.wg.Wait()
		g.deliverMu.Lock() // waits for a callback in progress
		g.closed = true
		g.deliverMu.Unlock()
		err = errors.Join(g.ml.Leave(time.Second), g.ml.Shutdown())
	})
	return err
}

// PublishStats makes s the node's newest stats and gossips it. s.Version
// must be above every earlier version of the node (NextVersion).
func (g *Gossip) PublishStats(s NodeStats) error {
	return g.publish(statsKey(s.Node), s.Version, s)
}

// PublishLayout gossips the controller's layout (its YAML) at its epoch;
// members that join later get it with memberlist's state exchange.
func (g *Gossip) PublishLayout(epoch uint32, yaml []byte) error {
	return g.publish(layoutKey, uint64(epoch), string(yaml))
}

// Layout returns the newest layout gossiped (its YAML), if any.
func (g *Gossip) Layout() ([]byte, bool) {
	e, ok := g.tab.get(layoutKey)
	if !ok {
		return nil, false
	}
	var y string
	if json.Unmarshal(e.Data, &y) != nil {
		return nil, false
	}
	return []byte(y), true
}

// LayoutEpoch is the epoch of the newest layout gossiped (0 if none),
// without parsing it.
func (g *Gossip) LayoutEpoch() uint32 {
	e, _ := g.tab.get(layoutKey)
	return uint32(e.Version)
}

// ResendLayout sends the layout the member holds, reliably, to every
// other live member: a new leader's, whose predecessor may have died
// before its layout reached every node (members that hold it ignore it).
func (g *Gossip) ResendLayout() error {
	e, ok := g.tab.get(layoutKey)
	if !ok {
		return errors.New("gossip: no layout to resend")
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	g.sendAll(b)
	return nil
}

// PublishExpected gossips the controller's expected load for a node.
func (g *Gossip) PublishExpected(e Expected) error {
	return g.publish(expectedKey(e.Node), e.Version, e)
}

func (g *Gossip) publish(key string, version uint64, v any) error {
	if version == 0 {
		return errors.New("gossip: version 0")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	e := entry{Key: key, Version: version, Data: b}
	if !g.tab.put(e) {
		old, _ := g.tab.get(key)
		return fmt.Errorf("gossip: %s version %d is not above %d", key, version, old.Version)
	}
	g.deliver(e)
	return g.queue(e, true)
}

// maxBroadcast is the largest entry gossiped in UDP packets: memberlist's
// 1400-byte packets less its headers. Larger ones (a node with many trees)
// go over TCP.
const maxBroadcast = 1200

// queue gossips an entry this member just took: in memberlist's broadcast
// queue, or, if it is too large for a packet and this member made it,
// reliably to every live member (which do not pass it on).
func (g *Gossip) queue(e entry, own bool) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if len(b) <= maxBroadcast {
		g.q.QueueBroadcast(&broadcast{name: e.Key, msg: b})
		return nil
	}
	if own {
		g.sendAll(b)
	}
	return nil
}

// sendAll sends an encoded entry reliably to every other live member.
func (g *Gossip) sendAll(b []byte) {
	g.liveMu.Lock()
	to := slices.Collect(maps.Values(g.members))
	g.liveMu.Unlock()
	for _, m := range to {
		if m.Name != g.cfg.Name {
			go func() {
				if err := g.ml.SendReliable(&m, b); err != nil {
					g.log.Debug("send", "to", m.Name, "err", err)
				}
			}()
		}
	}
}

// deliver calls the callbacks for a newer entry.
func (g *Gossip) deliver(e entry) {
	g.deliverMu.RLock()
	defer g.deliverMu.RUnlock()
	if g.closed {
		return
	}
	switch {
	case len(e.Key) > len(statsPrefix) && e.Key[:len(statsPrefix)] == statsPrefix:
		if g.cfg.OnStats != nil {
			var s NodeStats
			if json.Unmarshal(e.Data, &s) == nil {
				g.cfg.OnStats(s)
			}
		}
	case e.Key == layoutKey:
		if g.cfg.OnLayout != nil {
			var y string
			if json.Unmarshal(e.Data, &y) == nil {
				g.cfg.OnLayout([]byte(y))
			}
		}
	case len(e.Key) > len(expectedPrefix) && e.Key[:len(expectedPrefix)] == expectedPrefix:
		if g.cfg.OnExpected != nil {
			var x Expected
			if json.Unmarshal(e.Data, &x) == nil {
				g.cfg.OnExpected(x)
			}
		}
	}
}

// Stats returns the newest stats of every node the member heard of.
func (g *Gossip) Stats() map[wire.NodeID]NodeStats {
	out := map[wire.NodeID]NodeStats{}
	for _, e := range g.tab.entries(statsPrefix) {
		var s NodeStats
		if json.Unmarshal(e.Data, &s) == nil {
			out[s.Node] = s
		}
	}
	return out
}

// Expected returns the newest expected load for node id.
func (g *Gossip) Expected(id wire.NodeID) (Expected, bool) {
	e, ok := g.tab.get(expectedKey(id))
	if !ok {
		return Expected{}, false
	}
	var x Expected
	if err := json.Unmarshal(e.Data, &x); err != nil {
		return Expected{}, false
	}
	return x, true
}

// delegate is memberlist's view of the member.
type delegate Gossip

func (d *delegate) NodeMeta(int) []byte { return nil }

// NotifyMsg takes a gossiped entry; a newer one is kept and gossiped on.
func (d *delegate) NotifyMsg(b []byte) {
	g := (*Gossip)(d)
	var e entry
	if err := json.Unmarshal(b, &e); err != nil {
		g.log.Debug("bad message", "err", err)
		return
	}
	if g.tab.put(e) {
		g.deliver(e)
		_ = g.queue(e, false)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.q.GetBroadcasts(overhead, limit)
}

func (d *delegate) LocalState(bool) []byte { return d.tab.encode() }

func (d *delegate) MergeRemoteState(b []byte, _ bool) {
	g := (*Gossip)(d)
	newer, err := g.tab.merge(b)
	if err != nil {
		g.log.Debug("bad remote state", "err", err)
		return
	}
	for _, e := range newer {
		g.deliver(e)
	}
}

// broadcast is one entry in memberlist's queue; a newer version of the same
// key replaces an older one still queued.
type broadcast struct {
	name string
	msg  []byte
}

func (b *broadcast) Invalidates(o memberlist.Broadcast) bool {
	nb, ok := o.(memberlist.NamedBroadcast)
	return ok && nb.Name() == b.name
}
func (b *broadcast) Name() string    { return b.name }
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}

// slogWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// slog records: errors and warnings as such, the rest at debug.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	switch {
	case bytes.Contains(p, []byte("[ERR]")):
		w.log.Error(line)
	case bytes.Contains(p, []byte("[WARN]")):
		w.log.Warn(line)
	default:
		w.log.Debug(line)
	}
	return len(p), nil
}

// events tracks live members' addresses. memberlist calls it with the node
// under its own lock, so the node may be read here.
type events Gossip

func (e *events) NotifyJoin(n *memberlist.Node) {
	e.liveMu.Lock()
	e.live[n.Address()] = true
	e.members[n.Name] = memberlist.Node{Name: n.Name, Addr: slices.Clone(n.Addr), Port: n.Port}
	e.liveMu.Unlock()
	if e.cfg.OnMember != nil {
		e.cfg.OnMember(n.Name, true)
	}
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	e.liveMu.Lock()
	delete(e.live, n.Address())
	if m, ok := e.members[n.Name]; ok && m.Address() == n.Address() {
		delete(e.members, n.Name)
	}
	e.liveMu.Unlock()
	if e.cfg.OnMember != nil {
		e.cfg.OnMember(n.Name, false)
	}
}

// NotifyUpdate takes a member's new address (a restart on another port).
func (e *events) NotifyUpdate(n *memberlist.Node) {
	e.liveMu.Lock()
	defer e.liveMu.Unlock()
	if old, ok := e.members[n.Name]; ok {
		delete(e.live, old.Address())
	}
	e.live[n.Address()] = true
	e.members[n.Name] = memberlist.Node{Name: n.Name, Addr: slices.Clone(n.Addr), Port: n.Port}
}
