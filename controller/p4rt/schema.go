// Package p4rt is netdir's P4Runtime client: one code path for the software
// data plane, BMv2 and Tofino. It speaks p4lang/p4runtime v1.5.0 over gRPC:
// StreamChannel arbitration, pipeline push, table, multicast and counter
// writes and reads, digests with acks, and packet-in/out, reconnecting with
// backoff. It never reads or writes registers: BMv2/PI does not implement
// them over P4Runtime, so netdir's design never depends on them.
package p4rt

import (
	"fmt"
	"math/big"
	"math/bits"
	"os"

	p4config "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/encoding/prototext"
)

// Schema resolves P4Info names to ids, so callers name tables, fields,
// actions, counters and registers as the P4 program does.
//
// It reads the P4Info of either back end: p4c-bm2-ss's (BMv2), and
// p4c-barefoot's for TNA (Tofino), which prefixes counters and registers
// with the pipe ("pipe.NetdirIngress...", found by alias all the same) and
// lists them as Tofino externs ("Counter", "Register") rather than in the
// standard counters and registers; their instances keep P4Runtime ids.
type Schema struct {
	Info      *p4config.P4Info
	tables    map[string]*p4config.Table
	actions   map[string]*p4config.Action
	counters  map[string]*p4config.Counter
	registers map[string]*p4config.Register
	digests   map[string]*p4config.Digest
}

// LoadSchema reads a P4Info text proto (p4c's --p4runtime-files *.txtpb).
func LoadSchema(path string) (*Schema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	info := &p4config.P4Info{}
	opts := prototext.UnmarshalOptions{Resolver: barefootTypes, DiscardUnknown: true}
	if err := opts.Unmarshal(b, info); err != nil {
		return nil, fmt.Errorf("p4rt: %s: %w", path, err)
	}
	return NewSchema(info), nil
}

// NewSchema indexes a P4Info. Entities are found by full name
// ("NetdirIngress.directory.slots") or by alias (the last name component).
func NewSchema(info *p4config.P4Info) *Schema {
	s := &Schema{
		Info:      info,
		tables:    map[string]*p4config.Table{},
		actions:   map[string]*p4config.Action{},
		counters:  map[string]*p4config.Counter{},
		registers: map[string]*p4config.Register{},
		digests:   map[string]*p4config.Digest{},
	}
	for _, t := range info.GetTables() {
		s.tables[t.GetPreamble().GetName()] = t
		s.tables[t.GetPreamble().GetAlias()] = t
	}
	for _, a := range info.GetActions() {
		s.actions[a.GetPreamble().GetName()] = a
		s.actions[a.GetPreamble().GetAlias()] = a
	}
	for _, c := range info.GetCounters() {
		s.counters[c.GetPreamble().GetName()] = c
		s.counters[c.GetPreamble().GetAlias()] = c
	}
	for _, r := range info.GetRegisters() {
		s.registers[r.GetPreamble().GetName()] = r
		s.registers[r.GetPreamble().GetAlias()] = r
	}
	for _, d := range info.GetDigests() {
		s.digests[d.GetPreamble().GetName()] = d
		s.digests[d.GetPreamble().GetAlias()] = d
	}
	for _, c := range TofinoCounters(info) {
		s.counters[c.GetPreamble().GetName()] = c
		s.counters[c.GetPreamble().GetAlias()] = c
	}
	for _, r := range TofinoRegisters(info) {
		s.registers[r.GetPreamble().GetName()] = r
		s.registers[r.GetPreamble().GetAlias()] = r
	}
	return s
}

