package system

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/gossip"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/storagenode/device"
)

// CompactionPhase is one phase of a compaction experiment (HATS §2 and
// §4.4): some nodes write in the background (storagenode.Node.Fill, a
// write-heavy emulation knob) so that their flushes and compactions run
// while the workload reads, under a compaction budget.
type CompactionPhase struct {
	Name     string
	Fill     []int   // node indices (0-based) that write in the background
	FillRate float64 // bytes/s per filling node
	// FillTrees are the chain positions the filling nodes write (default
	// every tree).
	FillTrees []int
	// Budget is every node's compaction budget in bytes/s for the phase
	// (storagenode.Unthrottled: no pacing; 0: the default).
	Budget int64
	// Lead is how long the background writes run before the workload
	// starts, so that compactions are under way (default 0).
	Lead time.Duration
	// Turn staggers a paced budget: the nodes compact in turns of this
	// length, no two members of a chain in the same turn
	// (storagenode.Node.SetCompactionTurn; 0: not staggered).
	Turn time.Duration
}

// PhaseResult is what a phase measured beside its bench.Run. Spreads over
// nodes are max/min: RequestSpread − 1 is the request imbalance HATS quotes
// as a percentage (18.9%), LatencySpread the latency ratio it quotes as a
// factor (4.24×).
type PhaseResult struct {
	Phase  string `json:"phase"`
	Policy string `json:"policy"`
	// Per node, over the phase (warm-up included for the nodes' own
	// figures): requests served, mean read latency as the clients saw it,
	// the nodes' own mean Pebble read latency (HATS's T), bytes written by
	// compactions, time compactions waited for the budget, and the largest
	// compaction debt sampled.
	NodeRequests      []float64 `json:"node_requests"`
	NodeLatencyUs     []float64 `json:"node_latency_us"`
	NodePebbleReadUs  []float64 `json:"node_pebble_read_us"`
	NodeCompactionMiB []float64 `json:"node_compaction_mib"`
	NodeDeepL0MiB     []float64 `json:"node_deep_l0_mib"`  // of those, compactions of a tree with a deep L0 (L0Urgent files: paced at a raised rate)
	NodeMaxL0Files    []float64 `json:"node_max_l0_files"` // the most L0 files one of the node's trees held, sampled each 250 ms
	NodeThrottledS    []float64 `json:"node_throttled_s"`
	NodeMaxDebtMiB    []float64 `json:"node_max_debt_mib"`
	RequestSpread     float64   `json:"request_spread"`        // max/min requests
	LatencySpread     float64   `json:"latency_spread"`        // max/min client latency
	PebbleLatSpread   float64   `json:"pebble_latency_spread"` // max/min Pebble read latency
	ThroughputOps     float64   `json:"throughput_ops"`
	P99us             float64   `json:"p99_us"`
	FillMiB           float64   `json:"fill_mib"` // background bytes written
	// Client writes (PUT and DEL) each node admitted and ERR replies it
	// counted (storagenode.Stats.Errors), over the phase: a write refused
	// and retried is admitted again. Of the writes, duplicates answered from
	// the dedup table and no-op versions made for stamped duplicates
	// (resends).
	NodeWrites    []float64 `json:"node_writes"`
	NodeErrors    []float64 `json:"node_errors"`
	NodeDupWrites []float64 `json:"node_dup_writes"`
	NodeNoops     []float64 `json:"node_noops"`
	// Seconds is the wall time the per-node figures cover: the policy's
	// whole run (plane start, warm-up, measurement, plane stop), which the
	// shared machine's load stretches; CompactionMiBps is all nodes'
	// compaction bytes over it.
	Seconds            float64 `json:"seconds"`
	CompactionMiBps    float64 `json:"compaction_mib_s"`
	CompactionBudgetMB float64 `json:"compaction_budget_mib_s"`
	// Sizes, per node at the phase's end: the data on its device (its
	// trees' disk bytes) and its block cache; and over the phase the
	// block cache's miss ratio (misses over lookups: index, filter and
	// data blocks of user reads) and the device reads per GET.
	NodeDataMiB     []float64 `json:"node_data_mib"`
	NodeCacheMiB    []float64 `json:"node_cache_mib"`
	NodeCacheMiss   []float64 `json:"node_cache_miss_ratio"`
	NodeReadsPerGet []float64 `json:"node_device_reads_per_get"`
	// NodePageHitsPerGet are the Read-class reads the page cache served
	// (no device time) over the node's GETs.
	NodePageHitsPerGet []float64 `json:"node_page_hits_per_get"`
	// Per node over the phase: the shares of its device's busy time that
	// compaction and user reads took (device.Stats.Share).
	NodeCompactionShare []float64 `json:"node_compaction_device_share"`
	NodeReadShare       []float64 `json:"node_read_device_share"`
	// FillMiBps is the background writes per filling node as reached (the
	// device slows them).
	FillMiBps float64 `json:"fill_mib_s"`
	// Paced is whether every node's compaction scheduler paced by read
	// share during the run (read back from the nodes; false: unthrottled).
	Paced bool `json:"paced"`
}

