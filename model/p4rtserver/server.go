// Package p4rtserver serves the P4Runtime gRPC service (the subset netdir's
// controller uses) for the software data plane, against the committed P4Info.
// So the controller drives the model, BMv2 and Tofino through identical calls.
//
// The server does the P4Runtime bookkeeping that every target shares:
// arbitration by election id, mastership checks, P4Info validation of every
// entity, the table store that answers ALREADY_EXISTS and NOT_FOUND, and
// reads. A Target gives the entities their meaning. Error codes follow the
// P4Runtime spec: writes or pipeline pushes without mastership get
// PERMISSION_DENIED, entities the P4Info does not name NOT_FOUND, malformed
// ones INVALID_ARGUMENT, and register access UNIMPLEMENTED (as on BMv2/PI).
package p4rtserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"sync"

	p4config "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/netdir/netdir/controller/p4rt"
)

// Target gives P4Runtime entities their meaning on a data plane. Calls are
// serialised by the server; entries have been validated against the P4Info.
type Target interface {
	// SetPipeline is called on every accepted pipeline push.
	SetPipeline(info *p4config.P4Info, deviceConfig []byte) error
	// ApplyTable applies one validated update to a table entry.
	ApplyTable(t p4.Update_Type, table *p4config.Table, action *p4config.Action, e *p4.TableEntry) error
	// ApplyMulticast applies one multicast group update.
	ApplyMulticast(t p4.Update_Type, g *p4.MulticastGroupEntry) error
	// ReadCounter returns cell index of an indexed counter.
	ReadCounter(c *p4config.Counter, index int64) (*p4.CounterData, error)
}

// Server is a P4Runtime server for one device.
type Server struct {
	p4.UnimplementedP4RuntimeServer
	deviceID uint64
	target   Target

	mu       sync.Mutex
	info     *p4config.P4Info
	cookie   uint64
	tables   map[uint32]*p4config.Table
	actions  map[uint32]*p4config.Action
	counters map[uint32]*p4config.Counter
	entries  map[uint32]map[string]*p4.TableEntry // table id → match key → entry
	groups   map[uint32]*p4.MulticastGroupEntry
	streams  map[*session]struct{}
}

type session struct {
	election *p4.Uint128
	send     chan *p4.StreamMessageResponse
}

// New returns a server for device deviceID.
func New(deviceID uint64, t Target) *Server {
	return &Server{
		deviceID: deviceID,
		target:   t,
		entries:  map[uint32]map[string]*p4.TableEntry{},
		groups:   map[uint32]*p4.MulticastGroupEntry{},
		streams:  map[*session]struct{}{},
	}
}

func less(a, b *p4.Uint128) bool {
	return a.GetHigh() < b.GetHigh() || (a.GetHigh() == b.GetHigh() && a.GetLow() < b.GetLow())
}

func same(a, b *p4.Uint128) bool { return a.GetHigh() == b.GetHigh() && a.GetLow() == b.GetLow() }

// primaryLocked returns the session with the highest election id.
func (s *Server) primaryLocked() *session {
	var p *session
	for ss := range s.streams {
		if ss.election != nil && (p == nil || less(p.election, ss.election)) {
			p = ss
		}
	}
	return p
}

// notifyLocked tells every session who is primary.
func (s *Server) notifyLocked() {
	p := s.primaryLocked()
	for ss := range s.streams {
		if ss.election == nil {
			continue
		}
		st := &rpcstatus.Status{Code: int32(code.Code_OK), Message: "primary"}
		if ss != p {
			st = &rpcstatus.Status{Code: int32(code.Code_ALREADY_EXISTS), Message: "backup: another controller is primary"}
		}
		m := &p4.StreamMessageResponse{Update: &p4.StreamMessageResponse_Arbitration{Arbitration: &p4.MasterArbitrationUpdate{
			DeviceId: s.deviceID, ElectionId: p.election, Status: st,
		}}}
		select {
		case ss.send <- m:
		default: // a stalled controller misses an update; it reads state on reconnect
		}
	}
}

// checkPrimary is the mastership rule for writes and pipeline pushes.
func (s *Server) checkPrimaryLocked(device uint64, election *p4.Uint128) error {
	if device != s.deviceID {
		return status.Errorf(codes.NotFound, "device %d not found (this is device %d)", device, s.deviceID)
	}
	p := s.primaryLocked()
	if p == nil || !same(p.election, election) {
		return status.Error(codes.PermissionDenied, "not the primary controller for this device")
	}
	return nil
}

