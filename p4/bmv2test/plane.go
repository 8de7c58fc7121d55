//go:build linux

// Package bmv2test runs netdir's P4 program (p4/v1model/netdir.p4, compiled
// to p4/build/) on BMv2 simple_switch_grpc and holds it to the shared vector
// suite: Plane implements vectors.Plane by programming the switch over
// P4Runtime and injecting packets through veth pairs in a network namespace.
//
// What is observed how:
//   - tables, the clock, multicast: P4Runtime writes;
//   - hit/miss/reply/VSB/pass/switched counts, drop reasons, slot hits and the
//     miss sketch: P4Runtime counter reads (the controller's way);
//   - ver_next, ver_done, fresh, the stamp floor, node latency and load:
//     BMv2's Thrift register API, since BMv2/PI implements no P4Runtime
//     register access;
//   - verdicts: where the packet left. A Forward leaves on NodePort with node
//     n's addresses; ToClient and Pass leave on UplinkPort by plain routing
//     and are told apart by the events counter; a Multicast leaves on both
//     agent ports; a Drop leaves nowhere and bumps the drops counter at the
//     reason's index.
//
// The Go core's LocationList, chain and bucket tables are control-plane state:
// a shadow directory.Directory validates the control-plane calls (with the
// core's errors) and allocates slot indices the way the core does.
package bmv2test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/directory/vectors"
	"github.com/netdir/netdir/wire"
)

// Switch ports that the runner reserves; vector ports are taken from the
// suite and must stay below them.
const (
	NodePort   = 500 // every storage node's address resolves here
	UplinkPort = 501 // the default route: replies to clients, node ops
	AgentPort1 = 502 // the VSB multicast group
	AgentPort2 = 503
	DeviceID   = 1
)

// P4 object names in the P4Info (see p4/README.md).
const (
	pfx             = "NetdirIngress.netdir."
	tSlots          = pfx + "directory.slots"
	aSlotHit        = pfx + "directory.hit"
	tPartitions     = pfx + "partition.partitions"
	aSetPartition   = pfx + "partition.set_partition"
	tPartBucketsA   = pfx + "partition.buckets_a"
	tPartBucketsB   = pfx + "partition.buckets_b"
	aSetChainA      = pfx + "partition.set_chain_a"
	aSetChainB      = pfx + "partition.set_chain_b"
	tSlotBucketsA   = pfx + "split.slot_buckets_a"
	tSlotBucketsB   = pfx + "split.slot_buckets_b"
	aSetLocA        = pfx + "split.set_loc_a"
	aSetLocB        = pfx + "split.set_loc_b"
	tStoragePorts   = pfx + "vsb_filter.storage_ports"
	aStoragePort    = pfx + "vsb_filter.storage_port"
	tMembers        = pfx + "vsb_filter.members"
	aMember         = pfx + "vsb_filter.member"
	tScoreA         = pfx + "fine_score.score_a"
	tScoreB         = pfx + "fine_score.score_b"
	aQuotaA         = pfx + "fine_score.set_quota_a"
	aQuotaB         = pfx + "fine_score.set_quota_b"
	tNodeAddr       = pfx + "node_addr.node_addr"
	aSetNodeAddr    = pfx + "node_addr.set_node_addr"
	tNodeAddrB      = pfx + "node_addr.node_addr_b"
	aSetNodeAddrB   = pfx + "node_addr.set_node_addr_b"
	tRoutes         = pfx + "forwarding.routes_v4"
	aRoute          = pfx + "forwarding.route"
	tClock          = "NetdirIngress.clock.clock"
	aFixedClock     = "NetdirIngress.clock.fixed_clock"
	cEvents         = pfx + "events"
	cSwitched       = pfx + "switched"
	cDrops          = pfx + "drops"
	cSlotHits       = "NetdirIngress.tail.hot_keys.slot_hits"
	cSketchRow      = "NetdirIngress.tail.hot_keys.sketch_row" // + 0..3
	rVerNext        = pfx + "coherence.ver_next"
	rVerDone        = pfx + "coherence.ver_done"
	rFresh          = pfx + "coherence.fresh"
	rGen            = pfx + "coherence.gen"
	rFloor          = pfx + "coherence.stamp_floor"
	rLatency        = pfx + "node_stats.latency"
	rLoad           = pfx + "node_stats.load"
	vsbGroup        = 1
	maxNodes        = 4096
	p4Slots         = 4096
	p4Partitions    = 1024
	eventHit        = 0
	eventMiss       = 1
	eventReply      = 2
	eventVSB        = 3
	eventPass       = 4
	reasonNoNodeAdr = 11
)

var (
	switchMAC = net.HardwareAddr{0x02, 0x4e, 0x44, 0xff, 0xff, 0xfe}
	uplinkMAC = net.HardwareAddr{0x02, 0x4e, 0x44, 0xff, 0xff, 0xfd}
	clientIP  = net.IPv4(10, 9, 0, 1).To4()
	serviceIP = net.IPv4(10, 255, 0, 1).To4()
)

