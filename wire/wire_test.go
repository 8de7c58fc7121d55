package wire

import (
	"bytes"
	"crypto/sha3"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// full is a packet with every header field set to a distinct value.
func full() Packet {
	return Packet{
		Header: Header{
			Op:        OpPut,
			Flags:     FlagStaleOK | FlagStamped | FlagHit,
			Code:      CodeStaleVersion,
			Tenant:    0xbeef,
			ReqID:     0x0102030405060708,
			KeyHash:   HashKey([]byte("apple")),
			Stamp:     0x1112131415161718,
			Node:      0x2122,
			Load:      0x3132,
			Epoch:     0x41424344,
			Timestamp: 0x5152535455565758,
			Delta:     0x61626364,
			Rho:       0x71727374,
		},
		Key:   []byte("apple"),
		Value: []byte("red"),
	}
}

func equalPackets(a, b *Packet) bool {
	return a.Header == b.Header && bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value)
}

func TestRoundTrip(t *testing.T) {
	bigKey := bytes.Repeat([]byte("k"), MaxKey)
	bigVal := bytes.Repeat([]byte("v"), MaxValue)
	tests := []struct {
		name string
		p    Packet
	}{
		{"zero", Packet{}},
		{"all-fields", full()},
		{"get-no-value", Packet{Header: Header{Op: OpGet, ReqID: 1, KeyHash: HashKey([]byte("k"))}, Key: []byte("k")}},
		{"value-no-key", Packet{Header: Header{Op: OpGetReply}, Value: []byte("v")}},
		{"max-key", Packet{Header: Header{Op: OpPut}, Key: bigKey}},
		{"max-value", Packet{Header: Header{Op: OpPut}, Value: bigVal}},
		{"max-both", Packet{Header: Header{Op: OpPut}, Key: bigKey, Value: bigVal}},
		{"node-op", Packet{Header: Header{Op: OpChainWrite, Stamp: ^uint64(0), Node: ^uint16(0)}}},
		{"all-ones", Packet{Header: Header{Op: 0xff, Flags: 0xff, Code: 0xff, Tenant: 0xffff, ReqID: ^uint64(0),
			KeyHash: KeyHash{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			Stamp:   ^uint64(0), Node: 0xffff, Load: 0xffff, Epoch: ^uint32(0), Timestamp: ^uint64(0),
			Delta: ^uint32(0), Rho: ^uint32(0)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, MaxPacket)
			n, err := tc.p.Encode(buf)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if n != tc.p.Len() || n != PrefixLen+len(tc.p.Key)+len(tc.p.Value) {
				t.Fatalf("Encode wrote %d bytes, Len %d", n, tc.p.Len())
			}
			var got Packet
			if err := got.Decode(buf[:n]); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !equalPackets(&got, &tc.p) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.p)
			}
			app, err := tc.p.AppendEncode([]byte("prefix"))
			if err != nil {
				t.Fatalf("AppendEncode: %v", err)
			}
			if string(app[:6]) != "prefix" || !bytes.Equal(app[6:], buf[:n]) {
				t.Fatal("AppendEncode differs from Encode")
			}
			// Key and Value alias the buffer and are capped at their length,
			// so appending to one cannot overwrite the other.
			if n > 0 && len(got.Key) > 0 && &got.Key[0] != &buf[PrefixLen] {
				t.Error("Key does not alias the decoded buffer")
			}
			if cap(got.Key) != len(got.Key) || cap(got.Value) != len(got.Value) {
				t.Error("Key or Value capacity exceeds its length")
			}
		})
	}
}

