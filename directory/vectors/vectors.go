// Package vectors runs the shared vector suite (testdata/vectors) against any
// data plane that implements Plane: the Go directory core, the software data
// plane over UDP, XDP through BPF_PROG_TEST_RUN, and BMv2 over veth.
//
// The suite is written in the datadriven style of cockroachdb/pebble: each
// file is a topic, each `subtest` in it a case that starts from `reset`, sets
// tables and state, sends packets and checks verdicts, output headers, state
// and counters. A file whose first line is `# requires: F1 F2` runs only on
// planes that support those features; the features are:
//
//	clock   the plane takes the test's `now` as its clock (latency learning)
//	host    the plane can run in host-agent mode
//	policy  the plane runs the baseline policies (pegasus, replicas, static)
//	coarse  the plane runs policy coarse (netdir without the fine score)
//	sketch  the plane exposes the miss sketch for reading
//
// Commands:
//
//	reset [partition-bits=N (default 1)] [slots=N (default 16)] [mode=tor|host] [policy=P]
//	partition p=N chain=(1,2,3) [buckets=(...32...)|weights=(...)]
//	port port=N kind=storage|client   (no spine: directory.PortSpine and the
//	                             spine's verified reads are the Go core's and
//	                             sim/'s only, tested in package directory)
//	insert key=K locs=(...) r=N [ver=V] [inc=I] [buckets=(...)|weights=(...)]
//	                             (the seed: version V in incarnation I, wire.MakeStamp)
//	evict key=K
//	buckets key=K (buckets=(...)|weights=(...))
//	node id=N [load=L] [latency=NS]
//	packet [port=N] [now=T]      input: header fields as key=value, or hex=...
//	slot key=K | nodestats id=N | counters | sketch key=K | reset-sketch | hash key=K
package vectors

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// ErrUnsupported is returned by a plane for an operation it cannot perform.
var ErrUnsupported = errors.New("vectors: not supported by this plane")

// Plane is a data plane under test. Every method mirrors the directory core's
// control-plane API; Process injects one packet and returns the verdict and the
// packet as it left (nil when dropped).
type Plane interface {
	Supports(feature string) bool
	Reset(cfg directory.Config) error
	SetPartition(p uint32, chain []wire.NodeID, buckets []uint8) error
	SetPort(port uint32, kind directory.PortKind) error
	Insert(h wire.KeyHash, locs []wire.NodeID, r int, ver uint64, buckets []uint8) error
	Evict(h wire.KeyHash) error
	SetSlotBuckets(h wire.KeyHash, buckets []uint8) error
	SetNodeStats(n wire.NodeID, s directory.NodeStats) error
	Process(pkt []byte, port uint32, now uint64) (directory.Verdict, []byte, error)
	Lookup(h wire.KeyHash) (directory.Slot, bool, error)
	Node(n wire.NodeID) (directory.NodeStats, error)
	Counters() (directory.Counters, error)
	SketchEstimate(h wire.KeyHash) (uint32, error)
	ResetSketch() error
}

// Dir returns the suite's directory, found by walking up from the working
// directory to the module root.
func Dir(t testing.TB) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "testdata", "vectors")
		}
		if filepath.Dir(d) == d {
			t.Fatal("vectors: go.mod not found above " + wd)
		}
	}
}

// Run executes every file of the suite against the plane.
func Run(t *testing.T, p Plane) {
	files, err := filepath.Glob(filepath.Join(Dir(t), "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("vectors: no vector files (%v)", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			for _, feat := range requires(t, f) {
				if !p.Supports(feat) {
					t.Skipf("plane lacks %q, which %s requires", feat, filepath.Base(f))
				}
			}
			datadriven.RunTest(t, f, func(t *testing.T, td *datadriven.TestData) string {
				out, err := run(p, td)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return out
			})
		})
	}
}