func nodeMAC(n wire.NodeID) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0x4e, 0x44, 0x00, byte(n >> 8), byte(n)}
}

func nodeIP(n wire.NodeID) net.IP { return net.IPv4(10, 1, byte(n>>8), byte(n)).To4() }

// Options configure a Plane.
type Options struct {
	Binary   string   // simple_switch_grpc
	BuildDir string   // holds netdir.json and netdir.p4info.txtpb
	Ports    []uint32 // vector ports that need a veth
	WorkDir  string   // for the gRPC socket and the switch log
	Verbose  bool     // BMv2 debug log to the log file
}

// Plane is netdir's P4 program on BMv2, as a vectors.Plane.
type Plane struct {
	opt     Options
	ns      *Netns
	sw      *Switch
	rt      *Client
	thrift  *Thrift
	info    *P4Info
	json    []byte
	ctx     context.Context
	regName map[string]string // short name -> BMv2 JSON register name

	shadow  *directory.Directory
	cfg     directory.Config
	slotIdx map[wire.KeyHash]uint32
	slotGen map[wire.KeyHash]uint32 // the generation in each key's directory entry
	gen     uint32                  // the last generation handed out (never reset)
	parts   map[uint32]bool
	nodes   map[wire.NodeID]bool
	storage map[uint32]bool
	now     uint64
	nowSet  bool
	// mcInstalled: the VSB group is in the PRE (see Reset).
	mcInstalled bool
}

var _ vectors.Plane = (*Plane)(nil)