// TestLayout pins the byte offsets of the package doc against an encoding
// written by hand.
func TestLayout(t *testing.T) {
	p := full()
	buf := make([]byte, p.Len())
	if _, err := p.Encode(buf); err != nil {
		t.Fatal(err)
	}
	want := "4e44" + "02" + "02" + "07" + "08" + "beef" +
		"0102030405060708" +
		"97e3d1acd025c1c72bd241f01764a644" +
		"1112131415161718" +
		"2122" + "3132" + "41424344" +
		"5152535455565758" +
		"61626364" + "71727374" +
		"0005" + "0003" + hex.EncodeToString([]byte("applered"))
	if got := hex.EncodeToString(buf); got != want {
		t.Fatalf("encoding:\n got %s\nwant %s", got, want)
	}
	f := Frame(buf)
	if f.Check() != nil || f.Magic() != Magic || f.Version() != Version {
		t.Errorf("Check = %v, magic %#x, version %d", f.Check(), f.Magic(), f.Version())
	}
	got := Header{Op: f.Op(), Flags: f.Flags(), Code: f.Code(), Tenant: f.Tenant(), ReqID: f.ReqID(), KeyHash: f.KeyHash(),
		Stamp: f.Stamp(), Node: f.Node(), Load: f.Load(), Epoch: f.Epoch(), Timestamp: f.Timestamp(),
		Delta: f.Delta(), Rho: f.Rho()}
	if got != p.Header {
		t.Errorf("getters:\n got %+v\nwant %+v", got, p.Header)
	}
	f.SetNode(0x0a0b)
	f.SetStamp(0x0c)
	f.SetTimestamp(0x0d)
	f.SetDelta(0x0e)
	f.SetRho(0x0f)
	f.SetFlags(0)
	var h Header
	if err := h.DecodeHeader(buf); err != nil {
		t.Fatal(err)
	}
	if h.Node != 0x0a0b || h.Stamp != 0x0c || h.Timestamp != 0x0d || h.Delta != 0x0e || h.Rho != 0x0f || h.Flags != 0 {
		t.Errorf("in-place setters: %+v", h)
	}
	if h.Load != 0x3132 || h.Epoch != 0x41424344 || h.ReqID != 0x0102030405060708 {
		t.Errorf("in-place setters disturbed other fields: %+v", h)
	}
}

// encoded returns a valid encoding of a packet with key k and value v, for
// corrupting.
func encoded(t *testing.T, k, v int) []byte {
	t.Helper()
	p := Packet{Header: Header{Op: OpGet, ReqID: 42}, Key: bytes.Repeat([]byte("k"), k), Value: bytes.Repeat([]byte("v"), v)}
	b := make([]byte, PrefixLen+k+v)
	if _, err := p.Encode(b); err != nil && k <= MaxKey && v <= MaxValue {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint16(b[offMagic:], Magic)
	b[offVersion] = Version
	binary.BigEndian.PutUint64(b[offReqID:], 42)
	binary.BigEndian.PutUint16(b[offKeyLen:], uint16(k))
	binary.BigEndian.PutUint16(b[offValLen:], uint16(v))
	return b
}

func TestDecodeErrors(t *testing.T) {
	valid := encoded(t, 3, 4)
	tests := []struct {
		name string
		b    []byte
		want error
		// header says whether the header was decoded despite the error.
		header bool
	}{
		{"nil", nil, ErrShort, false},
		{"one-byte", []byte{0x4e}, ErrShort, false},
		{"header-minus-one", valid[:HeaderLen-1], ErrShort, false},
		{"header-only", valid[:HeaderLen], ErrShort, true},
		{"no-value-length", valid[:PrefixLen-1], ErrShort, true},
		{"magic", patch(valid, offMagic, 0x4e, 0x45), ErrMagic, false},
		{"magic-swapped", patch(valid, offMagic, 0x44, 0x4e), ErrMagic, false},
		{"version-0", patch(valid, offVersion, 0), ErrVersion, false},
		{"version-1", patch(valid, offVersion, 1), ErrVersion, false},
		{"version-3", patch(valid, offVersion, 3), ErrVersion, false},
		{"key-past-end", patch(valid, offKeyLen, 0, 9), ErrLengths, true},
		{"value-past-end", patch(valid, offValLen, 0, 5), ErrLengths, true},
		{"lengths-max", patch(valid, offKeyLen, 0xff, 0xff, 0xff, 0xff), ErrLengths, true},
		{"truncated-value", valid[:len(valid)-1], ErrLengths, true},
		{"trailing-byte", append(append([]byte(nil), valid...), 0), ErrTrailing, true},
		{"key-shorter", patch(valid, offKeyLen, 0, 2), ErrTrailing, true},
		{"key-over-max", encoded(t, MaxKey+1, 0), ErrKeyLarge, true},
		{"value-over-max", encoded(t, 0, MaxValue+1), ErrValLarge, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Packet
			err := p.Decode(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, want %v", err, tc.want)
			}
			if got := p.ReqID == 42; got != tc.header {
				t.Errorf("header decoded = %v, want %v", got, tc.header)
			}
			var h Header
			herr := h.DecodeHeader(tc.b)
			switch tc.want {
			case ErrShort, ErrMagic, ErrVersion:
				if tc.header {
					if herr != nil {
						t.Errorf("DecodeHeader = %v, want nil", herr)
					}
				} else if herr != tc.want {
					t.Errorf("DecodeHeader = %v, want %v", herr, tc.want)
				}
			default:
				if herr != nil {
					t.Errorf("DecodeHeader = %v, want nil (lengths are not the header's)", herr)
				}
			}
		})
	}
	// An oversize key still decodes its header and aliases the key, so that a
	// node can answer with CodeKeyTooLarge.
	var p Packet
	if err := p.Decode(encoded(t, MaxKey+1, 0)); err != ErrKeyLarge || len(p.Key) != MaxKey+1 {
		t.Errorf("oversize key: err %v, len %d", err, len(p.Key))
	}
}

