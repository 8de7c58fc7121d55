package p4rt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	p4config "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// ErrNotPrimary is returned when another controller holds a higher election
// id: this client is a backup and may only read.
var ErrNotPrimary = errors.New("p4rt: not the primary controller")

// Config says which device to drive and as whom.
type Config struct {
	Addr     string // gRPC address of the P4Runtime server
	DeviceID uint64
	// Election is the election id (low 64 bits); higher wins. 0 makes a
	// standby client, which holds no session until Arbitrate.
	Election uint64
	// OnPacketIn and OnDigest, if set, receive stream messages. Digest lists
	// are acked before OnDigest is called, so the switch may send more.
	OnPacketIn func(*p4.PacketIn)
	OnDigest   func(*p4.DigestList)
	// OnPrimary is called after every (re)arbitration that made this client
	// primary: the place to re-push pipeline and state after a reconnect.
	OnPrimary func(ctx context.Context, c *Client) error
	Log       *slog.Logger
	// Creds secure the channel (TLS, for a switch that speaks it); nil:
	// plaintext, as BMv2 and the software switch on loopback expect.
	Creds credentials.TransportCredentials
}

// Client is a P4Runtime session with one device.
type Client struct {
	cfg  Config
	conn *grpc.ClientConn
	rt   p4.P4RuntimeClient

	mu       sync.Mutex
	election uint64
	sessions uint64 // sessions opened
	stream   p4.P4Runtime_StreamChannelClient
	end      context.CancelFunc // ends stream
	primary  bool
	arbErr   error
	arbDone  chan struct{}
	wake     chan struct{} // Arbitrate and Release tell Run
	sendMu   sync.Mutex
}

// Reconnecting: the gRPC channel's and Run's retries are both at most
// retryMax apart, so a switch that comes back is in session again within
// about two of them.
const (
	retryMin = 20 * time.Millisecond
	retryMax = 100 * time.Millisecond
)

// Dial connects, opens the stream channel and arbitrates. It returns
// ErrNotPrimary (with a usable read-only client) if another controller is
// primary.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	bo := backoff.Config{BaseDelay: retryMin, Multiplier: 1.6, Jitter: 0.2, MaxDelay: retryMax}
	creds := cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: time.Second}))
	if err != nil {
		return nil, fmt.Errorf("p4rt: %s: %w", cfg.Addr, err)
	}
	c := &Client{cfg: cfg, conn: conn, rt: p4.NewP4RuntimeClient(conn), election: cfg.Election,
		wake: make(chan struct{}, 1)}
	if cfg.Election == 0 {
		return c, nil
	}
	if err := c.open(ctx); err != nil {
		if errors.Is(err, ErrNotPrimary) {
			return c, err
		}
		conn.Close()
		return nil, err
	}
	return c, nil
}

// Close ends the session.
func (c *Client) Close() error { return c.conn.Close() }

// Primary reports whether this client is the primary controller.
func (c *Client) Primary() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

func (c *Client) electionID() *p4.Uint128 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &p4.Uint128{High: 0, Low: c.election}
}

// Session numbers the current session (it grows with every one opened), so
// a caller can tell whether what it did for a session was for this one.
func (c *Client) Session() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions
}

// Arbitrate makes Run open a new session with the given election id (a new
// raft leader's: ElectionID in package controller), ending the current
// one; Run calls OnPrimary once the client is primary.
func (c *Client) Arbitrate(election uint64) {
	c.mu.Lock()
	c.election = election
	c.mu.Unlock()
	c.poke()
}

// Release ends the session (a leader stepping down): the client stays a
// standby, with no session, until Arbitrate.
func (c *Client) Release() {
	c.mu.Lock()
	c.election = 0
	c.mu.Unlock()
	c.poke()
}

func (c *Client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// endStream ends the current session, if any.
func (c *Client) endStream() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end != nil {
		c.end()
	}
	c.stream, c.end, c.primary = nil, nil, false
}