// SetCompactionBudget sets every node's compaction budget (bytes/s;
// storagenode.Unthrottled for none; 0 the default).
func (s *System) SetCompactionBudget(b int64) {
	for i := range s.N() {
		if n := s.Node(i); n != nil {
			n.Scheduler().SetBudget(b)
		}
	}
}

// setCompactionTurn staggers every node's paced compaction in turns of
// length turn (0: not staggered).
func (s *System) setCompactionTurn(turn time.Duration) {
	for i := range s.N() {
		if n := s.Node(i); n != nil {
			n.SetCompactionTurn(turn)
		}
	}
}

// compactionPaced reports whether every node paces its compactions (a
// budget in force; storagenode.Scheduler.Budget is 0 when unthrottled).
func (s *System) compactionPaced() bool {
	for i := range s.N() {
		if n := s.Node(i); n == nil || n.Scheduler().Budget() <= 0 {
			return false
		}
	}
	return true
}

// nodeSnapshot is the nodes' counters for a phase's deltas.
type nodeSnapshot struct {
	stats []gossip.NodeStats
	nodes []storagenode.Stats
}

func (s *System) snapshot() nodeSnapshot {
	var ns nodeSnapshot
	for i := range s.N() {
		n := s.Node(i)
		if n == nil {
			ns.stats = append(ns.stats, gossip.NodeStats{})
			ns.nodes = append(ns.nodes, storagenode.Stats{})
			continue
		}
		ns.stats = append(ns.stats, n.GossipStats(gossip.NodeStats{}))
		ns.nodes = append(ns.nodes, n.Stats())
	}
	return ns
}