// Count returns the number of cases (subtests) in the suite.
func Count(t testing.TB) int {
	files, _ := filepath.Glob(filepath.Join(Dir(t), "*.txt"))
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "subtest ") && l != "subtest end" {
				n++
			}
		}
	}
	return n
}

func requires(t *testing.T, f string) []string {
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	if rest, ok := strings.CutPrefix(first, "# requires:"); ok {
		return strings.Fields(rest)
	}
	return nil
}

type args map[string][]string

func parseArgs(cas []datadriven.CmdArg) args {
	a := args{}
	for _, c := range cas {
		a[c.Key] = c.Vals
	}
	return a
}

func (a args) str(k, def string) string {
	if v, ok := a[k]; ok && len(v) > 0 {
		return v[0]
	}
	return def
}

func (a args) uint(k string, def uint64) (uint64, error) {
	v, ok := a[k]
	if !ok || len(v) == 0 {
		return def, nil
	}
	x, err := strconv.ParseUint(v[0], 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", k, err)
	}
	return x, nil
}

func (a args) nodes(k string) ([]wire.NodeID, error) {
	var out []wire.NodeID
	for _, s := range a[k] {
		x, err := strconv.ParseUint(s, 0, 16)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", k, err)
		}
		out = append(out, wire.NodeID(x))
	}
	return out, nil
}

// buckets reads buckets=(...) or weights=(...); nil means even.
func (a args) buckets() ([]uint8, error) {
	if b, ok := a["buckets"]; ok {
		out := make([]uint8, len(b))
		for i, s := range b {
			x, err := strconv.ParseUint(s, 0, 8)
			if err != nil {
				return nil, fmt.Errorf("buckets: %v", err)
			}
			out[i] = uint8(x)
		}
		return out, nil
	}
	if w, ok := a["weights"]; ok {
		ws := make([]uint32, len(w))
		for i, s := range w {
			x, err := strconv.ParseUint(s, 0, 32)
			if err != nil {
				return nil, fmt.Errorf("weights: %v", err)
			}
			ws[i] = uint32(x)
		}
		return directory.BucketsForWeights(ws), nil
	}
	return nil, nil
}

// key reads key=NAME (hashed) or hash=HEX.
func (a args) key() (wire.KeyHash, error) {
	var h wire.KeyHash
	if k, ok := a["key"]; ok && len(k) > 0 {
		return wire.HashKey([]byte(k[0])), nil
	}
	if x, ok := a["hash"]; ok && len(x) > 0 {
		b, err := hex.DecodeString(x[0])
		if err != nil || len(b) != wire.KeyHashLen {
			return h, fmt.Errorf("hash: want 32 hex digits")
		}
		copy(h[:], b)
		return h, nil
	}
	return h, errors.New("want key= or hash=")
}

