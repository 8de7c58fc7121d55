package storagenode

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/storagenode/device"
)

// TreeStats are one tree's counters (one chain position).
type TreeStats struct {
	Position          int           `json:"position"`
	Reads             uint64        `json:"reads"`
	Writes            uint64        `json:"writes"`
	MeanReadLatency   time.Duration `json:"mean_read_latency_ns"`
	P99ReadLatency    time.Duration `json:"p99_read_latency_ns"` // over the last 4096 reads
	L0Files           int64         `json:"l0_files"`
	L0Sublevels       int32         `json:"l0_sublevels"`
	Compactions       uint64        `json:"compactions"`
	CompactionBytes   uint64        `json:"compaction_bytes"`
	CompactionRate    int64         `json:"compaction_rate"`          // paced bytes/s granted now (the pool's if pooled; 0: unthrottled)
	CompactionPooled  bool          `json:"compaction_pooled"`        // below the floor: paced by the shared pool, first come first served
	CompactionDebt    uint64        `json:"compaction_debt_bytes"`    // Pebble's estimated compaction debt
	DeepL0Bytes       uint64        `json:"deep_l0_compaction_bytes"` // compaction bytes paced at a raised rate (deep L0: L0Urgent files; sched.DeepL0Rate)
	ThrottledTime     time.Duration `json:"throttled_ns"`
	FlushBytes        uint64        `json:"flush_bytes"`
	DiskBytes         uint64        `json:"disk_bytes"`
	MemTableBytes     uint64        `json:"memtable_bytes"`
	RunningL0Compacts int64         `json:"running_l0_compactions"`
	// Device is the tree's part of the node's device since the node
	// started, per I/O class.
	Device []gossip.DeviceClass `json:"device"`
}

