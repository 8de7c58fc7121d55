package bmv2test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"strings"
	"sync"
	"time"

	p4cfg "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
)

// P4Info indexes a P4Info by name: tables with their match fields and
// actions, actions with their parameters, counters. Names are the fully
// qualified ones p4c writes ("NetdirIngress.netdir.directory.slots").
type P4Info struct {
	Info     *p4cfg.P4Info
	tables   map[string]*p4cfg.Table
	actions  map[string]*p4cfg.Action
	counters map[string]*p4cfg.Counter
}

// LoadP4Info reads a text-format P4Info (p4c's --p4runtime-files *.txtpb).
func LoadP4Info(path string) (*P4Info, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	info := &p4cfg.P4Info{}
	if err := prototext.Unmarshal(b, info); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pi := &P4Info{
		Info:     info,
		tables:   map[string]*p4cfg.Table{},
		actions:  map[string]*p4cfg.Action{},
		counters: map[string]*p4cfg.Counter{},
	}
	for _, t := range info.Tables {
		pi.tables[t.Preamble.Name] = t
	}
	for _, a := range info.Actions {
		pi.actions[a.Preamble.Name] = a
	}
	for _, c := range info.Counters {
		pi.counters[c.Preamble.Name] = c
	}
	return pi, nil
}

// Table returns a table by name.
func (pi *P4Info) Table(name string) (*p4cfg.Table, error) {
	t, ok := pi.tables[name]
	if !ok {
		return nil, fmt.Errorf("p4info: no table %q", name)
	}
	return t, nil
}

// Counter returns a counter by name.
func (pi *P4Info) Counter(name string) (*p4cfg.Counter, error) {
	c, ok := pi.counters[name]
	if !ok {
		return nil, fmt.Errorf("p4info: no counter %q", name)
	}
	return c, nil
}

// Canonical is P4Runtime's canonical byte string for v: big-endian with no
// leading zero bytes, and a single zero byte for 0 (P4Runtime spec 8.4).
// PI accepts padded strings too, but reads back canonical ones, and other
// servers (Stratum) reject padded ones; so netdir always writes canonical.
func Canonical(v *big.Int) []byte {
	b := v.Bytes()
	if len(b) == 0 {
		return []byte{0}
	}
	return b
}

// U64 is Canonical for a uint64.
func U64(v uint64) []byte { return Canonical(new(big.Int).SetUint64(v)) }

// Match is one match field's value by name.
type Match struct {
	Field string
	Exact []byte
	// LPM: Exact is the value, PrefixLen the prefix length.
	LPM       bool
	PrefixLen int32
	// Range: Low..High inclusive.
	Range     bool
	Low, High []byte
}

// Param is one action parameter by name.
type Param struct {
	Name  string
	Value []byte
}

// Entry builds a table entry from names. priority is for range and ternary
// tables (0 otherwise).
func (pi *P4Info) Entry(table string, matches []Match, action string, params []Param, priority int32) (*p4.TableEntry, error) {
	t, err := pi.Table(table)
	if err != nil {
		return nil, err
	}
	te := &p4.TableEntry{TableId: t.Preamble.Id, Priority: priority}
	for _, m := range matches {
		var mf *p4cfg.MatchField
		for _, f := range t.MatchFields {
			if f.Name == m.Field {
				mf = f
			}
		}
		if mf == nil {
			return nil, fmt.Errorf("p4info: table %s has no match field %q", table, m.Field)
		}
		fm := &p4.FieldMatch{FieldId: mf.Id}
		switch {
		case m.LPM:
			fm.FieldMatchType = &p4.FieldMatch_Lpm{Lpm: &p4.FieldMatch_LPM{Value: m.Exact, PrefixLen: m.PrefixLen}}
		case m.Range:
			fm.FieldMatchType = &p4.FieldMatch_Range_{Range: &p4.FieldMatch_Range{Low: m.Low, High: m.High}}
		default:
			fm.FieldMatchType = &p4.FieldMatch_Exact_{Exact: &p4.FieldMatch_Exact{Value: m.Exact}}
		}
		te.Match = append(te.Match, fm)
	}
	act, err := pi.Action(action, params)
	if err != nil {
		return nil, err
	}
	te.Action = &p4.TableAction{Type: &p4.TableAction_Action{Action: act}}
	return te, nil
}

// Action builds an action call from names.
func (pi *P4Info) Action(name string, params []Param) (*p4.Action, error) {
	a, ok := pi.actions[name]
	if !ok {
		return nil, fmt.Errorf("p4info: no action %q", name)
	}
	act := &p4.Action{ActionId: a.Preamble.Id}
	for _, p := range params {
		var id uint32
		for _, ap := range a.Params {
			if ap.Name == p.Name {
				id = ap.Id
			}
		}
		if id == 0 {
			return nil, fmt.Errorf("p4info: action %s has no parameter %q", name, p.Name)
		}
		act.Params = append(act.Params, &p4.Action_Param{ParamId: id, Value: p.Value})
	}
	return act, nil
}

// Client is a P4Runtime client that holds mastership of one device.
type Client struct {
	conn     *grpc.ClientConn
	rt       p4.P4RuntimeClient
	stream   p4.P4Runtime_StreamChannelClient
	cancel   context.CancelFunc
	deviceID uint64
	election *p4.Uint128
	mu       sync.Mutex
}