// StreamChannel implements arbitration; packet-out is not supported by the
// model (it has no CPU port) and is answered with a stream error.
func (s *Server) StreamChannel(stream p4.P4Runtime_StreamChannelServer) error {
	ss := &session{send: make(chan *p4.StreamMessageResponse, 64)}
	s.mu.Lock()
	s.streams[ss] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, ss)
		s.notifyLocked()
		s.mu.Unlock()
	}()
	ctx := stream.Context()
	errc := make(chan error, 1)
	go func() {
		for {
			select {
			case m := <-ss.send:
				if err := stream.Send(m); err != nil {
					errc <- err
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		select {
		case err := <-errc:
			return err
		default:
		}
		switch u := m.GetUpdate().(type) {
		case *p4.StreamMessageRequest_Arbitration:
			a := u.Arbitration
			if a.GetDeviceId() != s.deviceID {
				return status.Errorf(codes.NotFound, "device %d not found", a.GetDeviceId())
			}
			if a.GetElectionId() == nil {
				return status.Error(codes.InvalidArgument, "arbitration without election id")
			}
			s.mu.Lock()
			for other := range s.streams {
				if other != ss && other.election != nil && same(other.election, a.GetElectionId()) {
					s.mu.Unlock()
					return status.Error(codes.InvalidArgument, "election id already in use by another controller")
				}
			}
			ss.election = a.GetElectionId()
			s.notifyLocked()
			s.mu.Unlock()
		case *p4.StreamMessageRequest_DigestAck:
			// The model sends no digests: counters carry the hot-key data.
		default:
			ss.send <- &p4.StreamMessageResponse{Update: &p4.StreamMessageResponse_Error{Error: &p4.StreamError{
				CanonicalCode: int32(code.Code_UNIMPLEMENTED), Message: "the software data plane has no CPU port",
			}}}
		}
	}
}

// SetForwardingPipelineConfig accepts a P4Info (and ignores the device
// config, which the software plane does not need).
func (s *Server) SetForwardingPipelineConfig(_ context.Context, r *p4.SetForwardingPipelineConfigRequest) (*p4.SetForwardingPipelineConfigResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkPrimaryLocked(r.GetDeviceId(), r.GetElectionId()); err != nil {
		return nil, err
	}
	cfg := r.GetConfig()
	switch r.GetAction() {
	case p4.SetForwardingPipelineConfigRequest_VERIFY,
		p4.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT,
		p4.SetForwardingPipelineConfigRequest_VERIFY_AND_SAVE,
		p4.SetForwardingPipelineConfigRequest_RECONCILE_AND_COMMIT:
	default:
		return nil, status.Errorf(codes.Unimplemented, "pipeline action %s", r.GetAction())
	}
	if cfg.GetP4Info() == nil {
		return nil, status.Error(codes.InvalidArgument, "no P4Info")
	}
	if r.GetAction() == p4.SetForwardingPipelineConfigRequest_VERIFY {
		return &p4.SetForwardingPipelineConfigResponse{}, nil
	}
	if err := s.target.SetPipeline(cfg.GetP4Info(), cfg.GetP4DeviceConfig()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "pipeline rejected: %v", err)
	}
	s.info = cfg.GetP4Info()
	s.cookie = cfg.GetCookie().GetCookie()
	s.tables = map[uint32]*p4config.Table{}
	s.actions = map[uint32]*p4config.Action{}
	s.counters = map[uint32]*p4config.Counter{}
	for _, t := range s.info.GetTables() {
		s.tables[t.GetPreamble().GetId()] = t
	}
	for _, a := range s.info.GetActions() {
		s.actions[a.GetPreamble().GetId()] = a
	}
	// A Tofino P4Info (p4c-barefoot, TNA) lists its counters as externs.
	for _, c := range append(s.info.GetCounters(), p4rt.TofinoCounters(s.info)...) {
		s.counters[c.GetPreamble().GetId()] = c
	}
	s.entries = map[uint32]map[string]*p4.TableEntry{}
	s.groups = map[uint32]*p4.MulticastGroupEntry{}
	return &p4.SetForwardingPipelineConfigResponse{}, nil
}

// GetForwardingPipelineConfig returns the P4Info.
func (s *Server) GetForwardingPipelineConfig(_ context.Context, r *p4.GetForwardingPipelineConfigRequest) (*p4.GetForwardingPipelineConfigResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.GetDeviceId() != s.deviceID {
		return nil, status.Errorf(codes.NotFound, "device %d not found", r.GetDeviceId())
	}
	if s.info == nil {
		return nil, status.Error(codes.FailedPrecondition, "no pipeline set")
	}
	return &p4.GetForwardingPipelineConfigResponse{Config: &p4.ForwardingPipelineConfig{
		P4Info: s.info, Cookie: &p4.ForwardingPipelineConfig_Cookie{Cookie: s.cookie},
	}}, nil
}

// Capabilities reports the P4Runtime version.
func (s *Server) Capabilities(context.Context, *p4.CapabilitiesRequest) (*p4.CapabilitiesResponse, error) {
	return &p4.CapabilitiesResponse{P4RuntimeApiVersion: "1.5.0"}, nil
}

// Write applies a batch; per-update failures come back as p4.Error details
// of an UNKNOWN status, as the spec's batch semantics require.
func (s *Server) Write(_ context.Context, r *p4.WriteRequest) (*p4.WriteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkPrimaryLocked(r.GetDeviceId(), r.GetElectionId()); err != nil {
		return nil, err
	}
	if s.info == nil {
		return nil, status.Error(codes.FailedPrecondition, "no pipeline set")
	}
	if r.GetAtomicity() != p4.WriteRequest_CONTINUE_ON_ERROR {
		return nil, status.Error(codes.Unimplemented, "only CONTINUE_ON_ERROR atomicity")
	}
	errs := make([]error, len(r.GetUpdates()))
	failed := false
	for i, u := range r.GetUpdates() {
		errs[i] = s.applyLocked(u)
		failed = failed || errs[i] != nil
	}
	if !failed {
		return &p4.WriteResponse{}, nil
	}
	st := status.New(codes.Unknown, "some updates failed")
	var details []*anypb.Any
	for _, err := range errs {
		pe := &p4.Error{CanonicalCode: int32(codes.OK)}
		if err != nil {
			e, _ := status.FromError(err)
			pe = &p4.Error{CanonicalCode: int32(e.Code()), Message: e.Message()}
		}
		a, _ := anypb.New(pe)
		details = append(details, a)
	}
	sp := st.Proto()
	sp.Details = details
	return nil, status.ErrorProto(sp)
}

func (s *Server) applyLocked(u *p4.Update) error {
	switch e := u.GetEntity().GetEntity().(type) {
	case *p4.Entity_TableEntry:
		return s.applyTableLocked(u.GetType(), e.TableEntry)
	case *p4.Entity_PacketReplicationEngineEntry:
		g := e.PacketReplicationEngineEntry.GetMulticastGroupEntry()
		if g == nil {
			return status.Error(codes.Unimplemented, "only multicast groups in the PRE")
		}
		_, exists := s.groups[g.GetMulticastGroupId()]
		if err := existence(u.GetType(), exists, fmt.Sprintf("multicast group %d", g.GetMulticastGroupId())); err != nil {
			return err
		}
		if err := s.target.ApplyMulticast(u.GetType(), g); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if u.GetType() == p4.Update_DELETE {
			delete(s.groups, g.GetMulticastGroupId())
		} else {
			s.groups[g.GetMulticastGroupId()] = proto.Clone(g).(*p4.MulticastGroupEntry)
		}
		return nil
	case *p4.Entity_RegisterEntry:
		return status.Error(codes.Unimplemented, "register writes are not supported (as on BMv2/PI)")
	default:
		return status.Errorf(codes.Unimplemented, "entity %T", e)
	}
}

func existence(t p4.Update_Type, exists bool, what string) error {
	switch t {
	case p4.Update_INSERT:
		if exists {
			return status.Errorf(codes.AlreadyExists, "%s exists", what)
		}
	case p4.Update_MODIFY, p4.Update_DELETE:
		if !exists {
			return status.Errorf(codes.NotFound, "%s not found", what)
		}
	default:
		return status.Errorf(codes.InvalidArgument, "update type %s", t)
	}
	return nil
}

// matchKey identifies an entry by its match fields, in field-id order, and
// its priority. It runs for every update of a batch, so it builds the key
// by hand, without fmt.
func matchKey(e *p4.TableEntry) string {
	ms := e.GetMatch()
	if !slices.IsSortedFunc(ms, byFieldID) {
		ms = slices.SortedFunc(slices.Values(ms), byFieldID)
	}
	b := make([]byte, 0, 64)
	b = strconv.AppendInt(append(b, "prio="...), int64(e.GetPriority()), 10)
	b = append(b, ';')
	for _, m := range ms {
		b = strconv.AppendUint(b, uint64(m.GetFieldId()), 10)
		b = append(b, '=')
		switch {
		case m.GetExact() != nil:
			b = hex.AppendEncode(b, m.GetExact().GetValue())
		case m.GetLpm() != nil:
			b = hex.AppendEncode(b, m.GetLpm().GetValue())
			b = strconv.AppendInt(append(b, '/'), int64(m.GetLpm().GetPrefixLen()), 10)
		case m.GetTernary() != nil:
			b = hex.AppendEncode(b, m.GetTernary().GetValue())
			b = hex.AppendEncode(append(b, '&'), m.GetTernary().GetMask())
		case m.GetRange() != nil:
			b = hex.AppendEncode(b, m.GetRange().GetLow())
			b = hex.AppendEncode(append(b, '.', '.'), m.GetRange().GetHigh())
		}
		b = append(b, ';')
	}
	return string(b)
}

func byFieldID(a, b *p4.FieldMatch) int { return cmp.Compare(a.GetFieldId(), b.GetFieldId()) }

// validateMatch checks an entry's key against the table's fields: every
// exact field present, others optional (omitted is "don't care"), values
// canonical and within width, LPM values zero past the prefix, ternary values
// inside their mask, ranges ordered, and a priority exactly when a ternary or
// range field is present.
func validateMatch(tbl *p4config.Table, e *p4.TableEntry) error {
	name := tbl.GetPreamble().GetName()
	seen := map[uint32]bool{}
	needsPriority := false
	for _, m := range e.GetMatch() {
		f := field(tbl, m.GetFieldId())
		if f == nil {
			return status.Errorf(codes.InvalidArgument, "%s: no match field id %d", name, m.GetFieldId())
		}
		if seen[f.GetId()] {
			return status.Errorf(codes.InvalidArgument, "%s.%s: given twice", name, f.GetName())
		}
		seen[f.GetId()] = true
		what := name + "." + f.GetName()
		w := f.GetBitwidth()
		bad := func(format string, args ...any) error {
			return status.Errorf(codes.InvalidArgument, what+": "+format, args...)
		}
		switch f.GetMatchType() {
		case p4config.MatchField_EXACT:
			if m.GetExact() == nil {
				return bad("want an exact match")
			}
			if err := canonical(m.GetExact().GetValue(), w); err != nil {
				return bad("%v", err)
			}
		case p4config.MatchField_LPM:
			l := m.GetLpm()
			if l == nil {
				return bad("want an LPM match")
			}
			if err := canonical(l.GetValue(), w); err != nil {
				return bad("%v", err)
			}
			if l.GetPrefixLen() < 1 || l.GetPrefixLen() > w {
				return bad("prefix length %d of %d bits", l.GetPrefixLen(), w)
			}
			if trailingSet(l.GetValue(), int(w-l.GetPrefixLen())) {
				return bad("bits set past the prefix")
			}
		case p4config.MatchField_TERNARY:
			t := m.GetTernary()
			if t == nil {
				return bad("want a ternary match")
			}
			if err := canonical(t.GetValue(), w); err != nil {
				return bad("%v", err)
			}
			if err := canonical(t.GetMask(), w); err != nil {
				return bad("mask: %v", err)
			}
			if outsideMask(t.GetValue(), t.GetMask()) {
				return bad("value has bits outside the mask")
			}
			needsPriority = true
		case p4config.MatchField_RANGE:
			r := m.GetRange()
			if r == nil {
				return bad("want a range match")
			}
			if err := canonical(r.GetLow(), w); err != nil {
				return bad("low: %v", err)
			}
			if err := canonical(r.GetHigh(), w); err != nil {
				return bad("high: %v", err)
			}
			if lo, hi := r.GetLow(), r.GetHigh(); len(lo) > len(hi) || (len(lo) == len(hi) && bytes.Compare(lo, hi) > 0) { // canonical: the longer is the larger
				return bad("low above high")
			}
			needsPriority = true
		default:
			return status.Errorf(codes.Unimplemented, "%s: match kind %v", what, f.GetMatchType())
		}
	}
	for _, f := range tbl.GetMatchFields() {
		if f.GetMatchType() == p4config.MatchField_EXACT && !seen[f.GetId()] {
			return status.Errorf(codes.InvalidArgument, "%s.%s: exact field missing", name, f.GetName())
		}
		if f.GetMatchType() == p4config.MatchField_TERNARY || f.GetMatchType() == p4config.MatchField_RANGE {
			needsPriority = true
		}
	}
	if needsPriority != (e.GetPriority() > 0) {
		return status.Errorf(codes.InvalidArgument, "%s: priority %d: want one exactly for ternary and range tables", name, e.GetPriority())
	}
	return nil
}

// trailingSet reports whether any of the low n bits of v are set.
func trailingSet(v []byte, n int) bool {
	x := new(big.Int).SetBytes(v)
	return new(big.Int).And(x, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(n)), big.NewInt(1))).Sign() != 0
}