// Stats is a node's counters.
type Stats struct {
	ID    uint16 `json:"id"`
	Ready bool   `json:"ready"`
	// Load is the requests queued or in service (admission.load), without
	// the staggered-compaction penalty that replies add (Node.load): a
	// bench waiting for a node to drain, and the queue-depth metric, need
	// the requests, and a node in its turn with none queued has none.
	Load      uint16 `json:"load"`
	Gets      uint64 `json:"gets"`
	Puts      uint64 `json:"puts"`
	Dels      uint64 `json:"dels"`
	Errors    uint64 `json:"errors"`
	QueueFull uint64 `json:"queue_full"` // packets refused at a full queue: client requests and node ops
	// QueueFullNodeOps counts the node ops among them (dropped: their
	// senders retransmit), and QueueFullControl the control ops (chain
	// acks, a controller's promotes and demotes) dropped at a full control
	// lane (controlOp), which client requests cannot fill.
	QueueFullNodeOps uint64 `json:"queue_full_node_ops"`
	QueueFullControl uint64 `json:"queue_full_control"`
	DupWrites        uint64 `json:"dup_writes"`
	Noops            uint64 `json:"noops"`          // no-op versions made for stamped duplicates
	NoopsOwed        uint64 `json:"noops_owed"`     // stamped duplicates deferred to the key's next no-op (one in flight)
	DirtyKeyFull     uint64 `json:"dirty_key_full"` // writes refused: their key had maxDirtyPerKey versions uncommitted
	// WriteGroups counts the versions this head made of more than one
	// write (a write group), and GroupedWrites the writes they absorbed
	// (all but each group's last): the chain writes saved.
	WriteGroups   uint64 `json:"write_groups"`
	GroupedWrites uint64 `json:"grouped_writes"`
	// StaleIncarnation counts stamped writes refused for a stamp of an
	// older incarnation than the key's promotion (spec/README.md, flaw G).
	StaleIncarnation uint64 `json:"stale_incarnation"`
	Retransmits      uint64 `json:"retransmits"`
	// ChainRTO is, per chain link from this head, the resend timeout of
	// its chain writes (rtoEstimator), as of the shards' last tick.
	ChainRTO   []LinkRTO `json:"chain_rto,omitempty"`
	VerQueries uint64    `json:"ver_queries"`
	// UnavailableGets counts reads of a chain answered ERR unavailable
	// because this node was still catching up with it (a recovery, a
	// rejoin, a spare's fill): reads its read set should not have sent.
	UnavailableGets uint64 `json:"unavailable_gets"`
	// StaleLayoutGets counts reads of a chain answered ERR unavailable
	// because a chain neighbour was at a newer epoch than this node's
	// layout: for the moment between two epochs' gossip, not a read set's
	// fault.
	StaleLayoutGets uint64 `json:"stale_layout_gets"`
	// ExtraGets counts reads served from an extra copy as it is (the data
	// plane vouched for it: fresh); VerifiedGets reads at an extra flagged
	// wire.FlagVerify, answered with the tail's committed version, and
	// VerifiedOwnCopy the tail's answers that confirmed the copy, so that
	// no value came (issue 18).
	ExtraGets       uint64 `json:"extra_gets"`
	VerifiedGets    uint64 `json:"verified_gets"`
	VerifiedOwnCopy uint64 `json:"verified_own_copy"`
	// VerAnswersValue and VerAnswersSame count this node's version answers
	// as a tail: with the committed value, and without it (an extra's query
	// named the committed version).
	VerAnswersValue uint64 `json:"ver_answers_value"`
	VerAnswersSame  uint64 `json:"ver_answers_same"`
	RxPackets       uint64 `json:"rx_packets"`
	TxPackets       uint64 `json:"tx_packets"`
	SyncedKeys      uint64 `json:"synced_keys"`
	SyncedBytes     uint64 `json:"synced_bytes"`  // taken by catch-ups (OpSyncData), paced at Options.SyncRate
	Behind          int    `json:"behind_chains"` // partitions whose catch-up as tail is under way
	Pending         int    `json:"pending"`       // uncommitted writes at this head
	Promoted        int    `json:"promoted"`      // keys this node heads that are promoted
	Copies          int    `json:"copies"`        // extra copies held
	CacheBytes      int64  `json:"cache_bytes"`
	// BlockCacheHits and BlockCacheMisses count the lookups of the node's
	// block cache (shared by its trees) since it started: index, filter
	// and data blocks of user reads (compactions bypass the cache).
	BlockCacheHits   uint64      `json:"block_cache_hits"`
	BlockCacheMisses uint64      `json:"block_cache_misses"`
	Trees            []TreeStats `json:"trees"`
	// DeviceProfile names the node's device profile; Device is the
	// device since the node started, per I/O class (read, wal, flush,
	// compaction): I/Os, bytes, busy time and queue wait, utilisation
	// and mean wait.
	DeviceProfile string               `json:"device_profile"`
	Device        []gossip.DeviceClass `json:"device"`
	// CPU is the node's emulated processor (device.CPU; zero without one):
	// client requests booked, their processor time and their queue wait.
	CPU device.CPUStats `json:"cpu"`
	// QoS is per tenant the dmClock scheduling, for every tenant seen or
	// given a policy (qos.go); QoSOn says whether requests go through it.
	QoSOn bool        `json:"qos_on"`
	QoS   []TenantQoS `json:"qos,omitempty"`
	// NodeOpDrops counts the node ops refused (storagenode/auth.go): a
	// bad or missing MAC, a replay, a retired key, a sender not in the
	// layout at the packet's source.
	NodeOpDrops nodeauth.Drops `json:"node_op_drops"`
}

// counters is the stats role: the node's request and packet counters, and
// the keys of the client requests served, counted for the controller.
type counters struct {
	gets, puts, dels, errs, clientsFull atomic.Uint64 // clientsFull: answered queue-full
	dupWrites, retransmits, verQueries  atomic.Uint64
	rxPackets, txPackets                atomic.Uint64
	syncKeys, syncBytes                 atomic.Uint64
	unavailableGets                     atomic.Uint64 // reads of a chain this node catches up with
	staleLayoutGets                     atomic.Uint64 // reads refused while a neighbour's epoch is newer
	noops                               atomic.Uint64 // no-op versions made for stamped duplicates
	noopsOwed                           atomic.Uint64 // stamped duplicates deferred to the key's next no-op
	dirtyKeyFull                        atomic.Uint64 // writes refused at maxDirtyPerKey
	writeGroups, groupedWrites          atomic.Uint64 // versions of more than one write; the writes they absorbed
	staleIncarnation                    atomic.Uint64 // stamped writes of an older incarnation, refused
	unknownSender                       atomic.Uint64 // node ops from no node of the layout at that address
	nodeOpDrops                         atomic.Uint64 // node ops (not controlOp) dropped at a full shard queue
	controlDrops                        atomic.Uint64 // control ops dropped at a full control lane
	extraGets                           atomic.Uint64 // reads served from an extra copy unverified
	verifiedGets                        atomic.Uint64 // reads at an extra answered after the tail's version answer
	verifiedOwnCopy                     atomic.Uint64 // tail answers that confirmed the extra's copy
	verAnswersValue, verAnswersSame     atomic.Uint64 // this tail's version answers with, without the value

	mu  sync.Mutex
	hot *sched.TopK
}