// Table returns a table by name.
func (s *Schema) Table(name string) (*p4config.Table, error) {
	if t, ok := s.tables[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("p4rt: no table %q in the P4Info", name)
}

// Action returns an action by name.
func (s *Schema) Action(name string) (*p4config.Action, error) {
	if a, ok := s.actions[name]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("p4rt: no action %q in the P4Info", name)
}

// Counter returns a counter by name.
func (s *Schema) Counter(name string) (*p4config.Counter, error) {
	if c, ok := s.counters[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("p4rt: no counter %q in the P4Info", name)
}

// Register returns a register by name. netdir never reads or writes
// registers over P4Runtime (package comment); tests and tools name them.
func (s *Schema) Register(name string) (*p4config.Register, error) {
	if r, ok := s.registers[name]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("p4rt: no register %q in the P4Info", name)
}

// Digest returns a digest by name.
func (s *Schema) Digest(name string) (*p4config.Digest, error) {
	if d, ok := s.digests[name]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("p4rt: no digest %q in the P4Info", name)
}

// Canonical returns the canonical byte string of b (P4Runtime §8.4.2): the
// shortest big-endian form, with zero as a single 0x00. PI and Stratum
// reject or mismatch padded strings on read-back, so every value netdir
// writes goes through here.
func Canonical(b []byte) []byte {
	i := 0
	for i < len(b)-1 && b[i] == 0 {
		i++
	}
	if len(b) == 0 {
		return []byte{0}
	}
	return append([]byte(nil), b[i:]...)
}

// Uint encodes v canonically.
func Uint(v uint64) []byte {
	n := max(1, (bits.Len64(v)+7)/8)
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return b
}

// Match is one field of a table key, by field name. Its kind is the field's
// in the P4Info: exact uses Value; lpm Value and PrefixLen; ternary Value
// and Mask; range Value (low) and High.
type Match struct {
	Field     string
	Value     []byte
	PrefixLen int32
	Mask      []byte
	High      []byte
}

// Param is one action parameter, by name.
type Param struct {
	Name  string
	Value []byte
}

// Entry builds a table entry with exact matches and a direct action. Field
// widths are checked against the P4Info; values are made canonical.
func (s *Schema) Entry(table string, match []Match, action string, params ...Param) (*p4.TableEntry, error) {
	t, err := s.Table(table)
	if err != nil {
		return nil, err
	}
	te := &p4.TableEntry{TableId: t.GetPreamble().GetId()}
	for _, m := range match {
		f := findMatch(t, m.Field)
		if f == nil {
			return nil, fmt.Errorf("p4rt: table %q has no match field %q", table, m.Field)
		}
		fm, err := fieldMatch(f, m, table)
		if err != nil {
			return nil, err
		}
		te.Match = append(te.Match, fm)
	}
	a, err := s.Action(action)
	if err != nil {
		return nil, err
	}
	act := &p4.Action{ActionId: a.GetPreamble().GetId()}
	for _, p := range params {
		var ap *p4config.Action_Param
		for _, x := range a.GetParams() {
			if x.GetName() == p.Name {
				ap = x
			}
		}
		if ap == nil {
			return nil, fmt.Errorf("p4rt: action %q has no parameter %q", action, p.Name)
		}
		v := Canonical(p.Value)
		if err := fits(v, ap.GetBitwidth(), action+"."+p.Name); err != nil {
			return nil, err
		}
		act.Params = append(act.Params, &p4.Action_Param{ParamId: ap.GetId(), Value: v})
	}
	te.Action = &p4.TableAction{Type: &p4.TableAction_Action{Action: act}}
	return te, nil
}

// fieldMatch builds one field of a key by the field's match kind. A ternary
// or range entry needs a priority, which the caller sets on the entry.
func fieldMatch(f *p4config.MatchField, m Match, table string) (*p4.FieldMatch, error) {
	what := table + "." + m.Field
	v := Canonical(m.Value)
	if err := fits(v, f.GetBitwidth(), what); err != nil {
		return nil, err
	}
	fm := &p4.FieldMatch{FieldId: f.GetId()}
	switch f.GetMatchType() {
	case p4config.MatchField_EXACT:
		fm.FieldMatchType = &p4.FieldMatch_Exact_{Exact: &p4.FieldMatch_Exact{Value: v}}
	case p4config.MatchField_LPM:
		if m.PrefixLen < 1 || m.PrefixLen > f.GetBitwidth() {
			return nil, fmt.Errorf("p4rt: %s: prefix length %d of %d bits", what, m.PrefixLen, f.GetBitwidth())
		}
		fm.FieldMatchType = &p4.FieldMatch_Lpm{Lpm: &p4.FieldMatch_LPM{Value: v, PrefixLen: m.PrefixLen}}
	case p4config.MatchField_TERNARY:
		mask := Canonical(m.Mask)
		if err := fits(mask, f.GetBitwidth(), what+" mask"); err != nil {
			return nil, err
		}
		fm.FieldMatchType = &p4.FieldMatch_Ternary_{Ternary: &p4.FieldMatch_Ternary{Value: v, Mask: mask}}
	case p4config.MatchField_RANGE:
		hi := Canonical(m.High)
		if err := fits(hi, f.GetBitwidth(), what+" high"); err != nil {
			return nil, err
		}
		fm.FieldMatchType = &p4.FieldMatch_Range_{Range: &p4.FieldMatch_Range{Low: v, High: hi}}
	default:
		return nil, fmt.Errorf("p4rt: %s: match kind %v not supported", what, f.GetMatchType())
	}
	return fm, nil
}

func findMatch(t *p4config.Table, name string) *p4config.MatchField {
	for _, f := range t.GetMatchFields() {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// fits checks that canonical v has at most bits significant bits.
func fits(v []byte, bits int32, what string) error {
	if n := new(big.Int).SetBytes(v).BitLen(); int32(n) > bits {
		return fmt.Errorf("p4rt: %s: value needs %d bits, field has %d", what, n, bits)
	}
	return nil
}
