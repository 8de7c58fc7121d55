// Package bench is netdir's measuring instrument: YCSB workloads with zipf or
// uniform key choice and fixed or Pareto value sizes, open- and closed-loop
// drivers over a small Target interface, HdrHistogram latency recording, the
// balance and tail metrics of issue 6, the JSON result shape that both
// `netdir demo` and `netdir bench` write, and an HTML report with figures.
//
// The package does not know about the cluster: callers hand it a Target (a
// client, an in-memory map, a simulator) and, after a run, the per-node request
// counts and latencies and the directory hit rate that they read from the data
// plane.
package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	randv2 "math/rand/v2"
	"strings"
	"sync"
	"unsafe"

	"github.com/pingcap/go-ycsb/pkg/generator"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/netdir/netdir/internal/prefetch"
	"github.com/netdir/netdir/wire"
)

// OpKind is the kind of one workload operation.
type OpKind uint8

// Operation kinds. YCSB's scan is mapped to a single read of the scan's first
// key (the store has no range scans); it keeps its own kind so that results
// can tell the two apart.
const (
	OpRead OpKind = iota
	OpUpdate
	OpInsert
	OpScan
	OpReadModifyWrite
	numOpKinds
)

var opNames = [numOpKinds]string{"read", "update", "insert", "scan", "rmw"}