// hotKeyCounters bounds the node's hot-key counting (sched.TopK): keys with
// more than 1/64 of a round's requests are always found.
const hotKeyCounters = 64

// countKey counts a client request for key.
func (c *counters) countKey(key []byte) {
	c.mu.Lock()
	c.hot.Add(key)
	c.mu.Unlock()
}

// HotKeys returns the keys of the client requests this node served since
// the last call, most requested first, at most max: the report that names
// hot keys to the controller (data planes count by hash only).
func (n *Node) HotKeys(max int) []sched.KeyCount { return n.ctr.topKeys(max) }

// topKeys returns the keys counted since the last call, most first, at most
// max, and starts a new count.
func (c *counters) topKeys(max int) []sched.KeyCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hot.Top(max)
}

// Stats returns the node's counters and per-tree figures.
func (n *Node) Stats() Stats {
	s := Stats{
		ID: n.id, Ready: n.Ready(), Load: n.admit.load(),
		Gets: n.ctr.gets.Load(), Puts: n.ctr.puts.Load(), Dels: n.ctr.dels.Load(),
		Errors: n.ctr.errs.Load(), DupWrites: n.ctr.dupWrites.Load(),
		QueueFullNodeOps: n.ctr.nodeOpDrops.Load(), QueueFullControl: n.ctr.controlDrops.Load(),
		Noops:            n.ctr.noops.Load(),
		NoopsOwed:        n.ctr.noopsOwed.Load(),
		DirtyKeyFull:     n.ctr.dirtyKeyFull.Load(),
		WriteGroups:      n.ctr.writeGroups.Load(),
		GroupedWrites:    n.ctr.groupedWrites.Load(),
		StaleIncarnation: n.ctr.staleIncarnation.Load(),
		Retransmits:      n.ctr.retransmits.Load(), VerQueries: n.ctr.verQueries.Load(),
		UnavailableGets: n.ctr.unavailableGets.Load(),
		StaleLayoutGets: n.ctr.staleLayoutGets.Load(),
		ExtraGets:       n.ctr.extraGets.Load(), VerifiedGets: n.ctr.verifiedGets.Load(),
		VerifiedOwnCopy: n.ctr.verifiedOwnCopy.Load(),
		VerAnswersValue: n.ctr.verAnswersValue.Load(), VerAnswersSame: n.ctr.verAnswersSame.Load(),
		RxPackets: n.ctr.rxPackets.Load(), TxPackets: n.ctr.txPackets.Load(), SyncedKeys: n.ctr.syncKeys.Load(),
		SyncedBytes: n.ctr.syncBytes.Load(), Behind: int(n.recov.partsBehind.Load()),
		CacheBytes: n.opts.CacheBytes, DeviceProfile: n.opts.Device.Name,
		Device:      deviceClasses(n.dev.Stats(), device.Stats{}),
		NodeOpDrops: n.NodeOpDrops(),
	}
	if n.admit.cpu != nil {
		s.CPU = n.admit.cpu.Stats()
	}
	s.Promoted, s.Copies = n.copies.counts()
	s.QoSOn, s.QoS = n.admit.qos.on.Load(), n.QoSStats()
	rates := map[*tree]int64{}
	pooled := map[*tree]bool{}
	n.sched.mu.Lock()
	for _, ts := range n.sched.trees {
		rates[ts.t] = ts.rate.Load()
		pooled[ts.t] = ts.pooled.Load()
	}
	n.sched.mu.Unlock()
	for _, t := range n.trees {
		ts := TreeStats{
			Position: t.pos, Reads: t.reads.Load(), Writes: t.writes.Load(),
			Compactions: t.compactions.Load(), CompactionBytes: t.compactBytes.Load(),
			CompactionRate: rates[t], CompactionPooled: pooled[t], ThrottledTime: time.Duration(t.throttledNanos.Load()),
			DeepL0Bytes:       t.deepL0Bytes.Load(),
			RunningL0Compacts: t.l0Compactions.Load(),
			Device:            deviceClasses(t.fs.Stats(), device.Stats{}),
		}
		if ts.Reads > 0 {
			ts.MeanReadLatency = time.Duration(t.readNanos.Load() / ts.Reads)
		}
		if lat := t.lat.snapshot(); len(lat) > 0 {
			slices.Sort(lat)
			ts.P99ReadLatency = lat[len(lat)*99/100]
		}
		if !n.closing.Load() {
			m := t.db.Metrics()
			ts.L0Files = m.Levels[0].TablesCount
			ts.L0Sublevels = m.Levels[0].Sublevels
			ts.FlushBytes = uint64(max(0, m.Flush.WriteThroughput.Bytes))
			ts.DiskBytes = m.DiskSpaceUsage()
			ts.MemTableBytes = m.MemTable.Size
			ts.CompactionDebt = m.Compact.EstimatedDebt
			if len(s.Trees) == 0 { // the cache is the node's: any tree's metrics show it
				s.BlockCacheHits, s.BlockCacheMisses = uint64(max(0, m.BlockCache.Hits)), uint64(max(0, m.BlockCache.Misses))
			}
		}
		s.Trees = append(s.Trees, ts)
	}
	s.QueueFull = n.ctr.clientsFull.Load() + s.QueueFullNodeOps + s.QueueFullControl
	for _, sh := range n.admit.shards {
		s.Pending += int(sh.npend.Load())
	}
	s.ChainRTO = n.chainRTO()
	return s
}

