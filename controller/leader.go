package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/internal/grpcsec"
)

// notLeaderReason marks a follower's refusal (an errdetails.ErrorInfo);
// its metadata name the leader.
const notLeaderReason = "NOT_LEADER"

// NotLeaderStatus is a follower's refusal as a gRPC status: Unavailable,
// naming the leader's API address in an ErrorInfo when it is known.
func NotLeaderStatus(e *NotLeaderError) error {
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

// Client is the client of the controller Call tries first (the leader,
// once one answered), and its address: for a caller that holds a stream
// (a directory subscription) rather than making calls, and reports how
// it ended with Next.
func (cs *Controllers) Client() (api.ControllerClient, string, error) {
	addr := cs.Current()
	c, err := cs.client(addr)
	if err != nil {
		return nil, addr, fmt.Errorf("controller %s: %w", addr, err)
	}
	return c, addr, nil
}

// Next moves past err, the failure of a call to addr: a refusal naming
// the leader makes the leader current (hinted); an unreachable controller,
// or a refusal naming none, makes the next address current. It reports
// whether err was one of those (another controller may answer); other
// errors change nothing.
func (cs *Controllers) Next(addr string, err error) (hinted, moved bool) {
	hint, notLeader := LeaderHint(err)
	switch {
	case err == nil:
		return false, false
	case hint != "" && hint != addr:
		cs.follow(hint)
		return true, true
	case !notLeader && (status.Code(err) != codes.Unavailable || grpcsec.HandshakeFailed(err)):
		return false, false // a TLS misconfiguration is no reason to try others
	}
	cs.follow("")
	return false, true
}

// Call calls f with the leader's client until it answers or ctx ends: a
// refusal naming the leader is followed at once; an unreachable controller,
// or a refusal naming none, moves on to the next address (pausing after a
// whole round of them). Other errors are f's.
func (cs *Controllers) Call(ctx context.Context, f func(context.Context, api.ControllerClient) error) error {
	start := time.Now()
	for tries := 1; ; tries++ {
		c, addr, err := cs.Client()
		if err != nil {
			return err
		}
		err = f(ctx, c)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return callError(addr, tries, time.Since(start), err)
		}
		hinted, moved := cs.Next(addr, err)
		switch {
		case hinted:
			continue
		case !moved:
			return callError(addr, 1, 0, err)
		}
		if tries%cs.count() == 0 {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return callError(addr, tries, time.Since(start), err)
			}
		}
	}
}

// callError is a call's final error: the controller it reached last, how
// long it tried when it gave up, and, for a TLS mismatch, what to check.
func callError(addr string, tries int, took time.Duration, err error) error {
	what := "controller " + addr
	if tries > 1 {
		what += fmt.Sprintf(": no answer after %d tries in %v", tries, took.Round(100*time.Millisecond))
	}
	switch {
	case grpcsec.HandshakeFailed(err):
		return fmt.Errorf("%s: TLS handshake failed (check the CA and certificates): %w", what, err)
	case strings.Contains(err.Error(), "error reading server preface"):
		return fmt.Errorf("%s (if it speaks TLS, give its CA): %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Ask makes one unary call at the leader (Call): rpc is a method
// expression of the API's client, such as api.ControllerClient.Status.
func Ask[Req, Resp any](ctx context.Context, cs *Controllers,
	rpc func(api.ControllerClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	var resp Resp
	err := cs.Call(ctx, func(ctx context.Context, c api.ControllerClient) error {
		var err error
		resp, err = rpc(c, ctx, req)
		return err
	})
	return resp, err
}

func (cs *Controllers) count() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.addrs)
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