func (k OpKind) String() string {
	if k < numOpKinds {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Mix is the operation mix of a workload: the fractions of each kind. They
// must be non-negative and sum to 1.
type Mix struct {
	Read   float64 `json:"read"`
	Update float64 `json:"update"`
	Insert float64 `json:"insert"`
	Scan   float64 `json:"scan"`
	RMW    float64 `json:"rmw"`
}

// ReadFraction is the fraction of operations that read only (read and scan).
func (m Mix) ReadFraction() float64 { return m.Read + m.Scan }

func (m Mix) validate() error {
	s := 0.0
	for _, f := range []float64{m.Read, m.Update, m.Insert, m.Scan, m.RMW} {
		if f < 0 || math.IsNaN(f) {
			return errors.New("bench: negative or NaN fraction in mix")
		}
		s += f
	}
	if math.Abs(s-1) > 1e-9 {
		return fmt.Errorf("bench: mix fractions sum to %g, want 1", s)
	}
	return nil
}

// The standard YCSB core workloads (YCSB's workloads/workload[a-f]).
var ycsbMixes = map[string]Mix{
	"A": {Read: 0.5, Update: 0.5},   // update heavy
	"B": {Read: 0.95, Update: 0.05}, // read mostly
	"C": {Read: 1},                  // read only
	"D": {Read: 0.95, Insert: 0.05}, // read latest
	"E": {Scan: 0.95, Insert: 0.05}, // short ranges (scan → read of the first key)
	"F": {Read: 0.5, RMW: 0.5},      // read-modify-write
}

// YCSB returns the standard mix of YCSB core workload name ("A" … "F", case
// insensitive).
func YCSB(name string) (Mix, error) {
	m, ok := ycsbMixes[strings.ToUpper(name)]
	if !ok {
		return Mix{}, fmt.Errorf("bench: unknown YCSB workload %q (want A–F)", name)
	}
	return m, nil
}

// WriteMix is a read/update mix with the given write fraction, for sweeps
// over the write ratio (name it e.g. "rw10" in Workload.Name).
func WriteMix(writes float64) Mix { return Mix{Read: 1 - writes, Update: writes} }

// Policies are the routing policies that demo and bench compare, in the
// order the report lists them: the chain head only; uniform over the chain;
// C3 replica ranking; directory plus least-loaded choice; directory plus
// weights plus fine score.
var Policies = []string{"static", "replicas", "c3", "pegasus", "netdir"}

// Key distributions.
const (
	DistZipf    = "zipf"
	DistUniform = "uniform"
)

// Defaults applied by Workload.Build to zero fields.
const (
	DefaultKeys      = 100_000
	DefaultValueSize = 100
	DefaultZipf      = 0.99
	DefaultKeyPrefix = "user"
)

// Workload describes a workload. The zero value of each field takes the
// default given beside it.
//
//   - Name: "A" … "F" for a YCSB core workload, or anything else with Mix set.
//   - Key choice: Dist is "zipf" (θ = Zipf, default 0.99, sensible 0.5–1.5) or
//     "uniform". Zipf uses go-ycsb's generator (Gray et al., SIGMOD'94): key
//     index 0 is the hottest, 1 the next, … (unscrambled: the data plane hashes
//     keys, so the popularity order of the names does not matter).
//   - Workload D reads "latest": the rank r drawn from the key distribution
//     counts back from the newest acknowledged insert, so reads fall on the
//     newest Keys keys with zipf(θ) (or uniform) recency.
//   - Workload E's scan is a read of the scan's first key, drawn as YCSB draws
//     it; scans are reported as their own kind.
//   - Inserts write new keys Keys, Keys+1, …; other kinds choose among the
//     Keys preloaded keys (D counts back from the newest).
//   - Values: ValueSize bytes (default 100), or, when ParetoAlpha > 0,
//     Pareto(xm = ValueSize, α = ParetoAlpha) sizes rounded up to whole bytes
//     and clamped to wire.MaxValue (32 KiB). The clamp truncates the tail
//     beyond 32 KiB; with α ≤ 1 the unclamped mean is infinite, so pick α > 1
//     for meaningful means (ClampedParetoMean gives the exact clamped mean).
//   - Seed: every stream derives its generators from (Seed, stream index), so
//     two runs with the same Seed and worker count issue the same sequence per
//     worker.
type Workload struct {
	Name        string  `json:"name"`
	Mix         Mix     `json:"mix"`
	Dist        string  `json:"dist"`
	Zipf        float64 `json:"zipf"`
	Keys        int64   `json:"keys"`
	KeyPrefix   string  `json:"key_prefix"`
	ValueSize   int     `json:"value_size"`
	ParetoAlpha float64 `json:"pareto_alpha,omitempty"`
	Seed        int64   `json:"seed"`
}

// Source is a built workload: the state shared by every stream (the insert
// counter and the precomputed zipf constant). It is safe for concurrent use;
// each goroutine takes its own Stream.
type Source struct {
	w     Workload
	mix   Mix
	cum   [numOpKinds]float64
	zetan float64
	theta float64
	// zipfTable and zipfFormula are the zipf draw's table and formula
	// (tabledZipf), built by the first stream.
	zipfOnce    sync.Once
	zipfTable   []int32
	zipfFormula *zipfFormula

	ins *ackCounter
}

// Build checks w, fills in defaults and precomputes the zipf constant, which
// is O(Keys).
func (w Workload) Build() (*Source, error) {
	if w.Keys == 0 {
		w.Keys = DefaultKeys
	}
	if w.Keys < 2 {
		return nil, errors.New("bench: Keys must be at least 2")
	}
	if w.ValueSize == 0 {
		w.ValueSize = DefaultValueSize
	}
	if w.ValueSize < 0 || w.ValueSize > wire.MaxValue {
		return nil, fmt.Errorf("bench: ValueSize %d outside [1, %d]", w.ValueSize, wire.MaxValue)
	}
	if w.ParetoAlpha < 0 || math.IsNaN(w.ParetoAlpha) {
		return nil, errors.New("bench: ParetoAlpha must be ≥ 0")
	}
	if w.KeyPrefix == "" {
		w.KeyPrefix = DefaultKeyPrefix
	}
	if w.Dist == "" {
		w.Dist = DistZipf
	}
	if w.Mix == (Mix{}) {
		m, err := YCSB(w.Name)
		if err != nil {
			return nil, err
		}
		w.Mix = m
		w.Name = strings.ToUpper(w.Name)
	}
	if err := w.Mix.validate(); err != nil {
		return nil, err
	}
	s := &Source{w: w, mix: w.Mix}
	switch w.Dist {
	case DistZipf:
		if w.Zipf == 0 {
			w.Zipf = DefaultZipf
			s.w.Zipf = DefaultZipf
		}
		if w.Zipf <= 0 || w.Zipf > 5 || math.IsNaN(w.Zipf) {
			return nil, fmt.Errorf("bench: zipf θ %g outside (0, 5]", w.Zipf)
		}
		s.theta = w.Zipf
		// Gray's method divides by 1−θ; θ = 1 is nudged by 1e-6, which
		// changes the pmf by less than one part in 10^5.
		if math.Abs(s.theta-1) < 1e-6 {
			s.theta = 1 + 1e-6
		}
		s.zetan = Zeta(w.Keys, s.theta)
	case DistUniform:
		s.w.Zipf = 0
	default:
		return nil, fmt.Errorf("bench: unknown key distribution %q (want zipf or uniform)", w.Dist)
	}
	c := 0.0
	for i, f := range []float64{s.mix.Read, s.mix.Update, s.mix.Insert, s.mix.Scan, s.mix.RMW} {
		c += f
		s.cum[i] = c
	}
	s.cum[numOpKinds-1] = 1
	s.ins = newAckCounter(w.Keys)
	return s, nil
}

// Workload returns the workload with defaults filled in.
func (s *Source) Workload() Workload { return s.w }

// Key returns the name of key index i: KeyPrefix followed by i in 12 decimal
// digits (user000000000042).
func (s *Source) Key(i int64) []byte { return s.AppendKey(nil, i) }

// AppendKey appends the name of key i to dst.
func (s *Source) AppendKey(dst []byte, i int64) []byte { return appendKey(dst, s.w.KeyPrefix, i) }

func appendKey(dst []byte, prefix string, i int64) []byte {
	dst = append(dst, prefix...)
	var d [12]byte
	for j := len(d) - 1; j >= 0; j-- {
		d[j] = byte('0' + i%10)
		i /= 10
	}
	return append(dst, d[:]...)
}

// Inserted is the number of keys inserted so far and acknowledged.
func (s *Source) Inserted() int64 { return s.ins.last() + 1 - s.w.Keys }

// Zeta is the generalised harmonic number Σ_{i=1..n} i^−θ, the zipf(θ)
// normaliser over n keys: key rank r (0-based) has probability
// (r+1)^−θ / Zeta(n, θ).
func Zeta(n int64, theta float64) float64 {
	s := 0.0
	for i := int64(1); i <= n; i++ {
		s += math.Pow(float64(i), -theta)
	}
	return s
}

// ZipfPMF is the probability of 0-based rank r under zipf(θ) over n keys.
func ZipfPMF(r, n int64, theta float64) float64 {
	return math.Pow(float64(r+1), -theta) / Zeta(n, theta)
}

// ClampedParetoMean is E[min(X, c)] for X ~ Pareto(xm, α), the mean value size
// that a Workload with ParetoAlpha = α, ValueSize = xm produces before rounding
// up to whole bytes (rounding adds < 1 byte).
func ClampedParetoMean(xm, alpha, c float64) float64 {
	if c <= xm {
		return c
	}
	// E[min(X,c)] = ∫_0^c P(X > x) dx = xm + ∫_xm^c (xm/x)^α dx.
	if math.Abs(alpha-1) < 1e-12 {
		return xm + xm*math.Log(c/xm)
	}
	return xm + math.Pow(xm, alpha)*(math.Pow(c, 1-alpha)-math.Pow(xm, 1-alpha))/(1-alpha)
}

// Op is one operation drawn from a Stream. Key and Value alias the stream's
// buffers and are valid until the stream's next Next call.
type Op struct {
	Kind  OpKind
	Index int64
	Key   []byte
	Value []byte
}

// Stream draws operations for one goroutine. It is not safe for concurrent
// use.
type Stream struct {
	src   *Source
	r     *rand.Rand
	keys  keyGen
	zipf  *tabledZipf // keys, if drawn through the zipf table
	sizes distuv.Pareto
	key   []byte
	val   []byte
}

type keyGen interface{ Next(*rand.Rand) int64 }

// Stream returns the i-th stream of the workload; streams with distinct i
// draw independent sequences, and the same (Seed, i) always draws the same
// one.
func (s *Source) Stream(i int) *Stream {
	seed := s.w.Seed*1_000_003 + int64(i)*7919 + 1
	draws := &drawSource{Source64: rand.NewSource(seed).(rand.Source64)}
	st := &Stream{
		src: s,
		r:   rand.New(draws),
		key: make([]byte, 0, len(s.w.KeyPrefix)+12),
	}
	switch s.w.Dist {
	case DistZipf:
		// The zeta sum is computed once in Build and passed in, so a stream
		// costs O(1) to set up; the table once per source.
		z := generator.NewZipfian(0, s.w.Keys-1, s.theta, s.zetan)
		s.zipfOnce.Do(func() {
			s.zipfTable = newZipfTable(s.w.Keys, s.theta, s.zetan)
			s.zipfFormula = newZipfFormula(s.w.Keys, s.theta, s.zetan)
		})
		if s.zipfTable == nil {
			st.keys = z
			break
		}
		again := &replaySource{}
		st.zipf = &tabledZipf{z: z, table: s.zipfTable, formula: s.zipfFormula, draws: draws, again: again, replay: rand.New(again)}
		st.keys = st.zipf
	default:
		st.keys = generator.NewUniform(0, s.w.Keys-1)
	}
	if s.w.ParetoAlpha > 0 {
		st.sizes = distuv.Pareto{
			Xm:    float64(s.w.ValueSize),
			Alpha: s.w.ParetoAlpha,
			Src:   randv2.NewPCG(uint64(seed), 0x9e3779b97f4a7c15),
		}
	}
	// Incompressible value bytes: each value is a window at a random
	// offset of the stream's random buffer, so that values differ and a
	// storage block of several values does not compress (one value
	// repeated compresses about 10× in Pebble's Snappy blocks).
	n := s.w.ValueSize
	if s.w.ParetoAlpha > 0 {
		n = wire.MaxValue
	}
	st.val = make([]byte, n+valueOffsets)
	st.r.Read(st.val)
	return st
}

// valueOffsets is how many distinct windows a stream's values take.
const valueOffsets = 64 << 10

// value is the next value, size bytes.
func (st *Stream) value(size int) []byte {
	off := st.r.Intn(valueOffsets)
	return st.val[off : off+size]
}

// rank draws a key rank in [0, Keys).
func (st *Stream) rank() int64 { return st.clampRank(st.keys.Next(st.r)) }

// clampRank is generator rank k within [0, Keys).
func (st *Stream) clampRank(k int64) int64 {
	if k >= st.src.w.Keys { // float rounding at u → 1 in Gray's method
		k = st.src.w.Keys - 1
	}
	if k < 0 {
		k = 0
	}
	return k
}

// ValueSize draws one value size in bytes.
func (st *Stream) ValueSize() int {
	if st.src.w.ParetoAlpha <= 0 {
		return st.src.w.ValueSize
	}
	x := math.Ceil(st.sizes.Rand())
	if x > wire.MaxValue || math.IsNaN(x) {
		return wire.MaxValue
	}
	return int(x)
}

// Kind draws an operation kind from the mix.
func (st *Stream) Kind() OpKind {
	u := st.r.Float64()
	for k := OpKind(0); k < numOpKinds; k++ {
		if u < st.src.cum[k] {
			return k
		}
	}
	return numOpKinds - 1
}

// Next draws the next operation. An insert must be passed to Done once it has
// completed (successfully or not), so that read-latest reads can see it.
func (st *Stream) Next() Op {
	op := st.Draw()
	st.key = appendKey(st.key[:0], st.src.w.KeyPrefix, op.Index)
	op.Key = st.key
	return op
}

// Draw is Next without the key's name (Key is nil), for a caller that
// knows keys by index (Source.AppendKey names them): the same draws.
func (st *Stream) Draw() Op {
	var d Drawn
	st.Prepare(&d)
	return st.Complete(&d)
}

// Drawn is an operation with all its random draws made but, for a zipf
// key drawn through the table, the table's lookup of its rank: Prepare
// prefetches the table's line, which Complete reads, so that a caller
// drawing ahead overlaps that cache miss with its own work. It goes by
// pointer: 96 bytes, copied on every draw otherwise.
type Drawn struct {
	op       Op
	rank     int64   // the key's rank, unless deferred
	u        float64 // else the rank's uniform draw, and its Int63
	v        int64
	deferred bool
}

// Prepare makes an operation's draws, in Draw's order, into d. For
// read-latest (D), whose key is counted back from the inserts
// acknowledged when Complete runs, only Complete right after Prepare
// draws Draw's keys.
func (st *Stream) Prepare(d *Drawn) {
	*d = Drawn{op: Op{Kind: st.Kind()}}
	switch d.op.Kind {
	case OpInsert:
		d.op.Index = st.src.ins.next()
	default:
		if st.zipf != nil {
			d.u, d.v = st.zipf.draw(st.r)
			d.deferred = true
			prefetch.Line(uintptr(unsafe.Pointer(st.zipf.entry(d.u))))
		} else {
			d.rank = st.rank()
		}
	}
	switch d.op.Kind {
	case OpUpdate, OpInsert, OpReadModifyWrite:
		d.op.Value = st.value(st.ValueSize())
	}
}

// Complete is operation d, its key's rank looked up.
func (st *Stream) Complete(d *Drawn) Op {
	op := d.op
	if op.Kind == OpInsert {
		return op
	}
	r := d.rank
	if d.deferred {
		r = st.clampRank(st.zipf.rankOf(d.u, d.v))
	}
	if st.src.w.Name == "D" {
		op.Index = st.src.ins.last() - r
	} else {
		op.Index = r
	}
	return op
}

// Done acknowledges a completed operation; it matters for inserts only.
func (st *Stream) Done(op Op) {
	if op.Kind == OpInsert {
		st.src.ins.ack(op.Index)
	}
}

// ackCounter hands out insert indices and reports as last() the highest index
// below which every index has been acknowledged, so that read-latest never
// reads a key whose insert is still in flight. It is go-ycsb's
// AcknowledgedCounter behind a mutex: that type's window is not safe for
// concurrent Acknowledge calls under the race detector.
type ackCounter struct {
	c  *generator.AcknowledgedCounter
	mu sync.Mutex
}

func newAckCounter(start int64) *ackCounter {
	return &ackCounter{c: generator.NewAcknowledgedCounter(start)}
}

func (a *ackCounter) next() int64 { return a.c.Next(nil) }
func (a *ackCounter) last() int64 { return a.c.Last() }
func (a *ackCounter) ack(v int64) {
	a.mu.Lock()
	a.c.Acknowledge(v)
	a.mu.Unlock()
}