// patch returns a copy of b with bytes written at off.
func patch(b []byte, off int, x ...byte) []byte {
	c := append([]byte(nil), b...)
	copy(c[off:], x)
	return c
}

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name string
		p    Packet
		buf  int
		want error
	}{
		{"key-over-max", Packet{Key: make([]byte, MaxKey+1)}, MaxPacket + 1, ErrKeyLarge},
		{"value-over-max", Packet{Value: make([]byte, MaxValue+1)}, MaxPacket + 1, ErrValLarge},
		{"buffer-empty", Packet{}, 0, ErrBufSmall},
		{"buffer-header-only", Packet{}, HeaderLen, ErrBufSmall},
		{"buffer-one-short", Packet{Key: []byte("ab"), Value: []byte("c")}, PrefixLen + 2, ErrBufSmall},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, tc.buf)
			n, err := tc.p.Encode(buf)
			if err != tc.want || n != 0 {
				t.Fatalf("Encode = %d, %v; want 0, %v", n, err, tc.want)
			}
			if _, err := tc.p.AppendEncode(nil); tc.want != ErrBufSmall && err != tc.want {
				t.Errorf("AppendEncode = %v, want %v", err, tc.want)
			}
		})
	}
	var h Header
	if err := h.EncodeHeader(make([]byte, HeaderLen-1)); err != ErrBufSmall {
		t.Errorf("EncodeHeader into %d bytes = %v", HeaderLen-1, err)
	}
	if err := h.EncodeHeader(make([]byte, HeaderLen)); err != nil {
		t.Errorf("EncodeHeader into %d bytes = %v", HeaderLen, err)
	}
}

func TestKeyHash(t *testing.T) {
	// Known answers: SHAKE128("") is the FIPS 202 test vector; "apple" was
	// computed with Python's hashlib.shake_128, an independent implementation.
	known := map[string]string{
		"":      "7f9c2ba4e88f827d616045507605853e",
		"apple": "97e3d1acd025c1c72bd241f01764a644",
	}
	for k, want := range known {
		if got := HashKey([]byte(k)).String(); got != want {
			t.Errorf("HashKey(%q) = %s, want %s", k, got, want)
		}
	}
	for _, k := range []string{"", "a", "apple", "user:1234", strings.Repeat("x", 167), strings.Repeat("y", 168), strings.Repeat("z", MaxKey)} {
		h := HashKey([]byte(k))
		if want := sha3.SumSHAKE128([]byte(k), KeyHashLen); !bytes.Equal(h[:], want) {
			t.Errorf("HashKey(%.10q...) = %x, SumSHAKE128 = %x", k, h, want)
		}
	}
	p := Packet{Header: Header{KeyHash: HashKey([]byte("apple"))}, Key: []byte("apple")}
	if err := p.CheckHash(); err != nil {
		t.Errorf("CheckHash of a matching key: %v", err)
	}
	p.Key = []byte("apples")
	if err := p.CheckHash(); err != ErrHashMatch {
		t.Errorf("CheckHash of another key = %v, want ErrHashMatch", err)
	}
}

func TestPartition(t *testing.T) {
	h := HashKey([]byte("apple")) // 97e3d1ac...
	tests := []struct {
		bits uint
		want uint32
	}{
		{0, 0},
		{1, 1},           // 1001...
		{2, 2},           // 10
		{4, 0x9},         // 1001
		{8, 0x97},        // the first byte
		{10, 0x25f},      // 1001011111
		{16, 0x97e3},     // two bytes
		{20, 0x97e3d},    // the most the directory allows
		{32, 0x97e3d1ac}, // the whole first word
	}
	for _, tc := range tests {
		if got := h.Partition(tc.bits); got != tc.want {
			t.Errorf("Partition(%d) = %#x, want %#x", tc.bits, got, tc.want)
		}
	}
	// Only the first four bytes count, and every result is in range.
	var a, b KeyHash
	for i := range b {
		b[i] = 0xff
	}
	a[0], b[0] = 0x80, 0x7f
	for bits := uint(1); bits <= 32; bits++ {
		if got := a.Partition(bits); got != 1<<(bits-1) {
			t.Errorf("Partition(%d) of 0x80... = %#x", bits, got)
		}
		if got := b.Partition(bits); got != 1<<(bits-1)-1 {
			t.Errorf("Partition(%d) of 0x7fff... = %#x", bits, got)
		}
		b4 := b
		b4[4], b4[15] = 0, 0
		if b4.Partition(bits) != b.Partition(bits) {
			t.Errorf("Partition(%d) depends on bytes past the fourth", bits)
		}
	}
}

