package controller

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/netdir/netdir/api"
)

// apiCall decodes a request of one of the API's unary calls and makes it.
type apiCall struct {
	name string
	call func(ctx context.Context, a *API, b []byte) error
}

// unary makes an apiCall of a handler whose request is a *Req.
func unary[Req any, PReq interface {
	*Req
	proto.Message
}, Resp any](name string, h func(*API, context.Context, PReq) (Resp, error)) apiCall {
	return apiCall{name, func(ctx context.Context, a *API, b []byte) error {
		req := PReq(new(Req))
		if err := proto.Unmarshal(b, req); err != nil {
			return nil // the gRPC server refuses what does not decode
		}
		_, err := h(a, ctx, req)
		return err
	}}
}

var apiCalls = []apiCall{
	unary[api.GetLayoutRequest]("GetLayout", (*API).GetLayout),
	unary[api.NodeStats]("ReportStats", (*API).ReportStats),
	unary[api.AgentStats]("ReportAgentStats", (*API).ReportAgentStats),
	unary[api.ListDirectoryRequest]("ListDirectory", (*API).ListDirectory),
	unary[api.PinRequest]("Pin", (*API).Pin),
	unary[api.PinRequest]("Unpin", (*API).Unpin),
	unary[api.ListPartitionsRequest]("ListPartitions", (*API).ListPartitions),
	unary[api.SetWeightsRequest]("SetWeights", (*API).SetWeights),
	unary[api.StatusRequest]("Status", (*API).Status),
	unary[api.SetLoopsRequest]("SetLoops", (*API).SetLoops),
	unary[api.QoSDumpRequest]("QoSDump", (*API).QoSDump),
	unary[api.QoSSetRequest]("QoSSet", (*API).QoSSet),
	unary[api.QoSGetRequest]("QoSGet", (*API).QoSGet),
	unary[api.QoSGetRequest]("QoSRemove", (*API).QoSRemove),
}

// FuzzAPI feeds the API's handlers arbitrary requests, as a gRPC client
// could send them: none panics, and each refusal is a gRPC status with a
// code that says why (not Unknown) and a message. `go test` runs the seeds.
func FuzzAPI(f *testing.F) {
	seed := func(name string, m proto.Message) {
		for i, c := range apiCalls {
			if c.name == name {
				b, err := proto.Marshal(m)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(uint8(i), b)
				return
			}
		}
		f.Fatalf("no call %s", name)
	}
	for i := range apiCalls {
		f.Add(uint8(i), []byte{})
		f.Add(uint8(i), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	}
	seed("Pin", &api.PinRequest{Key: []byte("hot")})
	seed("Pin", &api.PinRequest{Key: make([]byte, 70000)})
	seed("Unpin", &api.PinRequest{Key: []byte("never-pinned")})
	seed("SetWeights", &api.SetWeightsRequest{Target: &api.SetWeightsRequest_Partition{Partition: 3}, Weights: []uint32{1, 2, 3}})
	seed("SetWeights", &api.SetWeightsRequest{Target: &api.SetWeightsRequest_Partition{Partition: 1 << 31}, Weights: []uint32{1}})
	seed("SetWeights", &api.SetWeightsRequest{Target: &api.SetWeightsRequest_Key{Key: []byte("k")}, Weights: []uint32{0, 0, 0}})
	seed("SetWeights", &api.SetWeightsRequest{Target: &api.SetWeightsRequest_Partition{Partition: 0}, Weights: []uint32{1 << 31, 1 << 31, 1 << 31}})
	seed("ReportStats", &api.NodeStats{Node: 1, Version: 1, HotKeys: []*api.KeyCount{{Key: []byte("hot"), Count: 5}},
		Trees: []*api.TreeStats{{Position: 9, Reads: 1, MeanReadLatencyUs: -1}}})
	seed("ReportStats", &api.NodeStats{Node: 0xffff_ffff})
	seed("ReportAgentStats", &api.AgentStats{Agent: "a", Hits: []*api.SlotHits{{KeyHash: []byte{1, 2, 3}, Hits: 1}}})
	seed("ReportAgentStats", &api.AgentStats{Agent: "a", SketchRows: 1 << 30, SketchCols: 1 << 30,
		Sketch: []*api.SketchCell{{Index: 1 << 31, Count: 1}}})
	seed("QoSSet", &api.QoSSetRequest{Tenant: "gold", Policy: &api.QoSPolicy{Reservation: 5, Limit: 1}})
	seed("QoSSet", &api.QoSSetRequest{Tenant: "gold", Id: 4096, Policy: &api.QoSPolicy{Weight: -1}})
	seed("QoSSet", &api.QoSSetRequest{Defaults: true})
	seed("QoSGet", &api.QoSGetRequest{Tenant: "nobody"})
	seed("QoSRemove", &api.QoSGetRequest{Tenant: "nobody"})
	seed("SetLoops", &api.SetLoopsRequest{Paused: true})
	f.Fuzz(func(t *testing.T, method uint8, msg []byte) {
		c := apiCalls[int(method)%len(apiCalls)]
		ctl, _, _ := testController(t)
		defer ctl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- c.call(ctx, NewAPI(ctl), msg) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s(%x): no answer in 10s", c.name, msg)
		}
		if err == nil {
			return
		}
		st, ok := status.FromError(err)
		if !ok || st.Code() == codes.Unknown || st.Message() == "" {
			t.Fatalf("%s(%x): error %v: want a gRPC status that says why", c.name, msg, err)
		}
	})
}