// outsideMask reports whether v has a bit set that mask has not.
func outsideMask(v, mask []byte) bool {
	x, m := new(big.Int).SetBytes(v), new(big.Int).SetBytes(mask)
	return new(big.Int).AndNot(x, m).Sign() != 0
}

func (s *Server) applyTableLocked(t p4.Update_Type, e *p4.TableEntry) error {
	tbl, ok := s.tables[e.GetTableId()]
	if !ok {
		return status.Errorf(codes.NotFound, "table id %d is not in the P4Info", e.GetTableId())
	}
	name := tbl.GetPreamble().GetName()
	if e.GetIsDefaultAction() {
		return status.Errorf(codes.Unimplemented, "%s: default action changes", name)
	}
	if err := validateMatch(tbl, e); err != nil {
		return err
	}
	key := matchKey(e)
	store := s.entries[e.GetTableId()]
	if store == nil {
		store = map[string]*p4.TableEntry{}
		s.entries[e.GetTableId()] = store
	}
	_, exists := store[key]
	if err := existence(t, exists, name+" entry"); err != nil {
		return err
	}
	var act *p4config.Action
	if t != p4.Update_DELETE {
		a := e.GetAction().GetAction()
		if a == nil {
			return status.Errorf(codes.InvalidArgument, "%s: entry without a direct action", name)
		}
		act, ok = s.actions[a.GetActionId()]
		if !ok || !tableHasAction(tbl, a.GetActionId()) {
			return status.Errorf(codes.InvalidArgument, "%s: action id %d not allowed in this table", name, a.GetActionId())
		}
		if len(a.GetParams()) != len(act.GetParams()) {
			return status.Errorf(codes.InvalidArgument, "%s: %d params, want %d", act.GetPreamble().GetName(), len(a.GetParams()), len(act.GetParams()))
		}
		for _, p := range a.GetParams() {
			ap := param(act, p.GetParamId())
			if ap == nil {
				return status.Errorf(codes.InvalidArgument, "%s: no param id %d", act.GetPreamble().GetName(), p.GetParamId())
			}
			if err := canonical(p.GetValue(), ap.GetBitwidth()); err != nil {
				return status.Errorf(codes.InvalidArgument, "%s.%s: %v", act.GetPreamble().GetName(), ap.GetName(), err)
			}
		}
	} else {
		e = store[key]
		act = s.actions[e.GetAction().GetAction().GetActionId()]
	}
	if err := s.target.ApplyTable(t, tbl, act, e); err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if t == p4.Update_DELETE {
		delete(store, key)
	} else {
		// The request's own message: gRPC decodes each request into new
		// messages and nothing writes to them after the handler; a read
		// only marshals them.
		store[key] = e
	}
	return nil
}