// chainRTO merges the shards' link timeouts: per successor, the largest.
func (n *Node) chainRTO() []LinkRTO {
	var out []LinkRTO
	for _, sh := range n.admit.shards {
		links := sh.rtoSnap.Load()
		if links == nil {
			continue
		}
		for _, l := range *links {
			i := slices.IndexFunc(out, func(o LinkRTO) bool { return o.Next == l.Next })
			if i < 0 {
				out = append(out, l)
			} else if l.RTO > out[i].RTO {
				out[i] = l
			}
		}
	}
	slices.SortFunc(out, func(a, b LinkRTO) int { return int(a.Next) - int(b.Next) })
	return out
}

// deviceClasses gives device figures per class: the counters of cur, and
// utilisation and mean wait over the interval since prev (the zero Stats:
// since the device was made).
func deviceClasses(cur, prev device.Stats) []gossip.DeviceClass {
	win := cur.Sub(prev)
	out := make([]gossip.DeviceClass, device.NumClasses)
	for c := range device.NumClasses {
		cs := cur.Class[c]
		out[c] = gossip.DeviceClass{
			Class: c.String(), IOs: cs.IOs, Bytes: cs.Bytes, Busy: cs.Busy, Wait: cs.Wait, PageHits: cs.PageHits,
			Utilisation: win.Utilisation(c), MeanWait: win.MeanWait(c),
		}
	}
	return out
}

// Collector returns a Prometheus collector of the node's gauges, labelled
// by node id and tree (chain position).
func (n *Node) Collector() prometheus.Collector { return &collector{n: n} }

type collector struct{ n *Node }

