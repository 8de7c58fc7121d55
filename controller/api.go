package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// reincarnateTimeout bounds the new incarnation a subscriber that lost its
// state asks for: every entry promoted again at its head.
const reincarnateTimeout = 30 * time.Second

// API serves the controller's gRPC API. It is the only place that turns
// protobufs into the controller's values and back.
type API struct {
	api.UnimplementedControllerServer
	c *Controller
}

// NewAPI returns the gRPC service of c. A controller that does not lead
// answers only GetLayout; it refuses every other call with Unavailable,
// naming the leader (LeaderHint), since only the leader runs the loops
// that take reports and holds the newest state.
func NewAPI(c *Controller) *API { return &API{c: c} }

// leading refuses a call at a follower, naming the leader.
func (a *API) leading() error { return statusOf(codes.Unavailable, a.c.Leading()) }

// statusOf is err as a gRPC status of the given code, or a follower's
// refusal if leadership was lost on the way.
func statusOf(code codes.Code, err error) error {
	var nl *NotLeaderError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nl):
		return NotLeaderStatus(nl)
	}
	return status.Error(code, err.Error())
}

// GetLayout returns the current layout as its YAML.
func (a *API) GetLayout(context.Context, *api.GetLayoutRequest) (*api.GetLayoutResponse, error) {
	y, err := a.c.Layout().Marshal()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &api.GetLayoutResponse{Yaml: string(y)}, nil
}

// ReportStats records a node's report for the next hot-key round.
func (a *API) ReportStats(_ context.Context, s *api.NodeStats) (*api.ReportStatsResponse, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	if _, ok := a.c.Layout().Node(wire.NodeID(s.GetNode())); !ok {
		return nil, status.Errorf(codes.NotFound, "node %d is not in the controller's configuration", s.GetNode())
	}
	for _, k := range s.GetHotKeys() {
		if len(k.GetKey()) == 0 || len(k.GetKey()) > wire.MaxKey {
			return nil, status.Errorf(codes.InvalidArgument, "hot key of %d bytes", len(k.GetKey()))
		}
	}
	a.c.Report(nodeReportFromProto(s))
	a.c.ReportQoS(wire.NodeID(s.GetNode()), tenantReportsFromProto(s.GetQos()))
	resp := &api.ReportStatsResponse{}
	if cfg, changed := a.c.QoSFor(s.GetQosGeneration()); changed {
		resp.Qos = qosConfigProto(cfg)
	}
	return resp, nil
}

