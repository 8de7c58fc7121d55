// Package layout is the cluster layout: the node table, ring placement of
// partitions on chains of R nodes, explicit chain overrides, and the epoch.
// The controller is its authority and serves it (GetLayout); storage nodes,
// data planes and clients follow it. It is pure: no I/O beyond reading a
// file.
//
// Placement is a ring: with the nodes sorted by id, the chain of partition p
// is the R consecutive nodes starting at index p mod n, so every node heads
// about P/n partitions and holds each chain position equally often (the R
// trees of a node, one per position, carry equal shares). Explicit chains in
// the YAML override the ring for the partitions they name.
//
// A Map is immutable. A later layout (a new epoch, chains with a member
// spliced out) is derived from its Config: change the copy and call New.
package layout

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/netdir/netdir/internal/yamlconf"
	"github.com/netdir/netdir/wire"
)

// Defaults and bounds.
const (
	DefaultPartitionBits = 10 // 1024 partitions
	DefaultReplicas      = 3
	MaxPartitionBits     = 20
	MaxReplicas          = 8 // the longest chain a data plane holds
)

// Node is one row of the node table, the one format every command reads.
type Node struct {
	ID   wire.NodeID `yaml:"id"`
	Addr string      `yaml:"addr"` // IP:port of the node's UDP service, where peers, clients and data planes reach it
	// Port and MAC matter to P4 switches only: the switch's egress port
	// toward the node, and the node's MAC for switches that rewrite it.
	Port uint32 `yaml:"port,omitempty"`
	MAC  MAC    `yaml:"mac,omitempty"`
}

// MAC is an Ethernet address, written 02:4e:44:01:00:01 in YAML.
type MAC net.HardwareAddr

// MarshalText writes the colon form.
func (m MAC) MarshalText() ([]byte, error) { return []byte(net.HardwareAddr(m).String()), nil }

// UnmarshalText reads a 6-byte MAC.
func (m *MAC) UnmarshalText(b []byte) error {
	hw, err := net.ParseMAC(string(b))
	if err != nil || len(hw) != 6 {
		return fmt.Errorf("mac %s: want 6 bytes such as 02:4e:44:01:00:01", b)
	}
	*m = MAC(hw)
	return nil
}

func (m MAC) String() string { return net.HardwareAddr(m).String() }

// Config is the YAML form of the layout.
//
//	epoch: 1
//	partition_bits: 10
//	replicas: 3
//	dataplane: 127.0.0.1:7420   # where nodes send VSBs (optional)
//	nodes:
//	  - {id: 1, addr: 127.0.0.1:7501}
//	  - {id: 2, addr: 127.0.0.1:7502}
//	  - {id: 3, addr: 127.0.0.1:7503, port: 3, mac: 02:4e:44:01:00:03}
//	chains:                      # optional overrides: partition -> node ids
//	  7: [3, 1, 2]
//	down: [2]                    # spliced out of every chain (Without)
//	tails: [1]                   # rejoined: at the tail of their chains (WithTail)
//	spares: {7: 4}               # partition -> the spare at its tail (Replace)
//	filling: {1: [0, 2], 4: [7]} # node -> the chains it still fills (Filled ends them)
//	joined: {7: {4: 3}}          # partition -> node -> epoch it last joined the chain (none: as placed)
//
// The placement (ring and overrides) fixes each node's slot in each chain,
// which is the tree it keeps the partition in; Down and Tails reconfigure
// the chains without moving data between a node's trees. Replace writes a
// spare into the slot of a down member (an override) and names it in
// Spares, which puts it at the tail of that chain: it joined last and
// catches up from its predecessor. Filling lists, per node, the chains it
// joined as tail (a spare, or a node back: WithTail) and has not reported
// caught up with yet: it takes their writes (it must, to take over), but
// it is no fresh replica, so it is left out of their read sets (ReadSet,
// ReadWeightsOver) until Filled. Joined dates each member's last joining
// of a chain: a node that skipped epochs learns from it which chains it
// was out of meanwhile, which may have committed writes without it
// (Map.Joined).
type Config struct {
	Epoch         uint32                            `yaml:"epoch"`
	PartitionBits uint                              `yaml:"partition_bits"`
	Replicas      int                               `yaml:"replicas"`
	DataPlane     string                            `yaml:"dataplane,omitempty"`
	Nodes         []Node                            `yaml:"nodes"`
	Chains        map[uint32][]wire.NodeID          `yaml:"chains,omitempty"`
	Down          []wire.NodeID                     `yaml:"down,omitempty,flow"`
	Tails         []wire.NodeID                     `yaml:"tails,omitempty,flow"`
	Spares        map[uint32]wire.NodeID            `yaml:"spares,omitempty"`
	Filling       map[wire.NodeID][]uint32          `yaml:"filling,omitempty"`
	Joined        map[uint32]map[wire.NodeID]uint32 `yaml:"joined,omitempty"`
}