// canonical enforces P4Runtime's canonical byte strings and the field width.
func canonical(v []byte, bits int32) error {
	if len(v) == 0 {
		return fmt.Errorf("empty value")
	}
	if len(v) > 1 && v[0] == 0 {
		return fmt.Errorf("value %x is not in canonical form (leading zero byte)", v)
	}
	n := (len(v)-1)*8 + bitLen(v[0])
	if int32(n) > bits {
		return fmt.Errorf("value needs %d bits, field has %d", n, bits)
	}
	return nil
}

func bitLen(b byte) int {
	n := 0
	for ; b != 0; b >>= 1 {
		n++
	}
	return n
}

func field(t *p4config.Table, id uint32) *p4config.MatchField {
	for _, f := range t.GetMatchFields() {
		if f.GetId() == id {
			return f
		}
	}
	return nil
}

func param(a *p4config.Action, id uint32) *p4config.Action_Param {
	for _, p := range a.GetParams() {
		if p.GetId() == id {
			return p
		}
	}
	return nil
}

func tableHasAction(t *p4config.Table, id uint32) bool {
	for _, r := range t.GetActionRefs() {
		if r.GetId() == id {
			return true
		}
	}
	return false
}

// Read streams table entries, counter cells and multicast groups.
func (s *Server) Read(r *p4.ReadRequest, stream p4.P4Runtime_ReadServer) error {
	s.mu.Lock()
	var out []*p4.Entity
	err := func() error {
		if r.GetDeviceId() != s.deviceID {
			return status.Errorf(codes.NotFound, "device %d not found", r.GetDeviceId())
		}
		if s.info == nil {
			return status.Error(codes.FailedPrecondition, "no pipeline set")
		}
		for _, f := range r.GetEntities() {
			es, err := s.readLocked(f)
			if err != nil {
				return err
			}
			out = append(out, es...)
		}
		return nil
	}()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return stream.Send(&p4.ReadResponse{Entities: out})
}