// ReportAgentStats takes a host agent's counts for the next hot-key round.
func (a *API) ReportAgentStats(_ context.Context, s *api.AgentStats) (*api.ReportAgentStatsResponse, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	r, err := agentReportFromProto(s)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	dup, err := a.c.ReportAgent(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &api.ReportAgentStatsResponse{Duplicate: dup}, nil
}

// WatchDirectory streams a snapshot, then deltas. A subscriber that lost
// its state (lost_state: a router agent's start) gets a new incarnation
// first (Reincarnate), and its snapshot in it.
func (a *API) WatchDirectory(r *api.WatchDirectoryRequest, stream api.Controller_WatchDirectoryServer) error {
	if err := a.leading(); err != nil {
		return err
	}
	if r.GetLostState() {
		// Not cut short by the subscriber's leaving: heads left in two
		// incarnations would refuse the other planes' stamps until the
		// next one.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(stream.Context()), reincarnateTimeout)
		err := a.c.Reincarnate(ctx)
		cancel()
		if err != nil {
			return statusOf(codes.Unavailable, fmt.Errorf("new incarnation: %w", err))
		}
	}
	w := a.c.st.watch()
	defer a.c.st.unwatch(w)
	for {
		select {
		case u, ok := <-w:
			if !ok {
				return status.Error(codes.ResourceExhausted, "watcher fell behind: resubscribe for a fresh snapshot")
			}
			if err := stream.Send(updateProto(u)); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

// ListDirectory lists the directory by slot.
func (a *API) ListDirectory(context.Context, *api.ListDirectoryRequest) (*api.ListDirectoryResponse, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	return &api.ListDirectoryResponse{Entries: entriesProto(a.c.Entries())}, nil
}

func checkKey(k []byte) error {
	if len(k) == 0 || len(k) > wire.MaxKey {
		return status.Errorf(codes.InvalidArgument, "key of %d bytes: want 1..%d", len(k), wire.MaxKey)
	}
	return nil
}

// Pin promotes a key and keeps it.
func (a *API) Pin(ctx context.Context, r *api.PinRequest) (*api.PinResponse, error) {
	if err := checkKey(r.GetKey()); err != nil {
		return nil, err
	}
	e, err := a.c.Pin(ctx, r.GetKey())
	if err != nil {
		return nil, statusOf(codes.FailedPrecondition, err)
	}
	return &api.PinResponse{Entry: entryProto(e)}, nil
}

// Unpin evicts a key.
func (a *API) Unpin(ctx context.Context, r *api.PinRequest) (*api.PinResponse, error) {
	if err := checkKey(r.GetKey()); err != nil {
		return nil, err
	}
	if err := a.leading(); err != nil {
		return nil, err
	}
	if err := a.c.Unpin(ctx, r.GetKey()); err != nil {
		return nil, statusOf(codes.NotFound, err)
	}
	return &api.PinResponse{}, nil
}

// ListPartitions returns the partition map.
func (a *API) ListPartitions(context.Context, *api.ListPartitionsRequest) (*api.ListPartitionsResponse, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	parts := a.c.Partitions()
	return &api.ListPartitionsResponse{Epoch: parts.Layout.Epoch(), Partitions: partitionsProto(parts)}, nil
}

// SetWeights installs split weights for a partition or a hot key.
func (a *API) SetWeights(ctx context.Context, r *api.SetWeightsRequest) (*api.SetWeightsResponse, error) {
	var err error
	switch t := r.GetTarget().(type) {
	case *api.SetWeightsRequest_Partition:
		err = a.c.SetPartitionWeights(ctx, t.Partition, r.GetWeights())
	case *api.SetWeightsRequest_Key:
		err = a.c.SetKeyWeights(ctx, t.Key, r.GetWeights())
	default:
		return nil, status.Error(codes.InvalidArgument, "name a partition or a key")
	}
	if err != nil {
		return nil, statusOf(codes.InvalidArgument, err)
	}
	return &api.SetWeightsResponse{}, nil
}

// Status summarises the controller.
func (a *API) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	lay := a.c.Layout()
	r := &api.StatusResponse{
		Rounds: a.c.Rounds(), Epoch: lay.Epoch(), Nodes: uint32(len(lay.Nodes())),
		DirectorySize: uint32(a.c.directorySize()), DirectoryCapacity: uint32(a.c.cfg.Capacity),
		LoopsPaused: a.c.Paused(),
	}
	for _, p := range a.c.planes {
		r.Switches = append(r.Switches, p.Name())
	}
	return r, nil
}

// SetLoops pauses or resumes the hot-key rounds and coarse epochs.
func (a *API) SetLoops(_ context.Context, r *api.SetLoopsRequest) (*api.SetLoopsResponse, error) {
	if err := a.leading(); err != nil {
		return nil, err
	}
	a.c.SetPaused(r.GetPaused())
	return &api.SetLoopsResponse{}, nil
}

// nodeReportFromProto is a node's report as the controller takes it.
func nodeReportFromProto(s *api.NodeStats) NodeReport {
	r := NodeReport{Node: wire.NodeID(s.GetNode()), Version: s.GetVersion(), QueueDepth: s.GetQueueDepth()}
	for _, k := range s.GetHotKeys() {
		r.HotKeys = append(r.HotKeys, sched.KeyCount{Key: k.GetKey(), Count: k.GetCount()})
	}
	for _, t := range s.GetTrees() {
		r.Trees = append(r.Trees, TreeReport{Position: t.GetPosition(), Reads: t.GetReads(),
			MeanReadLatency: time.Duration(t.GetMeanReadLatencyUs() * float64(time.Microsecond)),
			CompactionDebt:  t.GetCompactionDebtBytes()})
	}
	return r
}

// agentReportFromProto is an agent's report as the controller takes it; a key hash
// that is not one is refused with ErrAgentReport.
func agentReportFromProto(s *api.AgentStats) (AgentReport, error) {
	r := AgentReport{Agent: s.GetAgent(), Incarnation: s.GetIncarnation(), Sequence: s.GetSequence(),
		SketchRows: s.GetSketchRows(), SketchCols: s.GetSketchCols()}
	for _, h := range s.GetHits() {
		if len(h.GetKeyHash()) != wire.KeyHashLen {
			return AgentReport{}, fmt.Errorf("%w: a %d-byte key hash", ErrAgentReport, len(h.GetKeyHash()))
		}
		r.Hits = append(r.Hits, SlotHits{Hash: wire.KeyHash(h.GetKeyHash()), Hits: h.GetHits()})
	}
	for _, cell := range s.GetSketch() {
		r.Sketch = append(r.Sketch, SketchCell{Index: cell.GetIndex(), Count: cell.GetCount()})
	}
	return r, nil
}

func entryProto(e Entry) *api.DirectoryEntry {
	pe := &api.DirectoryEntry{
		KeyHash: append([]byte(nil), e.Hash[:]...), Key: e.Key, ChainLength: uint32(e.R),
		Pinned: e.Pinned, Hits: e.Hits, Version: e.Ver,
	}
	for _, n := range e.Locs {
		pe.Locations = append(pe.Locations, uint32(n))
	}
	for _, b := range e.Buckets {
		pe.Buckets = append(pe.Buckets, uint32(b))
	}
	return pe
}

func entriesProto(es []Entry) []*api.DirectoryEntry {
	out := make([]*api.DirectoryEntry, len(es))
	for i, e := range es {
		out[i] = entryProto(e)
	}
	return out
}

// partitionsProto lists every partition with its chain and buckets: the
// weights set, or an even split.
func partitionsProto(parts Partitions) []*api.Partition {
	ps := make([]*api.Partition, parts.Layout.Partitions())
	for p, c := range parts.Layout.Chains() {
		ap := &api.Partition{Index: uint32(p)}
		for _, n := range c {
			ap.Chain = append(ap.Chain, uint32(n))
		}
		b, ok := parts.Buckets[uint32(p)]
		for i := 0; i < directory.Buckets; i++ {
			if ok {
				ap.Buckets = append(ap.Buckets, uint32(b[i]))
			} else {
				ap.Buckets = append(ap.Buckets, uint32(i%len(c)))
			}
		}
		ps[p] = ap
	}
	return ps
}

func nodesProto(lay *layout.Map) []*api.Node {
	ids := lay.Nodes()
	out := make([]*api.Node, len(ids))
	for i, id := range ids {
		n, _ := lay.Node(id)
		out[i] = &api.Node{Id: uint32(id), Addr: n.Addr}
	}
	return out
}

var updateKinds = [...]api.DirectoryUpdate_Kind{
	updateSnapshot:   api.DirectoryUpdate_SNAPSHOT,
	updateUpsert:     api.DirectoryUpdate_UPSERT,
	updateDelete:     api.DirectoryUpdate_DELETE,
	updatePartitions: api.DirectoryUpdate_PARTITIONS,
}

// updateProto is a directory update as agents receive it.
func updateProto(u directoryUpdate) *api.DirectoryUpdate {
	pu := &api.DirectoryUpdate{Kind: updateKinds[u.kind], Sequence: u.sequence, Entries: entriesProto(u.entries)}
	if lay := u.partitions.Layout; lay != nil {
		pu.Epoch, pu.PartitionBits, pu.Partitions = lay.Epoch(), uint32(lay.Bits()), partitionsProto(u.partitions)
		if u.kind == updateSnapshot {
			pu.Nodes = nodesProto(lay)
		}
	}
	return pu
}

// mutating are the API's calls that change the controller's state: an
// API token, when one is configured, guards them. Reads, and the nodes'
// and agents' reports, need none.
var mutating = map[string]bool{
	api.Controller_Pin_FullMethodName:        true,
	api.Controller_Unpin_FullMethodName:      true,
	api.Controller_SetWeights_FullMethodName: true,
	api.Controller_SetLoops_FullMethodName:   true,
	api.Controller_QoSSet_FullMethodName:     true,
	api.Controller_QoSRemove_FullMethodName:  true,
}

// Mutating reports whether the API call fullMethod changes state.
func Mutating(fullMethod string) bool { return mutating[fullMethod] }