// settleL0 lets compactions run unthrottled until every tree's L0 holds
// at most settledL0 files (or a minute has passed), so that each phase
// starts from a settled LSM: without it a phase inherits the L0 that the
// preload or the previous (paced) phase left, whose files every GET of
// their keys must probe.
func (s *System) settleL0(ctx context.Context) {
	const settledL0 = 4 // Pebble's L0CompactionThreshold
	s.SetCompactionBudget(storagenode.Unthrottled)
	defer s.SetCompactionBudget(0)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		deep := false
		for i := range s.N() {
			if n := s.Node(i); n != nil {
				for _, t := range n.Stats().Trees {
					deep = deep || t.L0Files > settledL0
				}
			}
		}
		if !deep {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// RunCompactionPhase runs one phase: the budget, the background writes
// (started Lead before the workload and stopped after it), then the policy's
// run (System.Run).
func (s *System) RunCompactionPhase(ctx context.Context, policy string, o RunOptions, ph CompactionPhase) (bench.Run, PhaseResult, error) {
	res := PhaseResult{Phase: ph.Name, Policy: policy, CompactionBudgetMB: float64(ph.Budget) / (1 << 20)}
	s.settleL0(ctx)
	s.SetCompactionBudget(ph.Budget)
	defer s.SetCompactionBudget(0)
	s.setCompactionTurn(ph.Turn)
	defer s.setCompactionTurn(0)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		filled  int64
		fillErr error
		maxDebt = make([]uint64, s.N())
		maxL0   = make([]int64, s.N())
	)
	for _, i := range ph.Fill {
		n := s.Node(i)
		if n == nil {
			return bench.Run{}, res, fmt.Errorf("system: no node %d to fill", i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := n.Fill(fctx, storagenode.FillOptions{Rate: ph.FillRate, Trees: ph.FillTrees, Seed: uint64(i + 1)})
			mu.Lock()
			filled += b
			if err != nil && fillErr == nil {
				fillErr = err
			}
			mu.Unlock()
		}()
	}
	// The largest debt and deepest L0 each node reaches, sampled each 250 ms.
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
			}
			for i := range s.N() {
				if n := s.Node(i); n != nil {
					var d uint64
					for _, tr := range n.Stats().Trees {
						d += tr.CompactionDebt
						maxL0[i] = max(maxL0[i], tr.L0Files)
					}
					maxDebt[i] = max(maxDebt[i], d)
				}
			}
		}
	}()
	if ph.Lead > 0 {
		select {
		case <-time.After(ph.Lead):
		case <-ctx.Done():
		}
	}
	before, t0 := s.snapshot(), time.Now()
	run, err := s.Run(ctx, policy, o)
	after := s.snapshot()
	res.Paced = s.compactionPaced()
	res.Seconds = time.Since(t0).Seconds()
	stop()
	wg.Wait()
	if err == nil {
		err = fillErr
	}
	if err != nil {
		return run, res, err
	}
	res.FillMiB = float64(filled) / (1 << 20)
	res.ThroughputOps, res.P99us = run.ThroughputOps, run.P99us
	res.NodeRequests = slices.Clone(run.NodeLoads)
	res.NodeLatencyUs = slices.Clone(run.NodeLatencyUs)
	for i := range after.stats {
		ep := gossip.Epoch(before.stats[i], after.stats[i])
		res.NodePebbleReadUs = append(res.NodePebbleReadUs, float64(ep.ReadLatency)/1e3)
		var cb, deep, thr float64
		a, bn := after.nodes[i], before.nodes[i]
		for j, t := range a.Trees {
			var b storagenode.TreeStats
			if j < len(bn.Trees) {
				b = bn.Trees[j]
			}
			cb += float64(t.CompactionBytes - min(b.CompactionBytes, t.CompactionBytes))
			deep += float64(t.DeepL0Bytes - min(b.DeepL0Bytes, t.DeepL0Bytes))
			thr += (t.ThrottledTime - min(b.ThrottledTime, t.ThrottledTime)).Seconds()
		}
		res.NodeCompactionMiB = append(res.NodeCompactionMiB, cb/(1<<20))
		res.NodeDeepL0MiB = append(res.NodeDeepL0MiB, deep/(1<<20))
		res.NodeMaxL0Files = append(res.NodeMaxL0Files, float64(maxL0[i]))
		res.NodeThrottledS = append(res.NodeThrottledS, thr)
		res.NodeMaxDebtMiB = append(res.NodeMaxDebtMiB, float64(maxDebt[i])/(1<<20))
		res.NodeWrites = append(res.NodeWrites, float64(a.Puts+a.Dels-min(bn.Puts+bn.Dels, a.Puts+a.Dels)))
		res.NodeErrors = append(res.NodeErrors, float64(a.Errors-min(bn.Errors, a.Errors)))
		res.NodeDupWrites = append(res.NodeDupWrites, float64(a.DupWrites-min(bn.DupWrites, a.DupWrites)))
		res.NodeNoops = append(res.NodeNoops, float64(a.Noops-min(bn.Noops, a.Noops)))
		var data float64
		for _, t := range a.Trees {
			data += float64(t.DiskBytes)
		}
		res.NodeDataMiB = append(res.NodeDataMiB, data/(1<<20))
		res.NodeCacheMiB = append(res.NodeCacheMiB, float64(a.CacheBytes)/(1<<20))
		hits, misses := a.BlockCacheHits-min(bn.BlockCacheHits, a.BlockCacheHits), a.BlockCacheMisses-min(bn.BlockCacheMisses, a.BlockCacheMisses)
		res.NodeCacheMiss = append(res.NodeCacheMiss, ratio(float64(misses), float64(hits+misses)))
		dev := deviceStats(a.Device).Sub(deviceStats(bn.Device))
		gets := a.Gets - min(bn.Gets, a.Gets)
		res.NodeReadsPerGet = append(res.NodeReadsPerGet, ratio(float64(dev.Class[device.Read].IOs), float64(gets)))
		res.NodePageHitsPerGet = append(res.NodePageHitsPerGet, ratio(float64(dev.Class[device.Read].PageHits), float64(gets)))
		res.NodeCompactionShare = append(res.NodeCompactionShare, dev.Share(device.Compaction))
		res.NodeReadShare = append(res.NodeReadShare, dev.Share(device.Read))
	}
	if len(ph.Fill) > 0 && res.Seconds > 0 {
		res.FillMiBps = res.FillMiB / float64(len(ph.Fill)) / res.Seconds
	}
	for _, x := range res.NodeCompactionMiB {
		res.CompactionMiBps += x / res.Seconds
	}
	res.RequestSpread = Spread(res.NodeRequests)
	res.LatencySpread = Spread(res.NodeLatencyUs)
	res.PebbleLatSpread = Spread(res.NodePebbleReadUs)
	if run.Note != "" {
		run.Note += "; "
	}
	run.Note += fmt.Sprintf("compaction phase %q: fill %.3g MiB on nodes %v, budget %s", ph.Name, res.FillMiB, oneBased(ph.Fill), BudgetName(ph.Budget))
	if ph.Turn > 0 && res.Paced {
		run.Note += fmt.Sprintf(", staggered in turns of %v", ph.Turn)
	}
	return run, res, nil
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// deviceStats turns a node's per-class device figures back into
// device.Stats for Sub and Share.
func deviceStats(cs []gossip.DeviceClass) device.Stats {
	var s device.Stats
	for i, c := range cs {
		if i < int(device.NumClasses) {
			s.Class[i] = device.ClassStats{IOs: c.IOs, Bytes: c.Bytes, Busy: c.Busy, Wait: c.Wait, PageHits: c.PageHits}
		}
	}
	return s
}

// Spread is max/min of the positive values (0 if there are none).
func Spread(xs []float64) float64 {
	lo, hi := 0.0, 0.0
	for _, x := range xs {
		if x <= 0 {
			continue
		}
		if lo == 0 || x < lo {
			lo = x
		}
		hi = max(hi, x)
	}
	if lo == 0 {
		return 0
	}
	return hi / lo
}

func oneBased(idx []int) []int {
	out := make([]int, len(idx))
	for i, x := range idx {
		out[i] = x + 1
	}
	return out
}

// BudgetName describes a compaction budget for notes and progress lines.
func BudgetName(b int64) string {
	switch {
	case b < 0:
		return "unthrottled"
	case b == 0:
		return "the device's"
	}
	return fmt.Sprintf("%.3g MiB/s", float64(b)/(1<<20))
}