// Load reads a YAML layout file. Its errors are one line naming the file,
// the field and the value: "nodes.yaml: nodes[2].addr: 127.0.0.1:7001
// duplicates nodes[0]".
func Load(path string) (*Map, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := yamlconf.Decode(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m, err := New(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Parse parses a YAML layout; unknown keys are errors.
func Parse(b []byte) (*Map, error) {
	var c Config
	if err := yamlconf.Decode(b, &c); err != nil {
		return nil, fmt.Errorf("layout: %w", err)
	}
	m, err := New(c)
	if err != nil {
		return nil, fmt.Errorf("layout: %w", err)
	}
	return m, nil
}

// Map is a validated layout: every partition's chain resolved.
type Map struct {
	cfg     Config
	nodes   map[wire.NodeID]Node
	addrs   map[wire.NodeID]netip.AddrPort
	ids     []wire.NodeID   // sorted
	placed  [][]wire.NodeID // placement: ring and overrides, R members each
	chains  [][]wire.NodeID // placement less Down, Tails moved last
	filling [][]wire.NodeID // per partition, the members of Filling, in chain order
	dp      netip.AddrPort
}

// New validates c and resolves the chains. Zero fields take the defaults.
// The Map keeps its own copy of c.
func New(c Config) (*Map, error) {
	c = c.clone()
	if c.PartitionBits == 0 {
		c.PartitionBits = DefaultPartitionBits
	}
	if c.PartitionBits > MaxPartitionBits {
		return nil, fmt.Errorf("partition_bits: %d: at most %d", c.PartitionBits, MaxPartitionBits)
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if len(c.Nodes) == 0 {
		return nil, errors.New("nodes: none given")
	}
	if c.Replicas < 1 || c.Replicas > MaxReplicas {
		return nil, fmt.Errorf("replicas: %d: want 1..%d", c.Replicas, MaxReplicas)
	}
	if c.Replicas > len(c.Nodes) {
		return nil, fmt.Errorf("replicas: %d: more than the %d nodes", c.Replicas, len(c.Nodes))
	}
	m := &Map{cfg: c, nodes: map[wire.NodeID]Node{}, addrs: map[wire.NodeID]netip.AddrPort{}}
	byID := map[wire.NodeID]int{}
	byAddr := map[netip.AddrPort]int{}
	for i, n := range c.Nodes {
		if n.ID == 0 {
			return nil, fmt.Errorf("nodes[%d].id: 0: ids start at 1", i)
		}
		if j, dup := byID[n.ID]; dup {
			return nil, fmt.Errorf("nodes[%d].id: %d duplicates nodes[%d]", i, n.ID, j)
		}
		ap, err := netip.ParseAddrPort(n.Addr)
		if err != nil {
			return nil, fmt.Errorf("nodes[%d].addr: %q: want IP:port", i, n.Addr)
		}
		if len(n.MAC) != 0 && len(n.MAC) != 6 {
			return nil, fmt.Errorf("nodes[%d].mac: %s: want 6 bytes", i, n.MAC)
		}
		if j, dup := byAddr[ap]; dup {
			return nil, fmt.Errorf("nodes[%d].addr: %s duplicates nodes[%d]", i, ap, j)
		}
		byID[n.ID], byAddr[ap] = i, i
		m.nodes[n.ID], m.addrs[n.ID] = n, ap
		m.ids = append(m.ids, n.ID)
	}
	slices.Sort(m.ids)
	if c.DataPlane != "" {
		ap, err := netip.ParseAddrPort(c.DataPlane)
		if err != nil {
			return nil, fmt.Errorf("dataplane: %q: want IP:port", c.DataPlane)
		}
		if j, dup := byAddr[ap]; dup {
			return nil, fmt.Errorf("dataplane: %s duplicates nodes[%d].addr", ap, j)
		}
		m.dp = ap
	}
	np := 1 << c.PartitionBits
	m.placed = make([][]wire.NodeID, np)
	n := len(m.ids)
	for p := range np {
		ch := make([]wire.NodeID, c.Replicas)
		for i := range ch {
			ch[i] = m.ids[(p+i)%n]
		}
		m.placed[p] = ch
	}
	for p, ch := range c.Chains {
		if int(p) >= np {
			return nil, fmt.Errorf("chains.%d: no partition %d of %d", p, p, np)
		}
		if len(ch) != c.Replicas {
			return nil, fmt.Errorf("chains.%d: %v: %d members, want replicas (%d)", p, ch, len(ch), c.Replicas)
		}
		for i, id := range ch {
			if _, ok := m.nodes[id]; !ok {
				return nil, fmt.Errorf("chains.%d[%d]: %d is not in nodes", p, i, id)
			}
			if j := slices.Index(ch, id); j < i {
				return nil, fmt.Errorf("chains.%d[%d]: %d duplicates chains.%d[%d]", p, i, id, p, j)
			}
		}
		m.placed[p] = slices.Clone(ch)
	}
	for p, id := range c.Spares {
		if int(p) >= np || !slices.Contains(m.placed[p], id) {
			return nil, fmt.Errorf("spares.%d: %d is not in the partition's placement", p, id)
		}
	}
	for p, members := range c.Joined {
		for id, e := range members {
			if int(p) >= np || e > c.Epoch {
				return nil, fmt.Errorf("joined.%d.%d: %d: want a partition below %d and an epoch up to %d", p, id, e, np, c.Epoch)
			}
		}
	}
	if err := m.reconfigure(); err != nil {
		return nil, err
	}
	m.filling = make([][]wire.NodeID, np)
	for id, parts := range c.Filling {
		for _, p := range parts {
			if int(p) >= np || !slices.Contains(m.chains[p], id) {
				return nil, fmt.Errorf("filling.%d: %d: the node is not in the partition's chain", id, p)
			}
			if !slices.Contains(m.filling[p], id) {
				m.filling[p] = append(m.filling[p], id)
			}
		}
	}
	for p, ids := range m.filling {
		slices.SortFunc(ids, func(a, b wire.NodeID) int { return m.Position(uint32(p), a) - m.Position(uint32(p), b) })
		// A member still filling holds only part of the chain's data: a
		// chain of filling members alone would serve what it never copied.
		// Its last caught-up member stays in it, down or not (CRAQ: the
		// chain waits for it rather than lose what only it holds).
		if len(ids) > 0 && len(ids) == len(m.chains[p]) {
			return nil, fmt.Errorf("down: partition %d would keep only members still filling (%v), which hold part of its data", p, ids)
		}
	}
	return m, nil
}

// next is the layout c (m's configuration, changed) at the epoch after m's,
// with every member that joins a chain dated to that epoch (Joined), and
// the dates of members that leave one dropped.
func (m *Map) next(c Config) (*Map, error) {
	c.Epoch = m.cfg.Epoch + 1
	nm, err := New(c)
	if err != nil {
		return nil, err
	}
	for p, ch := range nm.chains {
		old := m.Chain(uint32(p))
		members := nm.cfg.Joined[uint32(p)]
		for id := range members {
			if !slices.Contains(ch, id) {
				delete(members, id)
			}
		}
		for _, id := range ch {
			if slices.Contains(old, id) {
				continue
			}
			if members == nil {
				members = map[wire.NodeID]uint32{}
			}
			members[id] = c.Epoch
		}
		if len(members) == 0 {
			delete(nm.cfg.Joined, uint32(p))
			continue
		}
		if nm.cfg.Joined == nil {
			nm.cfg.Joined = map[uint32]map[wire.NodeID]uint32{}
		}
		nm.cfg.Joined[uint32(p)] = members
	}
	return nm, nil
}

// Joined is the epoch at which node id last joined partition p's chain (0:
// it is in the chain as placed, or not in it). A node that held the chain
// at an epoch at or after it, and holds it in m, was in it throughout: no
// write committed on it without the node.
func (m *Map) Joined(p uint32, id wire.NodeID) uint32 { return m.cfg.Joined[p][id] }

// reconfigure derives the chains from the placement: members in Down are
// spliced out, members in Tails move to the end, in Tails' order, and a
// partition's spare comes last.
func (m *Map) reconfigure() error {
	for _, l := range []struct {
		field string
		ids   []wire.NodeID
	}{{"down", m.cfg.Down}, {"tails", m.cfg.Tails}} {
		for i, id := range l.ids {
			if _, ok := m.nodes[id]; !ok {
				return fmt.Errorf("%s[%d]: %d is not in nodes", l.field, i, id)
			}
		}
	}
	for i, id := range m.cfg.Tails {
		if slices.Contains(m.cfg.Down, id) {
			return fmt.Errorf("tails[%d]: %d is down too", i, id)
		}
	}
	m.chains = make([][]wire.NodeID, len(m.placed))
	for p, placed := range m.placed {
		spare, hasSpare := m.cfg.Spares[uint32(p)]
		last := func(id wire.NodeID) bool { return hasSpare && id == spare }
		ch := make([]wire.NodeID, 0, len(placed))
		for _, id := range placed {
			if !slices.Contains(m.cfg.Down, id) && !slices.Contains(m.cfg.Tails, id) && !last(id) {
				ch = append(ch, id)
			}
		}
		for _, id := range m.cfg.Tails {
			if slices.Contains(placed, id) && !last(id) {
				ch = append(ch, id)
			}
		}
		if hasSpare && !slices.Contains(m.cfg.Down, spare) {
			ch = append(ch, spare)
		}
		if len(ch) == 0 {
			return fmt.Errorf("down: every member of partition %d's chain is down", p)
		}
		m.chains[p] = ch
	}
	return nil
}

// Without returns the next layout (epoch+1) with node id spliced out of
// every chain it is in, head, middle or tail. It fails if that leaves a
// chain with no member.
func (m *Map) Without(id wire.NodeID) (*Map, error) {
	if _, ok := m.nodes[id]; !ok {
		return nil, fmt.Errorf("layout: node %d is not in the node table", id)
	}
	if slices.Contains(m.cfg.Down, id) {
		return nil, fmt.Errorf("layout: node %d is down already", id)
	}
	c := m.Config()
	c.Tails = slices.DeleteFunc(c.Tails, func(x wire.NodeID) bool { return x == id })
	c.Down = append(c.Down, id)
	delete(c.Filling, id) // WithTail fills its chains again
	return m.next(c)
}

// WithTail returns the next layout (epoch+1) with a node that was spliced
// out back in every chain of its placement, as the tail: it holds the
// committed versions only once it has caught up, and a tail commits what
// it receives. Like a spare, it fills each chain it shares with another
// member (Filling) until Filled: it serves none of their reads before.
func (m *Map) WithTail(id wire.NodeID) (*Map, error) {
	if !slices.Contains(m.cfg.Down, id) {
		return nil, fmt.Errorf("layout: node %d is not down", id)
	}
	c := m.Config()
	c.Down = slices.DeleteFunc(c.Down, func(x wire.NodeID) bool { return x == id })
	c.Tails = append(c.Tails, id)
	back, err := New(c)
	if err != nil {
		return nil, err
	}
	var parts []uint32
	for p, ch := range back.chains {
		if len(ch) > 1 && slices.Contains(ch, id) {
			parts = append(parts, uint32(p))
		}
	}
	c = back.Config()
	c.Filling = withFilling(c.Filling, id, parts...)
	return m.next(c)
}

// withFilling is f with node id filling parts too.
func withFilling(f map[wire.NodeID][]uint32, id wire.NodeID, parts ...uint32) map[wire.NodeID][]uint32 {
	if len(parts) == 0 {
		return f
	}
	if f == nil {
		f = map[wire.NodeID][]uint32{}
	}
	for _, p := range parts {
		if !slices.Contains(f[id], p) {
			f[id] = append(f[id], p)
		}
	}
	return f
}

// ErrNoSpare is Replace's error when no chain of the node can take a spare.
var ErrNoSpare = errors.New("layout: no spare")

// Replace returns the next layout (epoch+1) in which node id, down, is
// replaced in every chain of its placement by a spare, and the number of
// chains it was replaced in. A chain's spare is a node that is not down
// and not in the chain's placement: the one in the fewest chains so far
// (counting the ones this call assigns), ties going to the first after id
// on the ring. The spare takes id's slot in the placement (an override in
// Chains, so no other member changes tree) and the chain's tail (Spares):
// it holds nothing of the partition yet, and a tail catches up from its
// predecessor before it serves reads. Chains with no candidate keep id
// spliced out; if no chain has one, Replace fails with ErrNoSpare.
func (m *Map) Replace(id wire.NodeID) (*Map, int, error) {
	if !slices.Contains(m.cfg.Down, id) {
		return nil, 0, fmt.Errorf("layout: node %d is not down", id)
	}
	load := map[wire.NodeID]int{}
	var ring []wire.NodeID // the live nodes, from the one after id
	start, _ := slices.BinarySearch(m.ids, id)
	for i := range m.ids {
		n := m.ids[(start+1+i)%len(m.ids)]
		if n != id && !slices.Contains(m.cfg.Down, n) {
			ring = append(ring, n)
			load[n] = 0
		}
	}
	for _, ch := range m.chains {
		for _, n := range ch {
			if _, live := load[n]; live {
				load[n]++
			}
		}
	}
	c := m.Config()
	if c.Chains == nil {
		c.Chains = map[uint32][]wire.NodeID{}
	}
	if c.Spares == nil {
		c.Spares = map[uint32]wire.NodeID{}
	}
	replaced := 0
	for p, placed := range m.placed {
		j := slices.Index(placed, id)
		if j < 0 {
			continue
		}
		best := wire.NodeID(0)
		for _, n := range ring {
			if !slices.Contains(placed, n) && (best == 0 || load[n] < load[best]) {
				best = n
			}
		}
		if best == 0 {
			continue
		}
		ch := slices.Clone(placed)
		ch[j] = best
		c.Chains[uint32(p)] = ch
		c.Spares[uint32(p)] = best
		c.Filling = withFilling(c.Filling, best, uint32(p))
		load[best]++
		replaced++
	}
	if replaced == 0 {
		return nil, 0, fmt.Errorf("%w for node %d: every live node is in each of its chains", ErrNoSpare, id)
	}
	nm, err := m.next(c)
	return nm, replaced, err
}

// Filled returns the next layout (epoch+1) in which each node of done has
// caught up with the chains listed for it: it is a fresh replica of each
// and back in its read set. Chains a node is not filling are ignored; if
// none of done is, Filled returns m itself.
func (m *Map) Filled(done map[wire.NodeID][]uint32) (*Map, error) {
	c := m.Config()
	changed := false
	for id, parts := range done {
		left := slices.DeleteFunc(c.Filling[id], func(p uint32) bool { return slices.Contains(parts, p) })
		if len(left) == len(m.cfg.Filling[id]) {
			continue
		}
		changed = true
		if c.Filling[id] = left; len(left) == 0 {
			delete(c.Filling, id)
		}
	}
	if !changed {
		return m, nil
	}
	return m.next(c)
}

// FillingIn is the members of partition p's chain still filling it, in
// chain order: they take its writes but serve none of its reads.
func (m *Map) FillingIn(p uint32) []wire.NodeID {
	if int(p) >= len(m.filling) {
		return nil
	}
	return slices.Clone(m.filling[p])
}

// FillingParts lists the partitions with a member still filling, in order.
func (m *Map) FillingParts() []uint32 {
	var out []uint32
	for p, ids := range m.filling {
		if len(ids) > 0 {
			out = append(out, uint32(p))
		}
	}
	return out
}

// Readable reports whether node id may serve reads of partition p: a chain
// member that is not filling it.
func (m *Map) Readable(p uint32, id wire.NodeID) bool {
	return m.Position(p, id) >= 0 && !slices.Contains(m.filling[p], id)
}

// ReadSet is the members of partition p's chain that serve its reads, in
// chain order: the chain less the members filling it (the whole chain if
// every member is).
func (m *Map) ReadSet(p uint32) []wire.NodeID {
	ch := m.Chain(p)
	if int(p) >= len(m.filling) || len(m.filling[p]) == 0 || len(m.filling[p]) == len(ch) {
		return ch
	}
	return slices.DeleteFunc(slices.Clone(ch), func(id wire.NodeID) bool { return slices.Contains(m.filling[p], id) })
}

// ReadWeights is an even split of partition p's reads over its chain, in
// chain order, with no share for a member filling it (ReadSet).
func (m *Map) ReadWeights(p uint32) []uint32 {
	ch := m.Chain(p)
	w := make([]uint32, len(ch))
	for i := range w {
		w[i] = 1
	}
	return m.ReadWeightsOver(p, ch, w)
}

// ReadWeightsOver is w, weights over locs (partition p's chain, or a
// LocationList that starts with it), less the shares of the members
// filling p's chain: they take the writes but are no fresh replicas
// (ReadSet). If that leaves no weight, the other locations split evenly;
// if every location fills, w is left as it is.
func (m *Map) ReadWeightsOver(p uint32, locs []wire.NodeID, w []uint32) []uint32 {
	if int(p) >= len(m.filling) || len(m.filling[p]) == 0 || len(w) != len(locs) {
		return w
	}
	filling := func(i int) bool { return slices.Contains(m.filling[p], locs[i]) }
	if !slices.ContainsFunc(locs, func(id wire.NodeID) bool { return !slices.Contains(m.filling[p], id) }) {
		return w
	}
	out := slices.Clone(w)
	left := false
	for i := range out {
		if filling(i) {
			out[i] = 0
		}
		left = left || out[i] > 0
	}
	if !left {
		for i := range out {
			if !filling(i) {
				out[i] = 1
			}
		}
	}
	return out
}

// Placed is the number of partitions whose placement holds node id (down
// or not): those a spare could take over.
func (m *Map) Placed(id wire.NodeID) int {
	n := 0
	for _, placed := range m.placed {
		if slices.Contains(placed, id) {
			n++
		}
	}
	return n
}

// Spare is the spare at the tail of partition p's chain, if it has one
// that is not down.
func (m *Map) Spare(p uint32) (wire.NodeID, bool) {
	id, ok := m.cfg.Spares[p]
	return id, ok && !slices.Contains(m.cfg.Down, id)
}

// Down lists the nodes spliced out of every chain.
func (m *Map) Down() []wire.NodeID { return slices.Clone(m.cfg.Down) }

// Slot is node id's index in partition p's placement, or -1: the tree in
// which the node keeps the partition, whatever its position in the chain.
func (m *Map) Slot(p uint32, id wire.NodeID) int {
	if int(p) >= len(m.placed) {
		return -1
	}
	return slices.Index(m.placed[p], id)
}

// clone copies c deeply, so that a Map shares nothing with its caller.
func (c Config) clone() Config {
	c.Nodes = slices.Clone(c.Nodes)
	c.Down, c.Tails = slices.Clone(c.Down), slices.Clone(c.Tails)
	for i := range c.Nodes {
		c.Nodes[i].MAC = slices.Clone(c.Nodes[i].MAC)
	}
	if c.Chains != nil {
		chains := make(map[uint32][]wire.NodeID, len(c.Chains))
		for p, ch := range c.Chains {
			chains[p] = slices.Clone(ch)
		}
		c.Chains = chains
	}
	c.Spares = maps.Clone(c.Spares)
	if c.Joined != nil {
		joined := make(map[uint32]map[wire.NodeID]uint32, len(c.Joined))
		for p, members := range c.Joined {
			joined[p] = maps.Clone(members)
		}
		c.Joined = joined
	}
	if c.Filling != nil {
		filling := make(map[wire.NodeID][]uint32, len(c.Filling))
		for id, parts := range c.Filling {
			filling[id] = slices.Clone(parts)
		}
		c.Filling = filling
	}
	return c
}

// Config returns a copy of the layout's configuration, defaults filled in.
// Changing the copy and passing it to New derives a later layout.
func (m *Map) Config() Config { return m.cfg.clone() }

// Marshal returns the layout as YAML that Parse reads back, written as the
// examples are: a node and a chain per line.
func (m *Map) Marshal() ([]byte, error) {
	var doc yaml.Node
	if err := doc.Encode(m.cfg); err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		switch v := doc.Content[i+1]; doc.Content[i].Value {
		case "nodes":
			for _, n := range v.Content {
				n.Style = yaml.FlowStyle
			}
		case "chains", "filling":
			for j := 1; j < len(v.Content); j += 2 {
				v.Content[j].Style = yaml.FlowStyle
			}
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Epoch is the chain-configuration epoch.
func (m *Map) Epoch() uint32 { return m.cfg.Epoch }

// Bits is log2 of the partition count.
func (m *Map) Bits() uint { return m.cfg.PartitionBits }

// Partitions is the partition count.
func (m *Map) Partitions() int { return len(m.chains) }

// R is the chain length.
func (m *Map) R() int { return m.cfg.Replicas }

// Nodes lists the node ids in ascending order.
func (m *Map) Nodes() []wire.NodeID { return slices.Clone(m.ids) }

// Node is a node's row of the node table.
func (m *Map) Node(id wire.NodeID) (Node, bool) {
	n, ok := m.nodes[id]
	n.MAC = slices.Clone(n.MAC)
	return n, ok
}

// Addr is a node's address.
func (m *Map) Addr(id wire.NodeID) (netip.AddrPort, bool) {
	a, ok := m.addrs[id]
	return a, ok
}

// DataPlane is the data plane's address, invalid when none is configured.
func (m *Map) DataPlane() netip.AddrPort { return m.dp }

// Partition is the partition of a key hash.
func (m *Map) Partition(h wire.KeyHash) uint32 { return h.Partition(m.cfg.PartitionBits) }

// Chain is partition p's chain, head first. The slice must not be modified.
func (m *Map) Chain(p uint32) []wire.NodeID {
	if int(p) >= len(m.chains) {
		return nil
	}
	return m.chains[p]
}

// Chains is every partition's chain, by partition. The chains must not be
// modified.
func (m *Map) Chains() [][]wire.NodeID { return slices.Clone(m.chains) }

// ChainOf is the chain of a key hash.
func (m *Map) ChainOf(h wire.KeyHash) []wire.NodeID { return m.Chain(m.Partition(h)) }

// Position is the index of node id in partition p's chain, or -1.
func (m *Map) Position(p uint32, id wire.NodeID) int {
	return slices.Index(m.Chain(p), id)
}