// Dial connects to target (a gRPC address; "unix:///path" for a socket) and
// becomes primary controller for the device.
func Dial(ctx context.Context, target string, deviceID uint64) (*Client, error) {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, rt: p4.NewP4RuntimeClient(conn), deviceID: deviceID,
		election: &p4.Uint128{High: 0, Low: 1}}
	sctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	stream, err := c.rt.StreamChannel(sctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.stream = stream
	if err := stream.Send(&p4.StreamMessageRequest{Update: &p4.StreamMessageRequest_Arbitration{
		Arbitration: &p4.MasterArbitrationUpdate{DeviceId: deviceID, ElectionId: c.election},
	}}); err != nil {
		c.Close()
		return nil, err
	}
	got := make(chan error, 1)
	go func() {
		first := true
		for {
			m, err := stream.Recv()
			if err != nil {
				if first {
					got <- err
				}
				return
			}
			if a := m.GetArbitration(); a != nil && first {
				first = false
				if code := codes.Code(a.GetStatus().GetCode()); code != codes.OK {
					got <- fmt.Errorf("p4runtime: arbitration: %v %s", code, a.GetStatus().GetMessage())
				} else {
					got <- nil
				}
			}
			// Digests would arrive here; netdir uses none (the controller
			// reads counters), so there is nothing to acknowledge.
		}
	}()
	select {
	case err := <-got:
		if err != nil {
			c.Close()
			return nil, err
		}
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
	return c, nil
}

// Close drops mastership and the connection.
func (c *Client) Close() {
	if c.cancel != nil {
		c.cancel()
	}
	if c.conn != nil {
		c.conn.Close()
	}
}

// SetPipeline pushes the P4Info and the BMv2 JSON (VERIFY_AND_COMMIT). On
// BMv2 this also clears every table, register and counter.
func (c *Client) SetPipeline(ctx context.Context, info *p4cfg.P4Info, deviceConfig []byte) error {
	_, err := c.rt.SetForwardingPipelineConfig(ctx, &p4.SetForwardingPipelineConfigRequest{
		DeviceId:   c.deviceID,
		ElectionId: c.election,
		Action:     p4.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT,
		Config:     &p4.ForwardingPipelineConfig{P4Info: info, P4DeviceConfig: deviceConfig},
	})
	return err
}

// Write sends updates in one batch.
func (c *Client) Write(ctx context.Context, updates ...*p4.Update) error {
	if len(updates) == 0 {
		return nil
	}
	_, err := c.rt.Write(ctx, &p4.WriteRequest{DeviceId: c.deviceID, ElectionId: c.election,
		Atomicity: p4.WriteRequest_CONTINUE_ON_ERROR, Updates: updates})
	return writeError(err)
}

// writeError unpacks P4Runtime's per-update errors (google.rpc.Status
// details carrying p4.v1.Error) into one message.
func writeError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var msgs []error
	for i, d := range st.Details() {
		if pe, ok := d.(*p4.Error); ok && codes.Code(pe.CanonicalCode) != codes.OK {
			msgs = append(msgs, fmt.Errorf("update %d: %v: %s", i, codes.Code(pe.CanonicalCode), pe.Message))
		}
	}
	if len(msgs) == 0 {
		return err
	}
	return fmt.Errorf("p4runtime write: %w", errors.Join(msgs...))
}

func containsCode(err error, code codes.Code) bool {
	return err != nil && (status.Code(err) == code || strings.Contains(err.Error(), code.String()))
}

// Read returns every entity that the given (possibly wildcard) entities match.
func (c *Client) Read(ctx context.Context, entities ...*p4.Entity) ([]*p4.Entity, error) {
	rc, err := c.rt.Read(ctx, &p4.ReadRequest{DeviceId: c.deviceID, Entities: entities})
	if err != nil {
		return nil, err
	}
	var out []*p4.Entity
	for {
		r, err := rc.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r.Entities...)
	}
}

// Update wraps an entity in an update of the given type.
func Update(t p4.Update_Type, e *p4.Entity) *p4.Update { return &p4.Update{Type: t, Entity: e} }

// TableEntity wraps a table entry.
func TableEntity(te *p4.TableEntry) *p4.Entity {
	return &p4.Entity{Entity: &p4.Entity_TableEntry{TableEntry: te}}
}

// CounterEntity is a counter cell (index >= 0) or, with index < 0, every
// cell of the counter (a wildcard read).
func CounterEntity(id uint32, index int64, packets int64, withData bool) *p4.Entity {
	ce := &p4.CounterEntry{CounterId: id}
	if index >= 0 {
		ce.Index = &p4.Index{Index: index}
	}
	if withData {
		ce.Data = &p4.CounterData{PacketCount: packets}
	}
	return &p4.Entity{Entity: &p4.Entity_CounterEntry{CounterEntry: ce}}
}

// MulticastEntity is a PRE multicast group over ports (instance = position).
func MulticastEntity(group uint32, ports []uint32) *p4.Entity {
	g := &p4.MulticastGroupEntry{MulticastGroupId: group}
	for i, p := range ports {
		g.Replicas = append(g.Replicas, &p4.Replica{PortKind: &p4.Replica_EgressPort{EgressPort: p}, Instance: uint32(i)})
	}
	return &p4.Entity{Entity: &p4.Entity_PacketReplicationEngineEntry{
		PacketReplicationEngineEntry: &p4.PacketReplicationEngineEntry{
			Type: &p4.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: g},
		},
	}}
}

// waitReady retries f until it succeeds or the deadline passes.
func waitReady(ctx context.Context, every time.Duration, f func() error) error {
	var err error
	for {
		if err = f(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(every):
		}
	}
}