// Start builds the namespace, starts the switch and connects to it.
func Start(opt Options) (*Plane, error) {
	p := &Plane{opt: opt, ctx: context.Background()}
	var err error
	if p.info, err = LoadP4Info(filepath.Join(opt.BuildDir, "netdir.p4info.txtpb")); err != nil {
		return nil, err
	}
	if p.json, err = os.ReadFile(filepath.Join(opt.BuildDir, "netdir.json")); err != nil {
		return nil, err
	}
	if p.regName, err = registerNames(p.json); err != nil {
		return nil, err
	}
	ports := map[uint32]bool{NodePort: true, UplinkPort: true, AgentPort1: true, AgentPort2: true}
	for _, x := range opt.Ports {
		if x >= NodePort {
			return nil, fmt.Errorf("vector port %d collides with the runner's ports (>= %d)", x, NodePort)
		}
		ports[x] = true
	}
	var list []uint32
	for x := range ports {
		list = append(list, x)
	}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	if p.ns, err = NewNetns(fmt.Sprintf("ndbmv2-%d", os.Getpid()), list); err != nil {
		return nil, err
	}
	sock := filepath.Join(opt.WorkDir, "p4rt.sock")
	if p.sw, err = StartSwitch(p.ns, opt.Binary, DeviceID, "unix:"+sock, 9090,
		filepath.Join(opt.WorkDir, "bmv2.log"), opt.Verbose); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	err = waitReady(ctx, 100*time.Millisecond, func() error {
		if p.sw.Exited() {
			return fmt.Errorf("simple_switch_grpc exited: %s", p.sw.LogTail(20))
		}
		if _, err := os.Stat(sock); err != nil {
			return err
		}
		c, err := Dial(ctx, "unix://"+sock, DeviceID)
		if err != nil {
			return err
		}
		p.rt = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("p4runtime: %w", err)
	}
	err = waitReady(ctx, 100*time.Millisecond, func() error {
		return p.ns.Do(func() error {
			conn, err := net.DialTimeout("tcp", "127.0.0.1:9090", time.Second)
			if err != nil {
				return err
			}
			p.thrift = NewThrift(conn)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("thrift: %w", err)
	}
	ok = true
	return p, nil
}

// Close stops the switch and deletes the namespace.
func (p *Plane) Close() {
	if p.thrift != nil {
		p.thrift.Close()
	}
	if p.rt != nil {
		p.rt.Close()
	}
	if p.sw != nil {
		p.sw.Stop()
	}
	if p.ns != nil {
		p.ns.Close()
	}
}

// LogTail is the end of the switch's log, for failure messages.
func (p *Plane) LogTail(n int) string {
	if p.sw == nil {
		return ""
	}
	return p.sw.LogTail(n)
}

// registerNames maps the short names used here (coherence.ver_next, ...) to
// the register array names in the BMv2 JSON, which the Thrift API uses.
func registerNames(js []byte) (map[string]string, error) {
	var doc struct {
		RegisterArrays []struct {
			Name string `json:"name"`
		} `json:"register_arrays"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, want := range []string{rVerNext, rVerDone, rFresh, rGen, rFloor, rLatency, rLoad} {
		for _, r := range doc.RegisterArrays {
			if r.Name == want {
				m[want] = r.Name
			}
		}
		if m[want] == "" {
			return nil, fmt.Errorf("bmv2 json: no register array %q", want)
		}
	}
	return m, nil
}

// Supports: the clock is the `clock` table's fixed_clock, and the sketch is
// four readable counters. Host mode (an agent's view) and the baseline
// policies (pegasus needs a least-loaded scan of up to 32 members) are not in
// the switch program.
func (p *Plane) Supports(feature string) bool {
	switch feature {
	case "clock", "sketch":
		return true
	}
	return false
}

func (p *Plane) write(updates ...*p4.Update) error { return p.rt.Write(p.ctx, updates...) }

func (p *Plane) entry(table string, m []Match, action string, params []Param, prio int32) (*p4.Entity, error) {
	te, err := p.info.Entry(table, m, action, params, prio)
	if err != nil {
		return nil, err
	}
	return TableEntity(te), nil
}

func ex(field string, v uint64) Match { return Match{Field: field, Exact: U64(v)} }
func par(name string, v uint64) Param { return Param{Name: name, Value: U64(v)} }
func parBytes(name string, b []byte) Param {
	return Param{Name: name, Value: Canonical(new(big.Int).SetBytes(b))}
}
func keyMatch(field string, h wire.KeyHash) Match {
	return Match{Field: field, Exact: Canonical(new(big.Int).SetBytes(h[:]))}
}

// Reset pushes the pipeline again (clearing all state on BMv2) and installs
// the fixed entries: fine-score ranges for the window, the default route,
// the VSB multicast group.
func (p *Plane) Reset(cfg directory.Config) error {
	d, err := directory.New(cfg)
	if err != nil {
		return err
	}
	cfg = d.Config()
	if cfg.Mode != directory.ModeToR || cfg.Policy != directory.PolicyNetdir {
		return fmt.Errorf("mode %d policy %s: %w", cfg.Mode, cfg.Policy, vectors.ErrUnsupported)
	}
	if cfg.Slots > p4Slots {
		return fmt.Errorf("%d slots: the P4 directory holds %d: %w", cfg.Slots, p4Slots, vectors.ErrUnsupported)
	}
	if cfg.MaxNodes != maxNodes {
		return fmt.Errorf("max nodes %d: the P4 program learns %d: %w", cfg.MaxNodes, maxNodes, vectors.ErrUnsupported)
	}
	p.shadow, p.cfg = d, cfg
	p.slotIdx = map[wire.KeyHash]uint32{}
	p.slotGen = map[wire.KeyHash]uint32{}
	p.parts = map[uint32]bool{}
	p.nodes = map[wire.NodeID]bool{}
	p.storage = map[uint32]bool{}
	p.nowSet = false
	// A pipeline push resets PI's record of the PRE but not BMv2's groups:
	// delete the group first, or every reset would add another copy of it.
	mc := MulticastEntity(vsbGroup, []uint32{AgentPort1, AgentPort2})
	if p.mcInstalled {
		if err := p.write(Update(p4.Update_DELETE, mc)); err != nil && !containsCode(err, codes.NotFound) {
			return fmt.Errorf("multicast group: %w", err)
		}
		p.mcInstalled = false
	}
	if err := p.rt.SetPipeline(p.ctx, p.info.Info, p.json); err != nil {
		return fmt.Errorf("set pipeline: %w", err)
	}
	var ups []*p4.Update
	for _, tq := range ScoreRanges(cfg.Window) {
		for _, tbl := range [][2]string{{tScoreA, aQuotaA}, {tScoreB, aQuotaB}} {
			e, err := p.entry(tbl[0], []Match{{Field: "latency", Range: true, Low: U64(tq.Lo), High: U64(tq.Hi)}},
				tbl[1], []Param{par("quota", tq.Quota)}, 1)
			if err != nil {
				return err
			}
			ups = append(ups, Update(p4.Update_INSERT, e))
		}
	}
	// The default route: a don't-care LPM field is omitted (P4Runtime 9.1.1).
	e, err := p.entry(tRoutes, nil,
		aRoute, []Param{par("port", UplinkPort), parBytes("smac", switchMAC), parBytes("dmac", uplinkMAC)}, 0)
	if err != nil {
		return err
	}
	ups = append(ups, Update(p4.Update_INSERT, e))
	if err := p.write(ups...); err != nil {
		return err
	}
	if err := p.write(Update(p4.Update_INSERT, mc)); err != nil {
		return fmt.Errorf("multicast group: %w", err)
	}
	p.mcInstalled = true
	return nil
}

// ScoreRange is one entry of the fine-score tables: latencies Lo..Hi (ns)
// have Window/latency = Quota.
type ScoreRange struct{ Lo, Hi, Quota uint64 }

// ScoreRanges realises floor(window / t) for t in 1..window exactly, one
// range per distinct quotient (about 2*sqrt(window) of them). Latencies past
// the window (and 0, "not learnt", decided before the lookup) miss the table
// and score 0.
func ScoreRanges(window uint64) []ScoreRange {
	var out []ScoreRange
	for t := uint64(1); t <= window && t <= 0xffffffff; {
		q := window / t
		hi := min(window/q, 0xffffffff)
		out = append(out, ScoreRange{Lo: t, Hi: hi, Quota: q})
		t = hi + 1
	}
	return out
}

func (p *Plane) ensureNodes(ns []wire.NodeID) error {
	var ups []*p4.Update
	for _, n := range ns {
		if p.nodes[n] {
			continue
		}
		// The same entry in both node-address tables (one per candidate).
		for _, t := range [][2]string{{tNodeAddr, aSetNodeAddr}, {tNodeAddrB, aSetNodeAddrB}} {
			e, err := p.entry(t[0], []Match{ex("node", uint64(n))}, t[1], []Param{
				parBytes("mac", nodeMAC(n)), parBytes("ip", nodeIP(n)), par("udp_port", wire.ServicePort), par("port", NodePort),
			}, 0)
			if err != nil {
				return err
			}
			ups = append(ups, Update(p4.Update_INSERT, e))
		}
		p.nodes[n] = true
	}
	return p.write(ups...)
}

// SetPartition installs partition p's LPM entry and its two bucket tables.
func (p *Plane) SetPartition(part uint32, chain []wire.NodeID, buckets []uint8) error {
	var old []uint8 // the runs installed
	if before, ok := p.shadow.Partition(part); ok && p.parts[part] {
		old = before.Buckets[:]
	}
	if err := p.shadow.SetPartition(part, chain, buckets); err != nil {
		return err
	}
	if part >= p4Partitions {
		return fmt.Errorf("partition %d: the P4 partition table holds %d: %w", part, p4Partitions, vectors.ErrUnsupported)
	}
	pt, _ := p.shadow.Partition(part)
	if err := p.ensureNodes(chain); err != nil {
		return err
	}
	typ := p4.Update_INSERT
	if p.parts[part] {
		typ = p4.Update_MODIFY
	}
	bits := p.cfg.PartitionBits
	var ups []*p4.Update
	e, err := p.entry(tPartitions, []Match{{Field: "hash_top32", Exact: U64(uint64(part) << (32 - bits)), LPM: true, PrefixLen: int32(bits)}},
		aSetPartition, []Param{par("id", uint64(part)), par("r", uint64(pt.R)), par("head", uint64(pt.Chain[0]))}, 0)
	if err != nil {
		return err
	}
	ups = append(ups, Update(typ, e))
	more, err := p.runUpdates([2][2]string{{tPartBucketsA, aSetChainA}, {tPartBucketsB, aSetChainB}},
		ex("partition", uint64(part)), old, pt.Buckets[:], pt.Chain[:pt.R])
	if err != nil {
		return err
	}
	if err := p.write(append(ups, more...)...); err != nil {
		return err
	}
	p.parts[part] = true
	return nil
}

// SetPort marks an ingress port as a storage node's (or not).
func (p *Plane) SetPort(port uint32, kind directory.PortKind) error {
	if port >= 512 {
		return fmt.Errorf("port %d does not fit BMv2's 9-bit ports: %w", port, vectors.ErrUnsupported)
	}
	e, err := p.entry(tStoragePorts, []Match{ex("ingress_port", uint64(port))}, aStoragePort, nil, 0)
	if err != nil {
		return err
	}
	switch {
	case kind == directory.PortStorage && !p.storage[port]:
		p.storage[port] = true
		return p.write(Update(p4.Update_INSERT, e))
	case kind == directory.PortClient && p.storage[port]:
		delete(p.storage, port)
		e.GetTableEntry().Action = nil
		return p.write(Update(p4.Update_DELETE, e))
	}
	return nil
}

// runUpdates are the range entries that take a bucket table's two copies
// (tables[i] = table, action) from old's runs to b's (directory.Runs,
// RunChanges); nodes names each index's node.
func (p *Plane) runUpdates(tables [2][2]string, owner Match, old, b []uint8, nodes []wire.NodeID) ([]*p4.Update, error) {
	del, same, add := directory.RunChanges(old, b)
	var ups []*p4.Update
	for _, step := range []struct {
		runs []directory.Run
		typ  p4.Update_Type
	}{{del, p4.Update_DELETE}, {same, p4.Update_MODIFY}, {add, p4.Update_INSERT}} {
		for _, tbl := range tables {
			for _, r := range step.runs {
				var node uint64
				if int(r.Index) < len(nodes) {
					node = uint64(nodes[r.Index])
				}
				e, err := p.entry(tbl[0], []Match{owner, {Field: "bucket", Range: true, Low: U64(uint64(r.Lo)), High: U64(uint64(r.Hi))}},
					tbl[1], []Param{par("index", uint64(r.Index)), par("node", node)}, 1)
				if err != nil {
					return nil, err
				}
				if step.typ == p4.Update_DELETE {
					e.GetTableEntry().Action = nil
				}
				ups = append(ups, Update(step.typ, e))
			}
		}
	}
	return ups, nil
}

// slotEntries are a slot's entries: its slots, chain and members entries
// (withRest) and its bucket runs (withBuckets: for MODIFY, from the runs of
// oldBuckets to s's).
func (p *Plane) slotEntries(idx uint32, s *directory.Slot, typ p4.Update_Type, withBuckets, withRest bool, oldBuckets []uint8) ([]*p4.Update, error) {
	var ups []*p4.Update
	add := func(table string, m []Match, action string, params []Param) error {
		e, err := p.entry(table, m, action, params, 0)
		if err != nil {
			return err
		}
		if typ == p4.Update_DELETE {
			e.GetTableEntry().Action = nil
		}
		ups = append(ups, Update(typ, e))
		return nil
	}
	if withRest {
		if err := add(tSlots, []Match{keyMatch("keyhash", s.Hash)}, aSlotHit, []Param{
			par("slot", uint64(idx)), par("n", uint64(s.N)), par("r", uint64(s.R)), par("head", uint64(s.Locs[0])),
			par("gen", uint64(p.slotGen[s.Hash])), par("ver", wire.MakeStamp(s.Inc, s.VerDone)),
		}); err != nil {
			return nil, err
		}
		for i := 0; i < int(s.N); i++ {
			if err := add(tMembers, []Match{ex("slot", uint64(idx)), ex("node", uint64(s.Locs[i]))},
				aMember, []Param{par("index", uint64(i))}); err != nil {
				return nil, err
			}
		}
	}
	if withBuckets {
		old, b := []uint8(nil), s.Buckets[:]
		switch typ {
		case p4.Update_DELETE:
			old, b = b, nil
		case p4.Update_MODIFY:
			old = oldBuckets
		}
		more, err := p.runUpdates([2][2]string{{tSlotBucketsA, aSetLocA}, {tSlotBucketsB, aSetLocB}},
			ex("slot", uint64(idx)), old, b, s.Locs[:s.N])
		if err != nil {
			return nil, err
		}
		ups = append(ups, more...)
	}
	return ups, nil
}

// Insert promotes a key with P4Runtime writes only, as a controller does: the
// slot's hit counter is zeroed and its entries installed; the directory
// entry's new generation and seed version make the data plane re-seed the
// slot's registers (ver_next, ver_done, fresh) on its first packet.
func (p *Plane) Insert(h wire.KeyHash, locs []wire.NodeID, r int, ver uint64, buckets []uint8) error {
	idx, err := p.shadow.Insert(h, locs, r, ver, buckets)
	if err != nil {
		return err
	}
	p.slotIdx[h] = idx
	p.gen++
	p.slotGen[h] = p.gen
	s, _ := p.shadow.Lookup(h)
	if err := p.ensureNodes(locs); err != nil {
		return err
	}
	c, err := p.info.Counter(cSlotHits)
	if err != nil {
		return err
	}
	ups := []*p4.Update{Update(p4.Update_MODIFY, CounterEntity(c.Preamble.Id, int64(idx), 0, true))}
	more, err := p.slotEntries(idx, &s, p4.Update_INSERT, true, true, nil)
	if err != nil {
		return err
	}
	return p.write(append(ups, more...)...)
}

// Evict deletes a key's entries.
func (p *Plane) Evict(h wire.KeyHash) error {
	s, ok := p.shadow.Lookup(h)
	if err := p.shadow.Evict(h); err != nil {
		return err
	}
	if !ok {
		return nil
	}
	idx := p.slotIdx[h]
	ups, err := p.slotEntries(idx, &s, p4.Update_DELETE, true, true, nil)
	delete(p.slotIdx, h)
	delete(p.slotGen, h)
	if err != nil {
		return err
	}
	return p.write(ups...)
}

// SetSlotBuckets rewrites a slot's two bucket tables.
func (p *Plane) SetSlotBuckets(h wire.KeyHash, buckets []uint8) error {
	before, _ := p.shadow.Lookup(h)
	if err := p.shadow.SetSlotBuckets(h, buckets); err != nil {
		return err
	}
	s, _ := p.shadow.Lookup(h)
	ups, err := p.slotEntries(p.slotIdx[h], &s, p4.Update_MODIFY, true, false, before.Buckets[:])
	if err != nil {
		return err
	}
	return p.write(ups...)
}

// SetNodeStats seeds a node's latency and load registers over Thrift.
func (p *Plane) SetNodeStats(n wire.NodeID, st directory.NodeStats) error {
	if err := p.shadow.SetNodeStats(n, st); err != nil {
		return err
	}
	if err := p.thrift.RegisterWrite(p.regName[rLatency], int(n), st.Latency); err != nil {
		return err
	}
	return p.thrift.RegisterWrite(p.regName[rLoad], int(n), uint64(st.Load))
}

// Node reads a node's latency and load registers over Thrift.
func (p *Plane) Node(n wire.NodeID) (directory.NodeStats, error) {
	if int(n) >= maxNodes {
		return directory.NodeStats{}, nil
	}
	lat, err := p.thrift.RegisterRead(p.regName[rLatency], int(n))
	if err != nil {
		return directory.NodeStats{}, err
	}
	load, err := p.thrift.RegisterRead(p.regName[rLoad], int(n))
	if err != nil {
		return directory.NodeStats{}, err
	}
	return directory.NodeStats{Load: uint16(load), Latency: lat}, nil
}

// Lookup returns the slot: LocationList, R and buckets are control-plane
// state (the shadow); fresh, ver_next and ver_done come from the switch's
// registers, hits from its slot_hits counter. A slot whose gen register
// does not hold its entry's generation has seen no packet since the insert:
// its state is the seed (the chain fresh, both versions the larger of the
// insert's and the key's stamp floor register), exactly what the data plane
// will use for its next packet.
func (p *Plane) Lookup(h wire.KeyHash) (directory.Slot, bool, error) {
	s, ok := p.shadow.Lookup(h)
	if !ok {
		return directory.Slot{}, false, nil
	}
	idx := int(p.slotIdx[h])
	g, err := p.thrift.RegisterRead(p.regName[rGen], idx)
	if err != nil {
		return s, true, err
	}
	if uint32(g) == p.slotGen[h] {
		if s.VerNext, err = p.thrift.RegisterRead(p.regName[rVerNext], idx); err != nil {
			return s, true, err
		}
		if s.VerDone, err = p.thrift.RegisterRead(p.regName[rVerDone], idx); err != nil {
			return s, true, err
		}
		f, err := p.thrift.RegisterRead(p.regName[rFresh], idx)
		if err != nil {
			return s, true, err
		}
		s.Fresh = uint32(f)
	} else {
		// The seed the next packet applies: the chain fresh, both versions
		// max(ver, the key's stamp floor). The shadow never stamps, so its
		// floors stay 0 and its versions are the insert's ver; the floor is
		// the switch's.
		fl, err := p.thrift.RegisterRead(p.regName[rFloor], int(directory.FloorIndex(&h)))
		if err != nil {
			return s, true, err
		}
		s.VerNext, s.VerDone = max(s.VerNext, fl), max(s.VerDone, fl)
	}
	hits, err := p.counterCells(cSlotHits, []int64{int64(idx)})
	if err != nil {
		return s, true, err
	}
	s.Hits = uint64(hits[0])
	return s, true, nil
}

// counterCells reads the packet counts of cells of a counter; nil indices
// reads every cell.
func (p *Plane) counterCells(name string, indices []int64) ([]int64, error) {
	c, err := p.info.Counter(name)
	if err != nil {
		return nil, err
	}
	var ents []*p4.Entity
	if indices == nil {
		ents = append(ents, CounterEntity(c.Preamble.Id, -1, 0, false))
	}
	for _, i := range indices {
		ents = append(ents, CounterEntity(c.Preamble.Id, i, 0, false))
	}
	got, err := p.rt.Read(p.ctx, ents...)
	if err != nil {
		return nil, err
	}
	size := c.Size
	if indices != nil {
		out := make([]int64, len(indices))
		for k, want := range indices {
			for _, e := range got {
				ce := e.GetCounterEntry()
				if ce.GetIndex().GetIndex() == want {
					out[k] = ce.GetData().GetPacketCount()
				}
			}
		}
		return out, nil
	}
	out := make([]int64, size)
	for _, e := range got {
		ce := e.GetCounterEntry()
		if i := ce.GetIndex().GetIndex(); i >= 0 && i < size {
			out[i] = ce.GetData().GetPacketCount()
		}
	}
	return out, nil
}

// Counters reads the events, switched and drops counters.
func (p *Plane) Counters() (directory.Counters, error) {
	var c directory.Counters
	ev, err := p.counterCells(cEvents, nil)
	if err != nil {
		return c, err
	}
	sw, err := p.counterCells(cSwitched, nil)
	if err != nil {
		return c, err
	}
	dr, err := p.counterCells(cDrops, nil)
	if err != nil {
		return c, err
	}
	c.Hits, c.Misses, c.Replies = uint64(ev[eventHit]), uint64(ev[eventMiss]), uint64(ev[eventReply])
	c.VSBs, c.Passed, c.Switched = uint64(ev[eventVSB]), uint64(ev[eventPass]), uint64(sw[0])
	for _, r := range directory.Reasons() {
		c.Drops[r] = uint64(dr[r])
		c.DropTotal += uint64(dr[r])
	}
	return c, nil
}

func sketchIndex(h wire.KeyHash, r int) int64 {
	return int64((uint32(h[4+2*r])<<8 | uint32(h[5+2*r])) & (directory.SketchCols - 1))
}

// SketchEstimate is the minimum over the four sketch rows' counters.
func (p *Plane) SketchEstimate(h wire.KeyHash) (uint32, error) {
	est := ^uint32(0)
	for r := 0; r < directory.SketchRows; r++ {
		v, err := p.counterCells(fmt.Sprintf("%s%d", cSketchRow, r), []int64{sketchIndex(h, r)})
		if err != nil {
			return 0, err
		}
		est = min(est, uint32(v[0]))
	}
	return est, nil
}

// ResetSketch writes zero into every cell of the four rows (P4Runtime
// counter writes, as the controller does each hot-key round).
func (p *Plane) ResetSketch() error {
	var ups []*p4.Update
	for r := 0; r < directory.SketchRows; r++ {
		c, err := p.info.Counter(fmt.Sprintf("%s%d", cSketchRow, r))
		if err != nil {
			return err
		}
		for i := int64(0); i < c.Size; i++ {
			ups = append(ups, Update(p4.Update_MODIFY, CounterEntity(c.Preamble.Id, i, 0, true)))
		}
	}
	return p.write(ups...)
}

func (p *Plane) setClock(now uint64) error {
	if p.nowSet && p.now == now {
		return nil
	}
	t, err := p.info.Table(tClock)
	if err != nil {
		return err
	}
	act, err := p.info.Action(aFixedClock, []Param{par("now", now)})
	if err != nil {
		return err
	}
	te := &p4.TableEntry{TableId: t.Preamble.Id, IsDefaultAction: true,
		Action: &p4.TableAction{Type: &p4.TableAction_Action{Action: act}}}
	if err := p.write(Update(p4.Update_MODIFY, TableEntity(te))); err != nil {
		return fmt.Errorf("clock: %w", err)
	}
	p.now, p.nowSet = now, true
	return nil
}

// Frame wraps a netdir packet in Ethernet/IPv4/UDP from a client to the
// service address, as the switch would receive it.
func buildFrame(port uint32, pkt []byte) ([]byte, error) {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0x02, 0x4e, 0x44, 0xcc, byte(port >> 8), byte(port)},
		DstMAC: switchMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: clientIP, DstIP: serviceIP}
	udp := &layers.UDP{SrcPort: wire.ServicePort, DstPort: wire.ServicePort}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		return nil, err
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true},
		eth, ip, udp, gopacket.Payload(pkt))
	return buf.Bytes(), err
}

// parsed is a frame that left the switch, checked.
type parsed struct {
	eth     layers.Ethernet
	ip      layers.IPv4
	udp     layers.UDP
	payload []byte
}

func parseFrame(b []byte) (*parsed, error) {
	var f parsed
	if len(b) < 14+20+8 {
		return nil, errors.New("frame too short")
	}
	if err := f.eth.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
		return nil, err
	}
	if f.eth.EthernetType != layers.EthernetTypeIPv4 {
		return nil, fmt.Errorf("ethertype %v", f.eth.EthernetType)
	}
	ipb := b[14:]
	if err := f.ip.DecodeFromBytes(ipb, gopacket.NilDecodeFeedback); err != nil {
		return nil, err
	}
	if csum(ipb[:20], 0) != 0xffff && csum(ipb[:20], 0) != 0 {
		return nil, fmt.Errorf("bad IPv4 header checksum %#04x", f.ip.Checksum)
	}
	if f.ip.Protocol != layers.IPProtocolUDP {
		return nil, fmt.Errorf("protocol %v", f.ip.Protocol)
	}
	udpb := ipb[20:]
	if err := f.udp.DecodeFromBytes(udpb, gopacket.NilDecodeFeedback); err != nil {
		return nil, err
	}
	if int(f.udp.Length) < 8 || int(f.udp.Length) > len(udpb) {
		return nil, fmt.Errorf("UDP length %d for %d bytes", f.udp.Length, len(udpb))
	}
	seg := udpb[:f.udp.Length]
	f.payload = append([]byte(nil), seg[8:]...)
	if f.udp.Checksum != 0 {
		var ph [12]byte
		copy(ph[0:4], f.ip.SrcIP.To4())
		copy(ph[4:8], f.ip.DstIP.To4())
		ph[9] = 17
		binary.BigEndian.PutUint16(ph[10:], f.udp.Length)
		if s := csum(seg, csum(ph[:], 0)); s != 0xffff {
			return nil, fmt.Errorf("bad UDP checksum %#04x (sum %#04x)", f.udp.Checksum, s)
		}
	}
	return &f, nil
}

// csum adds b to a ones'-complement sum.
func csum(b []byte, sum uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum
}

func isNetdir(f *parsed) bool {
	return f.udp.SrcPort == wire.ServicePort || f.udp.DstPort == wire.ServicePort
}

// Process injects one packet on port at time now and returns the verdict and
// the packet as it left.
func (p *Plane) Process(pkt []byte, port uint32, now uint64) (directory.Verdict, []byte, error) {
	var v directory.Verdict
	if !p.ns.Has(port) {
		return v, nil, fmt.Errorf("port %d has no veth (the runner scans the suite for port=N)", port)
	}
	if err := p.setClock(now); err != nil {
		return v, nil, err
	}
	before, err := p.counterCells(cDrops, nil)
	if err != nil {
		return v, nil, err
	}
	evBefore, err := p.counterCells(cEvents, nil)
	if err != nil {
		return v, nil, err
	}
	frame, err := buildFrame(port, pkt)
	if err != nil {
		return v, nil, err
	}
	p.ns.Drain()
	if err := p.ns.Send(port, frame); err != nil {
		return v, nil, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		fr, ok := p.ns.Recv(10 * time.Millisecond)
		if ok {
			f, err := parseFrame(fr.Data)
			if err != nil || !isNetdir(f) {
				continue // not ours (kernel chatter)
			}
			return p.classify(fr.Port, f, evBefore)
		}
		after, err := p.counterCells(cDrops, nil)
		if err != nil {
			return v, nil, err
		}
		for r := range after {
			if after[r] > before[r] {
				if r >= reasonNoNodeAdr || r == 0 {
					return v, nil, fmt.Errorf("switch dropped the packet for P4 reason %d (no node_addr entry?)", r)
				}
				return directory.Verdict{Action: directory.Drop, Reason: directory.Reason(r)}, nil, nil
			}
		}
	}
	return v, nil, fmt.Errorf("no packet left the switch and no drop was counted in 5s; switch log:\n%s", p.sw.LogTail(30))
}

func (p *Plane) classify(port uint32, f *parsed, evBefore []int64) (directory.Verdict, []byte, error) {
	var v directory.Verdict
	switch port {
	case NodePort:
		if len(f.payload) < wire.HeaderLen {
			return v, nil, errors.New("forwarded packet lost its header")
		}
		n := wire.Frame(f.payload).Node()
		if !f.ip.DstIP.Equal(nodeIP(n)) || f.eth.DstMAC.String() != nodeMAC(n).String() || f.udp.DstPort != wire.ServicePort {
			return v, nil, fmt.Errorf("forward to node %d with addresses %v %v:%d", n, f.eth.DstMAC, f.ip.DstIP, f.udp.DstPort)
		}
		return directory.Verdict{Action: directory.Forward, Node: n}, f.payload, nil
	case UplinkPort:
		ev, err := p.counterCells(cEvents, nil)
		if err != nil {
			return v, nil, err
		}
		switch {
		case ev[eventReply] > evBefore[eventReply]:
			return directory.Verdict{Action: directory.ToClient}, f.payload, nil
		case ev[eventPass] > evBefore[eventPass]:
			return directory.Verdict{Action: directory.Pass}, f.payload, nil
		}
		return v, nil, errors.New("routed out without counting a reply or a pass")
	case AgentPort1, AgentPort2:
		// The group has two ports: wait for the other copy.
		want := uint32(AgentPort1 + AgentPort2 - port)
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
			fr, ok := p.ns.Recv(10 * time.Millisecond)
			if !ok || fr.Port != want {
				continue
			}
			g, err := parseFrame(fr.Data)
			if err != nil || !isNetdir(g) {
				continue
			}
			if string(g.payload) != string(f.payload) {
				return v, nil, errors.New("multicast copies differ")
			}
			// No third copy may follow (the group has exactly two members).
			if extra, ok := p.ns.Recv(20 * time.Millisecond); ok {
				return v, nil, fmt.Errorf("a third multicast copy left on port %d", extra.Port)
			}
			return directory.Verdict{Action: directory.Multicast}, f.payload, nil
		}
		return v, nil, fmt.Errorf("multicast copy missing on port %d", want)
	}
	return v, nil, fmt.Errorf("packet left on unexpected port %d", port)
}

// VectorPorts returns every port=N that the suite's files mention, and 0
// (the default ingress port).
func VectorPorts(dir string) ([]uint32, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	set := map[uint32]bool{0: true}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, w := range strings.Fields(string(b)) {
			if v, ok := strings.CutPrefix(w, "port="); ok {
				var x uint32
				if _, err := fmt.Sscanf(v, "%d", &x); err == nil {
					set[x] = true
				}
			}
		}
	}
	var out []uint32
	for x := range set {
		out = append(out, x)
	}
	return out, nil
}
