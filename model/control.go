package model

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/wire"
)

// The control API. Each method takes the switch's mutex for the time of one
// directory call, so it is safe to call while Run serves. These are the calls
// that the P4Runtime server translates table writes into.

// SetPartition installs partition p's chain and bucket table (nil buckets
// spread evenly over the chain).
func (s *Switch) SetPartition(p uint32, chain []wire.NodeID, buckets []uint8) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.SetPartition(p, chain, buckets)
}

// SetPartitionBuckets replaces partition p's bucket table.
func (s *Switch) SetPartitionBuckets(p uint32, buckets []uint8) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.SetPartitionBuckets(p, buckets)
}

// Partition returns partition p and whether it has a chain.
func (s *Switch) Partition(p uint32) (directory.Partition, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.Partition(p)
}

// Insert promotes a key (see directory.Directory.Insert) and returns its
// slot index.
func (s *Switch) Insert(h wire.KeyHash, locs []wire.NodeID, r int, ver uint64, buckets []uint8) (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.Insert(h, locs, r, ver, buckets)
}

// Evict removes a key from the directory.
func (s *Switch) Evict(h wire.KeyHash) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.Evict(h)
}

// SetSlotBuckets replaces a key's bucket table over its LocationList.
func (s *Switch) SetSlotBuckets(h wire.KeyHash, buckets []uint8) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.SetSlotBuckets(h, buckets)
}

// Lookup returns a copy of a key's slot.
func (s *Switch) Lookup(h wire.KeyHash) (directory.Slot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.Lookup(h)
}

// NodeStats returns what the switch has learnt of node n from its replies.
func (s *Switch) NodeStats(n wire.NodeID) directory.NodeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.Node(n)
}

// SetNodeStats seeds node n's learnt stats.
func (s *Switch) SetNodeStats(n wire.NodeID, st directory.NodeStats) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.SetNodeStats(n, st)
}

// SketchEstimate is the count-min estimate of misses for h.
func (s *Switch) SketchEstimate(h wire.KeyHash) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.SketchEstimate(h)
}

// SketchCell is one cell of the miss sketch (row r, column c), as a P4
// counter cell.
func (s *Switch) SketchCell(r int, c uint32) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.SketchCell(r, c)
}

// ResetSketch clears the miss sketch.
func (s *Switch) ResetSketch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dir.ResetSketch()
}

// Partitions is the partition count P.
func (s *Switch) Partitions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.Partitions()
}

// DirectoryConfig is the directory's configuration with defaults filled in.
func (s *Switch) DirectoryConfig() directory.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.Config()
}

// Counters returns the directory's counters and the model's.
func (s *Switch) Counters() (directory.Counters, Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.PendingEvicted = s.pend.evicted
	return s.dir.Counters(), st
}

// SlotEntry is a directory slot and its index.
type SlotEntry struct {
	Index uint32
	Slot  directory.Slot
}

// NodeEntry is a registered node and what the switch has learnt of it.
type NodeEntry struct {
	Node
	Stats directory.NodeStats
}

// Snapshot is a consistent copy of the switch's state.
type Snapshot struct {
	Counters directory.Counters
	Stats    Stats
	Pending  int         // requests in flight
	Slots    []SlotEntry // in slot order
	Nodes    []NodeEntry // by id
}

// Snapshot copies counters, slots and node stats under one lock.
func (s *Switch) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{Counters: s.dir.Counters(), Stats: s.stats, Pending: s.pend.live}
	snap.Stats.PendingEvicted = s.pend.evicted
	snap.Slots = make([]SlotEntry, 0, s.dir.Len())
	s.dir.Each(func(i uint32, sl *directory.Slot) {
		snap.Slots = append(snap.Slots, SlotEntry{Index: i, Slot: *sl})
	})
	for _, n := range s.nodesLocked() {
		snap.Nodes = append(snap.Nodes, NodeEntry{Node: n, Stats: s.dir.Node(n.ID)})
	}
	return snap
}

// Nodes returns the node table, by id.
func (s *Switch) Nodes() []Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodesLocked()
}