func run(p Plane, td *datadriven.TestData) (string, error) {
	a := parseArgs(td.CmdArgs)
	switch td.Cmd {
	case "reset":
		bits, err := a.uint("partition-bits", 1)
		if err != nil {
			return "", err
		}
		slots, err := a.uint("slots", 16)
		if err != nil {
			return "", err
		}
		cfg := directory.Config{PartitionBits: uint(bits), Slots: int(slots)}
		switch a.str("mode", "tor") {
		case "tor":
		case "host":
			cfg.Mode = directory.ModeHost
		default:
			return "", errors.New("mode: want tor or host")
		}
		if cfg.Policy, err = directory.ParsePolicy(a.str("policy", "netdir")); err != nil {
			return "", err
		}
		return "", p.Reset(cfg)
	case "partition":
		n, err := a.uint("p", 0)
		if err != nil {
			return "", err
		}
		chain, err := a.nodes("chain")
		if err != nil {
			return "", err
		}
		b, err := a.buckets()
		if err != nil {
			return "", err
		}
		return "", p.SetPartition(uint32(n), chain, b)
	case "port":
		n, err := a.uint("port", 0)
		if err != nil {
			return "", err
		}
		kind := directory.PortClient
		if a.str("kind", "client") == "storage" {
			kind = directory.PortStorage
		}
		return "", p.SetPort(uint32(n), kind)
	case "insert":
		h, err := a.key()
		if err != nil {
			return "", err
		}
		locs, err := a.nodes("locs")
		if err != nil {
			return "", err
		}
		r, err := a.uint("r", uint64(min(3, len(locs))))
		if err != nil {
			return "", err
		}
		ver, err := a.uint("ver", 0)
		if err != nil {
			return "", err
		}
		inc, err := a.uint("inc", 0)
		if err != nil {
			return "", err
		}
		if inc > 0xffff || ver > wire.MaxVersion {
			return "", fmt.Errorf("insert: incarnation %d or version %d out of range", inc, ver)
		}
		ver = wire.MakeStamp(uint16(inc), ver)
		b, err := a.buckets()
		if err != nil {
			return "", err
		}
		return "", p.Insert(h, locs, int(r), ver, b)
	case "evict":
		h, err := a.key()
		if err != nil {
			return "", err
		}
		return "", p.Evict(h)
	case "buckets":
		h, err := a.key()
		if err != nil {
			return "", err
		}
		b, err := a.buckets()
		if err != nil {
			return "", err
		}
		return "", p.SetSlotBuckets(h, b)
	case "node":
		id, err := a.uint("id", 0)
		if err != nil {
			return "", err
		}
		load, err := a.uint("load", 0)
		if err != nil {
			return "", err
		}
		lat, err := a.uint("latency", 0)
		if err != nil {
			return "", err
		}
		return "", p.SetNodeStats(wire.NodeID(id), directory.NodeStats{Load: uint16(load), Latency: lat})
	case "packet":
		return packet(p, a, td.Input)
	case "slot":
		h, err := a.key()
		if err != nil {
			return "", err
		}
		s, ok, err := p.Lookup(h)
		if err != nil {
			return "", err
		}
		if !ok {
			return "absent\n", nil
		}
		return formatSlot(&s), nil
	case "nodestats":
		id, err := a.uint("id", 0)
		if err != nil {
			return "", err
		}
		st, err := p.Node(wire.NodeID(id))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("load=%d latency=%d\n", st.Load, st.Latency), nil
	case "counters":
		c, err := p.Counters()
		if err != nil {
			return "", err
		}
		return formatCounters(&c), nil
	case "sketch":
		h, err := a.key()
		if err != nil {
			return "", err
		}
		est, err := p.SketchEstimate(h)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d\n", est), nil
	case "reset-sketch":
		return "", p.ResetSketch()
	case "hash":
		h, err := a.key()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s partition(1 bit)=%d\n", h, h.Partition(1)), nil
	}
	return "", fmt.Errorf("unknown command %q", td.Cmd)
}

// packet builds a packet from the input, processes it, and prints the
// verdict and, if it left, its header.
func packet(p Plane, a args, input string) (string, error) {
	port, err := a.uint("port", 0)
	if err != nil {
		return "", err
	}
	now, err := a.uint("now", 0)
	if err != nil {
		return "", err
	}
	pkt, err := buildPacket(input)
	if err != nil {
		return "", err
	}
	in := append([]byte(nil), pkt...)
	v, out, err := p.Process(pkt, uint32(port), now)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(v.String() + "\n")
	if v.Action != directory.Drop {
		if len(out) != len(in) || string(out[wire.HeaderLen:]) != string(in[wire.HeaderLen:]) {
			b.WriteString("payload changed\n")
		}
		b.WriteString(formatHeader(out) + "\n")
	}
	return b.String(), nil
}