// open starts a stream and waits for the arbitration answer.
func (c *Client) open(ctx context.Context) error {
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := c.rt.StreamChannel(sctx)
	if err != nil {
		cancel()
		return fmt.Errorf("p4rt: stream to %s: %w", c.cfg.Addr, err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.stream, c.end, c.arbDone, c.arbErr, c.primary = stream, cancel, done, nil, false
	c.sessions++
	c.mu.Unlock()
	if err := c.send(&p4.StreamMessageRequest{Update: &p4.StreamMessageRequest_Arbitration{
		Arbitration: &p4.MasterArbitrationUpdate{DeviceId: c.cfg.DeviceID, ElectionId: c.electionID()},
	}}); err != nil {
		cancel()
		return fmt.Errorf("p4rt: arbitration: %w", err)
	}
	go c.recv(stream, cancel)
	select {
	case <-done:
	case <-ctx.Done():
		cancel()
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.arbErr != nil {
		return c.arbErr
	}
	if !c.primary {
		return ErrNotPrimary
	}
	return nil
}

func (c *Client) send(m *p4.StreamMessageRequest) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	s := c.stream
	c.mu.Unlock()
	return s.Send(m)
}

// recv dispatches stream messages until the stream ends.
func (c *Client) recv(s p4.P4Runtime_StreamChannelClient, cancel context.CancelFunc) {
	defer cancel()
	first := true
	for {
		m, err := s.Recv()
		if err != nil {
			c.mu.Lock()
			if first {
				c.arbErr = fmt.Errorf("p4rt: stream: %w", err)
				close(c.arbDone)
			}
			c.primary = false
			c.mu.Unlock()
			if err != io.EOF {
				c.cfg.Log.Debug("p4runtime stream ended", "addr", c.cfg.Addr, "err", err)
			}
			return
		}
		switch u := m.GetUpdate().(type) {
		case *p4.StreamMessageResponse_Arbitration:
			// OK means we are primary; anything else (ALREADY_EXISTS) that
			// another election id is.
			isPrimary := u.Arbitration.GetStatus().GetCode() == int32(code.Code_OK)
			c.mu.Lock()
			c.primary = isPrimary
			if first {
				close(c.arbDone)
				first = false
			}
			c.mu.Unlock()
		case *p4.StreamMessageResponse_Packet:
			if c.cfg.OnPacketIn != nil {
				c.cfg.OnPacketIn(u.Packet)
			}
		case *p4.StreamMessageResponse_Digest:
			ack := &p4.StreamMessageRequest{Update: &p4.StreamMessageRequest_DigestAck{
				DigestAck: &p4.DigestListAck{DigestId: u.Digest.GetDigestId(), ListId: u.Digest.GetListId()},
			}}
			if err := c.send(ack); err != nil {
				c.cfg.Log.Warn("digest ack failed", "err", err)
			}
			if c.cfg.OnDigest != nil {
				c.cfg.OnDigest(u.Digest)
			}
		case *p4.StreamMessageResponse_Error:
			c.cfg.Log.Warn("p4runtime stream error", "status", u.Error.GetCanonicalCode(), "msg", u.Error.GetMessage())
		}
	}
}

// Run keeps the session alive until ctx ends: when the stream breaks it
// redials every retryMin to retryMax and re-arbitrates, and it opens a new
// session on Arbitrate and ends it on Release; it calls OnPrimary whenever
// it becomes primary again.
func (c *Client) Run(ctx context.Context) error {
	retry := retryMin
	for {
		c.mu.Lock()
		s, election := c.stream, c.election
		c.mu.Unlock()
		var broke <-chan struct{}
		if s != nil {
			broke = s.Context().Done()
		}
		if s == nil && election != 0 {
			broke = closed // a session to open
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.wake:
			c.endStream()
		case <-broke:
			select {
			case <-time.After(retry):
			case <-c.wake:
				c.endStream()
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		c.mu.Lock()
		election = c.election
		c.mu.Unlock()
		if election == 0 {
			continue // a standby until Arbitrate
		}
		err := c.open(ctx)
		switch {
		case err == nil:
			retry = retryMin
			c.cfg.Log.Info("p4runtime session established", "addr", c.cfg.Addr, "election_id", election)
			if c.cfg.OnPrimary != nil {
				if err := c.cfg.OnPrimary(ctx, c); err != nil && ctx.Err() == nil {
					c.cfg.Log.Warn("re-push after reconnect failed", "err", err)
				}
			}
		case errors.Is(err, ErrNotPrimary):
			retry = retryMin
		default:
			retry = min(retry*2, retryMax)
			c.cfg.Log.Debug("p4runtime reconnect failed", "addr", c.cfg.Addr, "err", err, "retry_in", retry)
		}
	}
}

// closed is a closed channel: a wait that is over.
var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// SetPipeline pushes P4Info and the target's device config (BMv2 JSON, or
// Tofino's binary and context) with VERIFY_AND_COMMIT.
func (c *Client) SetPipeline(ctx context.Context, info *p4config.P4Info, deviceConfig []byte) error {
	_, err := c.rt.SetForwardingPipelineConfig(ctx, &p4.SetForwardingPipelineConfigRequest{
		DeviceId:   c.cfg.DeviceID,
		ElectionId: c.electionID(),
		Action:     p4.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT,
		Config:     &p4.ForwardingPipelineConfig{P4Info: info, P4DeviceConfig: deviceConfig},
	})
	return wrap("set pipeline", err)
}

// Write sends updates in one batch.
func (c *Client) Write(ctx context.Context, updates ...*p4.Update) error {
	if len(updates) == 0 {
		return nil
	}
	_, err := c.rt.Write(ctx, &p4.WriteRequest{
		DeviceId:   c.cfg.DeviceID,
		ElectionId: c.electionID(),
		Updates:    updates,
		Atomicity:  p4.WriteRequest_CONTINUE_ON_ERROR,
	})
	return wrap("write", err)
}

// Insert, Modify and Delete wrap table entries as updates.
func Insert(te *p4.TableEntry) *p4.Update { return TableUpdate(p4.Update_INSERT, te) }
func Modify(te *p4.TableEntry) *p4.Update { return TableUpdate(p4.Update_MODIFY, te) }
func Delete(te *p4.TableEntry) *p4.Update { return TableUpdate(p4.Update_DELETE, te) }

// TableUpdate wraps a table entry as an update of type t.
func TableUpdate(t p4.Update_Type, te *p4.TableEntry) *p4.Update {
	return &p4.Update{Type: t, Entity: &p4.Entity{Entity: &p4.Entity_TableEntry{TableEntry: te}}}
}

// MulticastGroup builds a PRE multicast group update (the VSB group).
func MulticastGroup(t p4.Update_Type, group uint32, ports []uint32) *p4.Update {
	g := &p4.MulticastGroupEntry{MulticastGroupId: group}
	for i, p := range ports {
		g.Replicas = append(g.Replicas, &p4.Replica{
			PortKind: &p4.Replica_EgressPort{EgressPort: p}, Instance: uint32(i),
		})
	}
	return &p4.Update{Type: t, Entity: &p4.Entity{Entity: &p4.Entity_PacketReplicationEngineEntry{
		PacketReplicationEngineEntry: &p4.PacketReplicationEngineEntry{
			Type: &p4.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: g},
		},
	}}}
}

// Read returns every entity matching the filters.
func (c *Client) Read(ctx context.Context, filters ...*p4.Entity) ([]*p4.Entity, error) {
	rc, err := c.rt.Read(ctx, &p4.ReadRequest{DeviceId: c.cfg.DeviceID, Entities: filters})
	if err != nil {
		return nil, wrap("read", err)
	}
	var out []*p4.Entity
	for {
		r, err := rc.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, wrap("read", err)
		}
		out = append(out, r.GetEntities()...)
	}
}

// ReadTable returns a table's entries.
func (c *Client) ReadTable(ctx context.Context, tableID uint32) ([]*p4.TableEntry, error) {
	es, err := c.Read(ctx, &p4.Entity{Entity: &p4.Entity_TableEntry{TableEntry: &p4.TableEntry{TableId: tableID}}})
	if err != nil {
		return nil, err
	}
	out := make([]*p4.TableEntry, 0, len(es))
	for _, e := range es {
		out = append(out, e.GetTableEntry())
	}
	return out, nil
}

// ReadCounter returns all cells of an indexed counter.
func (c *Client) ReadCounter(ctx context.Context, counterID uint32) ([]*p4.CounterEntry, error) {
	es, err := c.Read(ctx, &p4.Entity{Entity: &p4.Entity_CounterEntry{CounterEntry: &p4.CounterEntry{CounterId: counterID}}})
	if err != nil {
		return nil, err
	}
	out := make([]*p4.CounterEntry, 0, len(es))
	for _, e := range es {
		out = append(out, e.GetCounterEntry())
	}
	return out, nil
}

// EnableDigest configures a digest's batching on the device.
func (c *Client) EnableDigest(ctx context.Context, digestID uint32, maxList int32, timeout time.Duration) error {
	return c.Write(ctx, &p4.Update{Type: p4.Update_INSERT, Entity: &p4.Entity{Entity: &p4.Entity_DigestEntry{
		DigestEntry: &p4.DigestEntry{DigestId: digestID, Config: &p4.DigestEntry_Config{
			MaxTimeoutNs: timeout.Nanoseconds(), MaxListSize: maxList, AckTimeoutNs: time.Second.Nanoseconds(),
		}},
	}}})
}

// PacketOut sends a packet through the device's CPU port.
func (c *Client) PacketOut(payload []byte, meta ...*p4.PacketMetadata) error {
	return c.send(&p4.StreamMessageRequest{Update: &p4.StreamMessageRequest_Packet{
		Packet: &p4.PacketOut{Payload: payload, Metadata: meta},
	}})
}

// wrap names the operation and keeps the gRPC status for errors.Is checks
// with status.Code.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err)
	return &Error{Op: op, Status: st}
}

// Error is a failed P4Runtime call.
type Error struct {
	Op     string
	Status *status.Status
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("p4rt: %s: %s: %s", e.Op, e.Status.Code(), e.Status.Message())
	// A batch's failures come as one p4.Error per update: name the first.
	for i, d := range e.Status.Details() {
		if pe, ok := d.(*p4.Error); ok && pe.GetCanonicalCode() != int32(code.Code_OK) {
			return fmt.Sprintf("%s (update %d: %s: %s)", msg, i, codes.Code(pe.GetCanonicalCode()), pe.GetMessage())
		}
	}
	return msg
}

// GRPCStatus lets status.Code(err) see through the wrapper.
func (e *Error) GRPCStatus() *status.Status { return e.Status }