var (
	descReads       = prometheus.NewDesc("netdir_node_tree_reads_total", "Pebble reads per tree.", []string{"node", "tree"}, nil)
	descReadLat     = prometheus.NewDesc("netdir_node_tree_read_latency_seconds", "Mean Pebble read latency per tree.", []string{"node", "tree"}, nil)
	descL0          = prometheus.NewDesc("netdir_node_tree_l0_files", "L0 files per tree.", []string{"node", "tree"}, nil)
	descCompBytes   = prometheus.NewDesc("netdir_node_tree_compaction_bytes_total", "Bytes written by compactions per tree.", []string{"node", "tree"}, nil)
	descCompRate    = prometheus.NewDesc("netdir_node_tree_compaction_rate_bytes", "Paced compaction rate granted per tree (bytes/s).", []string{"node", "tree"}, nil)
	descCompDebt    = prometheus.NewDesc("netdir_node_tree_compaction_debt_bytes", "Pebble's estimated compaction debt per tree (bytes).", []string{"node", "tree"}, nil)
	descThrottled   = prometheus.NewDesc("netdir_node_tree_compaction_throttled_seconds_total", "Time compactions waited for the paced rate per tree.", []string{"node", "tree"}, nil)
	descLoad        = prometheus.NewDesc("netdir_node_queue_depth", "Requests queued at the node.", []string{"node"}, nil)
	descOps         = prometheus.NewDesc("netdir_node_requests_total", "Client requests by op.", []string{"node", "op"}, nil)
	descPending     = prometheus.NewDesc("netdir_node_pending_writes", "Uncommitted writes at this head.", []string{"node"}, nil)
	descQueueFull   = prometheus.NewDesc("netdir_node_queue_full_total", "Packets refused at a full queue, by kind: client (answered queue-full), node-op (dropped; the sender retransmits), control (a chain ack or a controller's promote or demote dropped at a full control lane).", []string{"node", "kind"}, nil)
	descRetransmits = prometheus.NewDesc("netdir_node_retransmits_total", "Chain writes retransmitted by this head.", []string{"node"}, nil)
	descWriteGroups = prometheus.NewDesc("netdir_node_write_groups_total", "Versions this head made of more than one write of a key (write groups).", []string{"node"}, nil)
	descGrouped     = prometheus.NewDesc("netdir_node_grouped_writes_total", "Writes absorbed into a write group's version at this head (all but each group's last).", []string{"node"}, nil)
	descChainRTO    = prometheus.NewDesc("netdir_node_chain_rto_seconds", "Resend timeout of this head's chain writes down the link to next (from the measured ack times, RFC 6298), the largest over its shards.", []string{"node", "next"}, nil)
	descSyncBytes   = prometheus.NewDesc("netdir_node_sync_bytes_total", "Bytes taken from chain neighbours by catch-ups (restart, rejoin, spare fill), paced.", []string{"node"}, nil)
	descSyncKeys    = prometheus.NewDesc("netdir_node_sync_keys_total", "Keys updated by catch-ups.", []string{"node"}, nil)
	descBehind      = prometheus.NewDesc("netdir_node_chains_behind", "Partitions this node joined as tail and is still filling.", []string{"node"}, nil)
	descExtraGets   = prometheus.NewDesc("netdir_node_extra_reads_total", "Reads served at this node as an extra copy: unverified (fresh) or verified (the tail's committed version, issue 18).", []string{"node", "kind"}, nil)
	descVerAnswers  = prometheus.NewDesc("netdir_node_ver_answers_total", "Version answers this node sent as a tail, with or without the value.", []string{"node", "value"}, nil)
	descOpDrops     = prometheus.NewDesc("netdir_node_op_drops_total", "Node ops refused, by reason: bad-mac, replay, old-key, unknown-sender.", []string{"node", "reason"}, nil)

	descDevSlots = prometheus.NewDesc("netdir_node_device_slots", "I/Os the node's device serves at once (its queue depth): utilisation is rate(busy_seconds) over it.", []string{"node"}, nil)
	descDevIOs   = prometheus.NewDesc("netdir_node_device_ios_total", "I/Os on the node's device by class.", []string{"node", "class"}, nil)
	descDevBytes = prometheus.NewDesc("netdir_node_device_bytes_total", "Bytes moved by the node's device by class.", []string{"node", "class"}, nil)
	descDevBusy  = prometheus.NewDesc("netdir_node_device_busy_seconds_total", "Device time (service plus transfer) by class.", []string{"node", "class"}, nil)
	descDevWait  = prometheus.NewDesc("netdir_node_device_wait_seconds_total", "Time I/Os queued for the device by class.", []string{"node", "class"}, nil)
	descDevHits  = prometheus.NewDesc("netdir_node_device_page_hits_total", "Reads served whole by the node's page cache of what it just wrote (no device time), by class.", []string{"node", "class"}, nil)
	descTreeBusy = prometheus.NewDesc("netdir_node_tree_device_busy_seconds_total", "Device time per tree by class.", []string{"node", "tree", "class"}, nil)
	descCPUBusy  = prometheus.NewDesc("netdir_node_cpu_busy_seconds_total", "Emulated processor time of client requests (the device profile's per-request time).", []string{"node"}, nil)
	descCPUWait  = prometheus.NewDesc("netdir_node_cpu_wait_seconds_total", "Time client requests queued for the emulated processor.", []string{"node"}, nil)

	descQoSQueued    = prometheus.NewDesc("netdir_node_qos_queued", "Requests waiting in the tenant's dmClock queue.", []string{"node", "tenant"}, nil)
	descQoSInflight  = prometheus.NewDesc("netdir_node_qos_inflight", "The tenant's requests admitted and not yet handled.", []string{"node", "tenant"}, nil)
	descQoSServed    = prometheus.NewDesc("netdir_node_qos_served_total", "The tenant's requests served, by dmClock phase.", []string{"node", "tenant", "phase"}, nil)
	descQoSThrottled = prometheus.NewDesc("netdir_node_qos_throttled_total", "The tenant's requests that waited for its limit.", []string{"node", "tenant"}, nil)
	descQoSDelay     = prometheus.NewDesc("netdir_node_qos_delay_seconds_total", "Queueing delay of the tenant's served requests.", []string{"node", "tenant"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReads, descReadLat, descL0, descCompBytes, descCompRate, descCompDebt, descThrottled, descLoad, descOps, descPending, descQueueFull, descRetransmits, descWriteGroups, descGrouped, descChainRTO, descSyncBytes, descSyncKeys, descBehind, descExtraGets, descVerAnswers, descOpDrops,
		descDevSlots, descDevIOs, descDevBytes, descDevBusy, descDevWait, descDevHits, descTreeBusy, descCPUBusy, descCPUWait,
		descQoSQueued, descQoSInflight, descQoSServed, descQoSThrottled, descQoSDelay} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.n.Stats()
	id := fmt.Sprint(s.ID)
	for _, t := range s.Trees {
		tr := fmt.Sprint(t.Position)
		ch <- prometheus.MustNewConstMetric(descReads, prometheus.CounterValue, float64(t.Reads), id, tr)
		ch <- prometheus.MustNewConstMetric(descReadLat, prometheus.GaugeValue, t.MeanReadLatency.Seconds(), id, tr)
		ch <- prometheus.MustNewConstMetric(descL0, prometheus.GaugeValue, float64(t.L0Files), id, tr)
		ch <- prometheus.MustNewConstMetric(descCompBytes, prometheus.CounterValue, float64(t.CompactionBytes), id, tr)
		ch <- prometheus.MustNewConstMetric(descCompRate, prometheus.GaugeValue, float64(t.CompactionRate), id, tr)
		ch <- prometheus.MustNewConstMetric(descCompDebt, prometheus.GaugeValue, float64(t.CompactionDebt), id, tr)
		ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, t.ThrottledTime.Seconds(), id, tr)
		for _, d := range t.Device {
			ch <- prometheus.MustNewConstMetric(descTreeBusy, prometheus.CounterValue, d.Busy.Seconds(), id, tr, d.Class)
		}
	}
	ch <- prometheus.MustNewConstMetric(descDevSlots, prometheus.GaugeValue, float64(c.n.dev.Profile().QueueDepth), id)
	for _, d := range s.Device {
		ch <- prometheus.MustNewConstMetric(descDevIOs, prometheus.CounterValue, float64(d.IOs), id, d.Class)
		ch <- prometheus.MustNewConstMetric(descDevBytes, prometheus.CounterValue, float64(d.Bytes), id, d.Class)
		ch <- prometheus.MustNewConstMetric(descDevBusy, prometheus.CounterValue, d.Busy.Seconds(), id, d.Class)
		ch <- prometheus.MustNewConstMetric(descDevWait, prometheus.CounterValue, d.Wait.Seconds(), id, d.Class)
		ch <- prometheus.MustNewConstMetric(descDevHits, prometheus.CounterValue, float64(d.PageHits), id, d.Class)
	}
	ch <- prometheus.MustNewConstMetric(descCPUBusy, prometheus.CounterValue, s.CPU.Busy.Seconds(), id)
	ch <- prometheus.MustNewConstMetric(descCPUWait, prometheus.CounterValue, s.CPU.Wait.Seconds(), id)
	ch <- prometheus.MustNewConstMetric(descLoad, prometheus.GaugeValue, float64(s.Load), id)
	ch <- prometheus.MustNewConstMetric(descOps, prometheus.CounterValue, float64(s.Gets), id, "get")
	ch <- prometheus.MustNewConstMetric(descOps, prometheus.CounterValue, float64(s.Puts), id, "put")
	ch <- prometheus.MustNewConstMetric(descOps, prometheus.CounterValue, float64(s.Dels), id, "del")
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.Pending), id)
	ch <- prometheus.MustNewConstMetric(descQueueFull, prometheus.CounterValue, float64(s.QueueFull-s.QueueFullNodeOps-s.QueueFullControl), id, "client")
	ch <- prometheus.MustNewConstMetric(descQueueFull, prometheus.CounterValue, float64(s.QueueFullNodeOps), id, "node-op")
	ch <- prometheus.MustNewConstMetric(descQueueFull, prometheus.CounterValue, float64(s.QueueFullControl), id, "control")
	ch <- prometheus.MustNewConstMetric(descRetransmits, prometheus.CounterValue, float64(s.Retransmits), id)
	ch <- prometheus.MustNewConstMetric(descWriteGroups, prometheus.CounterValue, float64(s.WriteGroups), id)
	ch <- prometheus.MustNewConstMetric(descGrouped, prometheus.CounterValue, float64(s.GroupedWrites), id)
	for _, l := range s.ChainRTO {
		ch <- prometheus.MustNewConstMetric(descChainRTO, prometheus.GaugeValue, l.RTO.Seconds(), id, fmt.Sprint(l.Next))
	}
	ch <- prometheus.MustNewConstMetric(descSyncBytes, prometheus.CounterValue, float64(s.SyncedBytes), id)
	ch <- prometheus.MustNewConstMetric(descSyncKeys, prometheus.CounterValue, float64(s.SyncedKeys), id)
	ch <- prometheus.MustNewConstMetric(descBehind, prometheus.GaugeValue, float64(s.Behind), id)
	ch <- prometheus.MustNewConstMetric(descExtraGets, prometheus.CounterValue, float64(s.ExtraGets), id, "unverified")
	ch <- prometheus.MustNewConstMetric(descExtraGets, prometheus.CounterValue, float64(s.VerifiedGets), id, "verified")
	ch <- prometheus.MustNewConstMetric(descVerAnswers, prometheus.CounterValue, float64(s.VerAnswersValue), id, "with")
	ch <- prometheus.MustNewConstMetric(descVerAnswers, prometheus.CounterValue, float64(s.VerAnswersSame), id, "without")
	for _, d := range []struct {
		reason nodeauth.Verdict
		n      uint64
	}{{nodeauth.BadMAC, s.NodeOpDrops.BadMAC}, {nodeauth.Replay, s.NodeOpDrops.Replay}, {nodeauth.OldKey, s.NodeOpDrops.OldKey}, {nodeauth.UnknownSender, s.NodeOpDrops.UnknownSender}} {
		ch <- prometheus.MustNewConstMetric(descOpDrops, prometheus.CounterValue, float64(d.n), id, d.reason.String())
	}
	for _, q := range s.QoS {
		tn := fmt.Sprint(q.Tenant)
		ch <- prometheus.MustNewConstMetric(descQoSQueued, prometheus.GaugeValue, float64(q.Queued), id, tn)
		ch <- prometheus.MustNewConstMetric(descQoSInflight, prometheus.GaugeValue, float64(q.Inflight), id, tn)
		ch <- prometheus.MustNewConstMetric(descQoSServed, prometheus.CounterValue, float64(q.ServedReservation), id, tn, "reservation")
		ch <- prometheus.MustNewConstMetric(descQoSServed, prometheus.CounterValue, float64(q.ServedWeight), id, tn, "weight")
		ch <- prometheus.MustNewConstMetric(descQoSThrottled, prometheus.CounterValue, float64(q.Throttled), id, tn)
		ch <- prometheus.MustNewConstMetric(descQoSDelay, prometheus.CounterValue, q.Delay.Seconds(), id, tn)
	}
}