// buildPacket reads "hex=..." (raw bytes) or header fields as key=value:
// op, flags (stale-ok,stamped,hit,reservation,verify), code, tenant, reqid, key,
// hash, stamp, inc (the stamp's incarnation, wire.MakeStamp), node, load,
// epoch, ts, delta, rho, value, and trailer: hex bytes after the value (a
// node op's extension and MAC trailer, package nodeauth).
func buildPacket(input string) ([]byte, error) {
	input = strings.TrimSpace(input)
	if x, ok := strings.CutPrefix(input, "hex="); ok {
		return hex.DecodeString(strings.Join(strings.Fields(x), ""))
	}
	var pk wire.Packet
	pk.Op = wire.OpGet
	hashSet := false
	var inc uint64
	var trailer []byte
	for _, f := range strings.Fields(input) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("packet field %q: want key=value", f)
		}
		var err error
		var x uint64
		switch k {
		case "op":
			pk.Op, err = wire.ParseOp(v)
		case "flags":
			pk.Flags, err = parseFlags(v)
		case "code":
			pk.Code, err = parseCode(v)
		case "key":
			pk.Key = []byte(v)
			if !hashSet {
				pk.KeyHash = wire.HashKey(pk.Key)
			}
		case "hash":
			var b []byte
			b, err = hex.DecodeString(v)
			if err == nil && len(b) != wire.KeyHashLen {
				err = errors.New("want 32 hex digits")
			}
			copy(pk.KeyHash[:], b)
			hashSet = true
		case "value":
			pk.Value = []byte(v)
		case "trailer":
			trailer, err = hex.DecodeString(v)
		default:
			x, err = strconv.ParseUint(v, 0, 64)
			switch k {
			case "tenant":
				pk.Tenant = uint16(x)
			case "reqid":
				pk.ReqID = x
			case "stamp":
				pk.Stamp = x
			case "inc":
				if inc = x; x > 0xffff {
					err = errors.New("over 16 bits")
				}
			case "node":
				pk.Node = wire.NodeID(x)
			case "load":
				pk.Load = uint16(x)
			case "epoch":
				pk.Epoch = uint32(x)
			case "ts":
				pk.Timestamp = x
			case "delta":
				pk.Delta = uint32(x)
			case "rho":
				pk.Rho = uint32(x)
			default:
				err = errors.New("unknown field")
			}
		}
		if err != nil {
			return nil, fmt.Errorf("packet field %q: %v", f, err)
		}
	}
	if inc != 0 {
		pk.Stamp = wire.MakeStamp(uint16(inc), pk.Stamp)
	}
	b, err := pk.AppendEncode(nil)
	return append(b, trailer...), err
}

var flagNames = []struct {
	bit  uint8
	name string
}{{wire.FlagStaleOK, "stale-ok"}, {wire.FlagStamped, "stamped"}, {wire.FlagHit, "hit"}, {wire.FlagReservation, "reservation"}, {wire.FlagVerify, "verify"}}

func parseFlags(s string) (uint8, error) {
	var f uint8
	for _, n := range strings.Split(s, ",") {
		found := false
		for _, fn := range flagNames {
			if fn.name == n {
				f |= fn.bit
				found = true
			}
		}
		if !found && n != "none" {
			return 0, fmt.Errorf("unknown flag %q", n)
		}
	}
	return f, nil
}

