package controller

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/wire"
)

// API serves the controller's gRPC API.
type API struct {
	api.UnimplementedControllerServer
	c *Controller
}

// NewAPI returns the gRPC service of c.
func NewAPI(c *Controller) *API { return &API{c: c} }

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
	if _, ok := a.c.Layout().Node(wire.NodeID(s.GetNode())); !ok {
		return nil, status.Errorf(codes.NotFound, "node %d is not in the controller's configuration", s.GetNode())
	}
	for _, k := range s.GetHotKeys() {
		if len(k.GetKey()) == 0 || len(k.GetKey()) > wire.MaxKey {
			return nil, status.Errorf(codes.InvalidArgument, "hot key of %d bytes", len(k.GetKey()))
		}
	}
	a.c.Report(s)
	return &api.ReportStatsResponse{}, nil
}

// ReportAgentStats takes a host agent's counts for the next hot-key round.
func (a *API) ReportAgentStats(_ context.Context, s *api.AgentStats) (*api.ReportAgentStatsResponse, error) {
	dup, err := a.c.ReportAgent(s)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &api.ReportAgentStatsResponse{Duplicate: dup}, nil
}

// WatchDirectory streams a snapshot, then deltas.
func (a *API) WatchDirectory(_ *api.WatchDirectoryRequest, stream api.Controller_WatchDirectoryServer) error {
	w := a.c.st.watch()
	defer a.c.st.unwatch(w)
	for {
		select {
		case u, ok := <-w:
			if !ok {
				return status.Error(codes.ResourceExhausted, "watcher fell behind: resubscribe for a fresh snapshot")
			}
			if err := stream.Send(u); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

// ListDirectory lists the directory by slot.
func (a *API) ListDirectory(context.Context, *api.ListDirectoryRequest) (*api.ListDirectoryResponse, error) {
	a.c.st.mu.Lock()
	defer a.c.st.mu.Unlock()
	r := &api.ListDirectoryResponse{}
	for _, e := range a.c.st.sortedLocked() {
		r.Entries = append(r.Entries, e.proto())
	}
	return r, nil
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
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &api.PinResponse{Entry: e.proto()}, nil
}

// Unpin evicts a key.
func (a *API) Unpin(ctx context.Context, r *api.PinRequest) (*api.PinResponse, error) {
	if err := checkKey(r.GetKey()); err != nil {
		return nil, err
	}
	if err := a.c.Unpin(ctx, r.GetKey()); err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	return &api.PinResponse{}, nil
}

// ListPartitions returns the partition map.
func (a *API) ListPartitions(context.Context, *api.ListPartitionsRequest) (*api.ListPartitionsResponse, error) {
	a.c.st.mu.Lock()
	defer a.c.st.mu.Unlock()
	return &api.ListPartitionsResponse{Epoch: a.c.st.lay.Epoch(), Partitions: a.c.st.partitionsProtoLocked()}, nil
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
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &api.SetWeightsResponse{}, nil
}

// Status summarises the controller.
func (a *API) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	r := &api.StatusResponse{Rounds: a.c.Rounds()}
	a.c.st.mu.Lock()
	r.Epoch = a.c.st.lay.Epoch()
	r.Nodes = uint32(len(a.c.st.lay.Nodes()))
	r.DirectorySize = uint32(len(a.c.st.entries))
	a.c.st.mu.Unlock()
	r.DirectoryCapacity = uint32(a.c.cfg.Capacity)
	for _, p := range a.c.planes {
		r.Switches = append(r.Switches, p.Name())
	}
	return r, nil
}