func TestOps(t *testing.T) {
	known := 0
	for o := 0; o < 256; o++ {
		op := Op(o)
		s := op.String()
		back, err := ParseOp(s)
		if err != nil || back != op {
			t.Errorf("ParseOp(%q) = %v, %v; want %#x", s, back, err, o)
		}
		if op.Known() {
			known++
			if strings.HasPrefix(s, "op(") {
				t.Errorf("known op %#x has no name", o)
			}
		}
		if op.IsNodeOp() != (o >= 0x20 && o <= 0x3f) {
			t.Errorf("IsNodeOp(%#x) = %v", o, op.IsNodeOp())
		}
	}
	if known != 8+11 {
		t.Errorf("%d known ops, want 19", known)
	}
	if _, err := ParseOp("fetch"); err == nil {
		t.Error("ParseOp(fetch) did not fail")
	}
	for op, want := range map[Op]Op{OpGet: OpGetReply, OpPut: OpPutReply, OpDel: OpDelReply, OpVSB: OpErr, OpCopy: OpErr,
		OpPromote: OpPromote, OpDemote: OpDemote, OpStats: OpStats, OpChainWrite: OpErr} {
		if got := op.Reply(); got != want {
			t.Errorf("%v.Reply() = %v, want %v", op, got, want)
		}
	}
}

func TestCodes(t *testing.T) {
	seen := map[string]bool{}
	for c := CodeOK; c <= CodeHashMismatch; c++ {
		s := c.String()
		if strings.HasPrefix(s, "code(") || seen[s] {
			t.Errorf("code %d: name %q missing or repeated", c, s)
		}
		seen[s] = true
		if c.Error() != "netdir: "+s {
			t.Errorf("code %d: Error() = %q", c, c.Error())
		}
	}
	if s := Code(200).String(); s != "code(200)" {
		t.Errorf("Code(200) = %q", s)
	}
}

func TestDecodeEncodeAllocs(t *testing.T) {
	p := full()
	buf := make([]byte, p.Len())
	var q Packet
	var h Header
	if _, err := p.Encode(buf); err != nil {
		t.Fatal(err)
	}
	checks := map[string]func(){
		"Encode":       func() { p.Encode(buf) },
		"Decode":       func() { q.Decode(buf) },
		"EncodeHeader": func() { p.EncodeHeader(buf) },
		"DecodeHeader": func() { h.DecodeHeader(buf) },
		"DecodeError":  func() { q.Decode(buf[:10]) },
		"Frame": func() {
			f := Frame(buf)
			if f.Check() == nil && f.KeyHash() == p.KeyHash {
				f.SetStamp(f.Stamp() + uint64(f.Node()) + f.ReqID())
			}
		},
	}
	for name, f := range checks {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.1f times per run", name, n)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	p := full()
	p.Value = bytes.Repeat([]byte("v"), 100)
	buf := make([]byte, MaxPacket)
	b.SetBytes(int64(p.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Encode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	p := full()
	p.Value = bytes.Repeat([]byte("v"), 100)
	buf := make([]byte, p.Len())
	if _, err := p.Encode(buf); err != nil {
		b.Fatal(err)
	}
	var q Packet
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if err := q.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func TestStampIncarnation(t *testing.T) {
	s := MakeStamp(3, 8)
	if s != 3<<48|8 || StampVersion(s) != 8 || StampIncarnation(s) != 3 {
		t.Fatalf("MakeStamp(3, 8) = %#x: version %d incarnation %d", s, StampVersion(s), StampIncarnation(s))
	}
	if StampVersion(MakeStamp(1, 1<<48|5)) != 5 {
		t.Fatal("a version over 48 bits spills into the incarnation")
	}
	for _, c := range []struct {
		a, b   uint16
		before bool
	}{{1, 2, true}, {2, 1, false}, {2, 2, false}, {0xffff, 0, true}, {0, 0xffff, false}, {0, 0x7fff, true}} {
		if got := IncarnationBefore(c.a, c.b); got != c.before {
			t.Errorf("IncarnationBefore(%d, %d) = %v, want %v", c.a, c.b, got, c.before)
		}
	}
}