func (s *Server) readLocked(f *p4.Entity) ([]*p4.Entity, error) {
	var out []*p4.Entity
	switch e := f.GetEntity().(type) {
	case *p4.Entity_TableEntry:
		ids := []uint32{e.TableEntry.GetTableId()}
		if ids[0] == 0 {
			ids = ids[:0]
			for id := range s.tables {
				ids = append(ids, id)
			}
			sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		} else if _, ok := s.tables[ids[0]]; !ok {
			return nil, status.Errorf(codes.NotFound, "table id %d is not in the P4Info", ids[0])
		}
		for _, id := range ids {
			keys := make([]string, 0, len(s.entries[id]))
			for k := range s.entries[id] {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				out = append(out, &p4.Entity{Entity: &p4.Entity_TableEntry{TableEntry: s.entries[id][k]}})
			}
		}
	case *p4.Entity_CounterEntry:
		c, ok := s.counters[e.CounterEntry.GetCounterId()]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "counter id %d is not in the P4Info", e.CounterEntry.GetCounterId())
		}
		lo, hi := int64(0), c.GetSize()
		if idx := e.CounterEntry.GetIndex(); idx != nil {
			if idx.GetIndex() < 0 || idx.GetIndex() >= c.GetSize() {
				return nil, status.Errorf(codes.OutOfRange, "counter index %d of %d", idx.GetIndex(), c.GetSize())
			}
			lo, hi = idx.GetIndex(), idx.GetIndex()+1
		}
		for i := lo; i < hi; i++ {
			d, err := s.target.ReadCounter(c, i)
			if err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
			out = append(out, &p4.Entity{Entity: &p4.Entity_CounterEntry{CounterEntry: &p4.CounterEntry{
				CounterId: c.GetPreamble().GetId(), Index: &p4.Index{Index: i}, Data: d,
			}}})
		}
	case *p4.Entity_PacketReplicationEngineEntry:
		ids := make([]uint32, 0, len(s.groups))
		for id := range s.groups {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			out = append(out, &p4.Entity{Entity: &p4.Entity_PacketReplicationEngineEntry{
				PacketReplicationEngineEntry: &p4.PacketReplicationEngineEntry{
					Type: &p4.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: s.groups[id]},
				},
			}})
		}
	case *p4.Entity_RegisterEntry:
		return nil, status.Error(codes.Unimplemented, "register reads are not supported (as on BMv2/PI)")
	default:
		return nil, status.Errorf(codes.Unimplemented, "reading %T", e)
	}
	return out, nil
}
