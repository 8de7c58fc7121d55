package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/api"
)

// notLeaderReason marks a follower's refusal (an errdetails.ErrorInfo);
// its metadata name the leader.
const notLeaderReason = "NOT_LEADER"

// notLeaderStatus is a follower's refusal as a gRPC status: Unavailable,
// naming the leader's API address in an ErrorInfo when it is known.
func notLeaderStatus(e *NotLeaderError) error {
	st := status.New(codes.Unavailable, e.Error())
	info := &errdetails.ErrorInfo{Reason: notLeaderReason, Domain: "netdir",
		Metadata: map[string]string{"leader_id": e.Leader.ID, "leader_api": e.Leader.API}}
	if d, err := st.WithDetails(info); err == nil {
		st = d
	}
	return st.Err()
}

// LeaderHint reports whether err is a follower's refusal, and the leader's
// API address it names ("" while none is known).
func LeaderHint(err error) (addr string, notLeader bool) {
	st, ok := status.FromError(err)
	if !ok {
		return "", false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == notLeaderReason {
			return info.GetMetadata()["leader_api"], true
		}
	}
	return "", false
}

// Controllers reaches the API of whichever of several controllers leads:
// it calls the last one that answered, follows a follower's hint to the
// leader, and tries the others in turn while a controller is unreachable
// or no leader is known (an election).
type Controllers struct {
	opts  []grpc.DialOption
	mu    sync.Mutex
	addrs []string // the configured ones, then hinted ones
	cur   int
	conns map[string]*grpc.ClientConn
}

// DialControllers returns a client of the controllers at addrs; it
// connects lazily.
func DialControllers(addrs []string, opts ...grpc.DialOption) (*Controllers, error) {
	if len(addrs) == 0 {
		return nil, errors.New("controller: no controller addresses")
	}
	return &Controllers{opts: opts, addrs: slices.Clone(addrs), conns: map[string]*grpc.ClientConn{}}, nil
}

// Current is the address Call tries first: the leader, once one answered.
func (cs *Controllers) Current() string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.addrs[cs.cur]
}

func (cs *Controllers) client(addr string) (api.ControllerClient, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	conn, ok := cs.conns[addr]
	if !ok {
		var err error
		if conn, err = grpc.NewClient(addr, cs.opts...); err != nil {
			return nil, err
		}
		cs.conns[addr] = conn
	}
	return api.NewControllerClient(conn), nil
}

// follow makes the next call go to addr (a hint), or, for "", to the next
// address.
func (cs *Controllers) follow(addr string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if addr == "" {
		cs.cur = (cs.cur + 1) % len(cs.addrs)
		return
	}
	i := slices.Index(cs.addrs, addr)
	if i < 0 {
		cs.addrs = append(cs.addrs, addr)
		i = len(cs.addrs) - 1
	}
	cs.cur = i
}

// Call calls f with the leader's client until it answers or ctx ends: a
// refusal naming the leader is followed at once; an unreachable controller,
// or a refusal naming none, moves on to the next address (pausing after a
// whole round of them). Other errors are f's.
func (cs *Controllers) Call(ctx context.Context, f func(context.Context, api.ControllerClient) error) error {
	for tries := 1; ; tries++ {
		addr := cs.Current()
		c, err := cs.client(addr)
		if err != nil {
			return fmt.Errorf("controller %s: %w", addr, err)
		}
		err = f(ctx, c)
		hint, notLeader := LeaderHint(err)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("controller %s: %w", addr, err)
		case hint != "" && hint != addr:
			cs.follow(hint)
			continue
		case !notLeader && status.Code(err) != codes.Unavailable:
			return fmt.Errorf("controller %s: %w", addr, err)
		}
		cs.follow("")
		if tries%len(cs.addrs) == 0 {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("controller %s: %w", addr, err)
			}
		}
	}
}

// Close closes the connections.
func (cs *Controllers) Close() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var errs []error
	for _, c := range cs.conns {
		errs = append(errs, c.Close())
	}
	clear(cs.conns)
	return errors.Join(errs...)
}