func formatFlags(f uint8) string {
	var names []string
	for _, fn := range flagNames {
		if f&fn.bit != 0 {
			names = append(names, fn.name)
		}
	}
	var known uint8
	for _, fn := range flagNames {
		known |= fn.bit
	}
	if rest := f &^ known; rest != 0 {
		names = append(names, fmt.Sprintf("%#x", rest))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

func parseCode(s string) (wire.Code, error) {
	for c := wire.Code(0); c < 64; c++ {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown code %q", s)
}

// formatHeader prints every header field but the hash, which vectors name by key.
func formatHeader(b []byte) string {
	var h wire.Header
	if err := h.DecodeHeader(b); err != nil {
		return "undecodable: " + err.Error()
	}
	stamp := strconv.FormatUint(h.Stamp, 10)
	if inc := wire.StampIncarnation(h.Stamp); inc != 0 {
		// A stamp with an incarnation (wire.MakeStamp): version, then incarnation.
		stamp = fmt.Sprintf("%d inc=%d", wire.StampVersion(h.Stamp), inc)
	}
	return fmt.Sprintf("op=%s flags=%s code=%s tenant=%d reqid=%#x stamp=%s node=%d load=%d epoch=%d ts=%d delta=%d rho=%d",
		h.Op, formatFlags(h.Flags), h.Code.String(), h.Tenant, h.ReqID, stamp, h.Node, h.Load, h.Epoch, h.Timestamp, h.Delta, h.Rho)
}

func formatSlot(s *directory.Slot) string {
	locs := make([]string, s.N)
	for i := range locs {
		locs[i] = strconv.Itoa(int(s.Locs[i]))
	}
	return fmt.Sprintf("locs=%s r=%d fresh=%0*b ver_next=%d ver_done=%d hits=%d\n",
		strings.Join(locs, ","), s.R, s.N, s.Fresh, s.VerNext, s.VerDone, s.Hits)
}

func formatCounters(c *directory.Counters) string {
	var b strings.Builder
	fmt.Fprintf(&b, "hits=%d misses=%d replies=%d vsbs=%d passed=%d switched=%d drops=%d\n",
		c.Hits, c.Misses, c.Replies, c.VSBs, c.Passed, c.Switched, c.DropTotal)
	var rs []string
	for _, r := range directory.Reasons() {
		if c.Drops[r] != 0 {
			rs = append(rs, fmt.Sprintf("%s=%d", r, c.Drops[r]))
		}
	}
	sort.Strings(rs)
	if len(rs) > 0 {
		b.WriteString("drop " + strings.Join(rs, " ") + "\n")
	}
	return b.String()
}

// Core adapts the Go directory core to Plane.
type Core struct{ D *directory.Directory }

func (c *Core) Supports(string) bool { return true }
func (c *Core) Reset(cfg directory.Config) (err error) {
	c.D, err = directory.New(cfg)
	return err
}
func (c *Core) SetPartition(p uint32, chain []wire.NodeID, b []uint8) error {
	return c.D.SetPartition(p, chain, b)
}
func (c *Core) SetPort(port uint32, k directory.PortKind) error { c.D.SetPort(port, k); return nil }
func (c *Core) Insert(h wire.KeyHash, locs []wire.NodeID, r int, ver uint64, b []uint8) error {
	_, err := c.D.Insert(h, locs, r, ver, b)
	return err
}
func (c *Core) Evict(h wire.KeyHash) error                     { return c.D.Evict(h) }
func (c *Core) SetSlotBuckets(h wire.KeyHash, b []uint8) error { return c.D.SetSlotBuckets(h, b) }
func (c *Core) SetNodeStats(n wire.NodeID, s directory.NodeStats) error {
	return c.D.SetNodeStats(n, s)
}
func (c *Core) Process(pkt []byte, port uint32, now uint64) (directory.Verdict, []byte, error) {
	v := c.D.Process(pkt, port, now)
	if v.Action == directory.Drop {
		return v, nil, nil
	}
	return v, pkt, nil
}
func (c *Core) Lookup(h wire.KeyHash) (directory.Slot, bool, error) {
	s, ok := c.D.Lookup(h)
	return s, ok, nil
}
func (c *Core) Node(n wire.NodeID) (directory.NodeStats, error) { return c.D.Node(n), nil }
func (c *Core) Counters() (directory.Counters, error)           { return c.D.Counters(), nil }
func (c *Core) SketchEstimate(h wire.KeyHash) (uint32, error)   { return c.D.SketchEstimate(h), nil }
func (c *Core) ResetSketch() error                              { c.D.ResetSketch(); return nil }