func (s *Switch) nodesLocked() []Node {
	var out []Node
	for id, a := range s.nodes {
		if a != nil {
			out = append(out, Node{ID: wire.NodeID(id), Addr: a.AddrPort()})
		}
	}
	return out
}

// udpAddr checks that ap can be sent to from the switch's socket.
func (s *Switch) udpAddr(ap netip.AddrPort) (*net.UDPAddr, udpbatch.Peer, error) {
	a := ap.Addr()
	switch {
	case !ap.IsValid() || ap.Port() == 0:
		return nil, udpbatch.Peer{}, fmt.Errorf("model: address %s: want IP:port with a non-zero port", ap)
	case s.v4 && !a.Unmap().Is4():
		return nil, udpbatch.Peer{}, fmt.Errorf("model: address %s: the switch serves on IPv4 (%s)", ap, s.addr)
	case !s.v4 && (a.Is4() || a.Is4In6()):
		return nil, udpbatch.Peer{}, fmt.Errorf("model: address %s: the switch serves on IPv6 (%s)", ap, s.addr)
	}
	if s.v4 {
		ap = netip.AddrPortFrom(a.Unmap(), ap.Port())
	}
	return net.UDPAddrFromAddrPort(ap), udpbatch.PeerOf(ap, s.v4), nil
}

// SetNodes replaces the node table. Node ids must be distinct and below the
// directory's MaxNodes, and addresses distinct. Datagrams from a node's
// address enter on PortOf(id), a storage port.
func (s *Switch) SetNodes(nodes []Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs := make([]*net.UDPAddr, len(nodes))
	peers := make([]udpbatch.Peer, len(nodes))
	seenID := make(map[wire.NodeID]bool, len(nodes))
	seenAddr := make(map[udpbatch.Peer]wire.NodeID, len(nodes))
	for i, n := range nodes {
		if int(n.ID) >= len(s.nodes) {
			return fmt.Errorf("model: node id %d: want below %d", n.ID, len(s.nodes))
		}
		if seenID[n.ID] {
			return fmt.Errorf("model: node id %d listed twice", n.ID)
		}
		a, p, err := s.udpAddr(n.Addr)
		if err != nil {
			return fmt.Errorf("node %d: %w", n.ID, err)
		}
		if other, ok := seenAddr[p]; ok {
			return fmt.Errorf("model: nodes %d and %d share address %s", other, n.ID, n.Addr)
		}
		seenID[n.ID], seenAddr[p] = true, n.ID
		addrs[i], peers[i] = a, p
	}
	for id, a := range s.nodes {
		if a != nil {
			s.dir.SetPort(PortOf(wire.NodeID(id)), directory.PortClient)
			s.nodes[id] = nil
		}
	}
	clear(s.byAddr)
	for i, n := range nodes {
		s.register(n.ID, addrs[i], peers[i])
	}
	return nil
}

// AddNode registers a node, or moves a registered one to a new address.
func (s *Switch) AddNode(n Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(n.ID) >= len(s.nodes) {
		return fmt.Errorf("model: node id %d: want below %d", n.ID, len(s.nodes))
	}
	a, p, err := s.udpAddr(n.Addr)
	if err != nil {
		return fmt.Errorf("node %d: %w", n.ID, err)
	}
	if other, ok := s.byAddr[p]; ok && other != n.ID {
		return fmt.Errorf("model: node %d already has address %s", other, n.Addr)
	}
	if old := s.nodes[n.ID]; old != nil {
		delete(s.byAddr, udpbatch.PeerOf(old.AddrPort(), s.v4))
	}
	s.register(n.ID, a, p)
	return nil
}

func (s *Switch) register(id wire.NodeID, a *net.UDPAddr, p udpbatch.Peer) {
	s.nodes[id] = a
	s.byAddr[p] = id
	s.dir.SetPort(PortOf(id), directory.PortStorage)
}

// SetMulticast replaces the VSB multicast group (the agents' addresses).
func (s *Switch) SetMulticast(group []netip.AddrPort) error {
	out := make([]*net.UDPAddr, 0, len(group))
	for _, ap := range group {
		a, _, err := s.udpAddr(ap)
		if err != nil {
			return fmt.Errorf("multicast: %w", err)
		}
		out = append(out, a)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.group = out
	return nil
}
