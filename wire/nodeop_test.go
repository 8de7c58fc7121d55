package wire

import (
	"encoding/hex"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

func TestNodePacket(t *testing.T) {
	h := Header{Op: OpChainWrite, ReqID: 5, Stamp: 6}
	pkt := AppendNodeOp([]byte("prefix"), &h, []byte("key"), []byte("val"), []byte("ext"))
	if string(pkt[:6]) != "prefix" {
		t.Fatalf("AppendNodeOp overwrote dst: %q", pkt[:6])
	}
	var p NodePacket
	if err := p.Decode(pkt[6:]); err != nil || p.Header != h || string(p.Key) != "key" || string(p.Value) != "val" || string(p.Ext) != "ext" {
		t.Fatalf("Decode: %v %+v", err, p)
	}
	// Without an extension it is a plain packet, and Packet.Decode agrees.
	plain := AppendNodeOp(nil, &h, []byte("key"), []byte("val"), nil)
	var q Packet
	if err := q.Decode(plain); err != nil || q.Header != h || string(q.Key) != "key" || string(q.Value) != "val" {
		t.Fatalf("Packet.Decode of a node op: %v %+v", err, q)
	}
	// The extension is what Packet.Decode refuses as trailing bytes.
	if err := q.Decode(pkt[6:]); err != ErrTrailing {
		t.Errorf("Packet.Decode with an extension = %v, want ErrTrailing", err)
	}
	// No client limits: a node op may carry a key over MaxKey.
	big := make([]byte, MaxKey+1)
	if err := p.Decode(AppendNodeOp(nil, &h, big, nil, nil)); err != nil || len(p.Key) != MaxKey+1 || len(p.Ext) != 0 {
		t.Errorf("oversize key: %v, key %d", err, len(p.Key))
	}
	for _, tc := range []struct {
		b    []byte
		want error
	}{
		{pkt[6 : 6+HeaderLen-1], ErrShort},
		{pkt[6 : 6+PrefixLen-1], ErrShort},
		{pkt[6 : 6+PrefixLen+5], ErrLengths},
	} {
		if err := p.Decode(tc.b); err != tc.want {
			t.Errorf("Decode of %d bytes = %v, want %v", len(tc.b), err, tc.want)
		}
	}
}

// TestNodeOpLayout pins the promote request and the chain-write extension
// against encodings written by hand, as the table in nodeop.go says.
func TestNodeOpLayout(t *testing.T) {
	p := NewPromote([]byte("k"), []NodeID{4, 0x0102}, true)
	if p.Op != OpPromote || p.Flags != FlagPromoteNoStamp || p.KeyHash != HashKey([]byte("k")) || p.Node != 0 {
		t.Errorf("promote header %+v", p.Header)
	}
	if got := hex.EncodeToString(p.Value); got != "0004"+"0102" {
		t.Errorf("promote value %s", got)
	}
	if p := NewPromote([]byte("k"), nil, false); p.Flags != 0 || len(p.Value) != 0 {
		t.Errorf("promote without extras: %+v", p)
	}
	if d := NewDemote([]byte("k")); d.Op != OpDemote || d.KeyHash != HashKey([]byte("k")) || string(d.Key) != "k" || len(d.Value) != 0 {
		t.Errorf("demote %+v", d)
	}
	if s := NewStats(); s.Op != OpStats || len(s.Key)+len(s.Value) != 0 {
		t.Errorf("stats %+v", s)
	}
	c := ChainExt{Op: OpDel, Promoted: true, Addr: netip.MustParseAddrPort("10.0.0.1:5"), Extras: []NodeID{4, 9}}
	want := "03" + "01" + "06" + "0a000001" + "0500" + "02" + "0004" + "0009"
	if got := hex.EncodeToString(c.Append(nil)); got != want {
		t.Errorf("chain ext:\n got %s\nwant %s", got, want)
	}
	if got := hex.EncodeToString((&ChainExt{Op: OpPut}).Append(nil)); got != "02"+"00"+"00"+"00" {
		t.Errorf("chain ext without address or extras: %s", got)
	}
	if got := hex.EncodeToString((&ChainExt{Op: OpPut, Promoted: true, Reservation: true}).Append(nil)); got != "02"+"03"+"00"+"00" {
		t.Errorf("chain ext of a promoted key's write in the reservation phase: %s", got)
	}
}

func TestChainExt(t *testing.T) {
	for _, c := range []ChainExt{
		{Op: OpDel, Promoted: true, Addr: netip.MustParseAddrPort("10.0.0.1:5"), Extras: []NodeID{4, 9}},
		{Op: OpPut, Addr: netip.MustParseAddrPort("[::1]:7")},
		{Op: OpPut, Reservation: true, Addr: netip.MustParseAddrPort("10.0.0.1:5")},
		{Op: OpPut},
		{Op: OpPut, Extras: []NodeID{3}, Absorbed: []AbsorbedWrite{{ReqID: 7, Op: OpDel}, {ReqID: 1 << 60, Op: OpPut}}},
		{Op: OpDel, Addr: netip.MustParseAddrPort("10.0.0.1:5"), Absorbed: slices.Repeat([]AbsorbedWrite{{ReqID: 9, Op: OpPut}}, MaxWriteGroup-1)},
	} {
		b := c.Append(nil)
		var got ChainExt
		if err := got.Decode(b); err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, c)
		}
		// The absorbed writes are an optional trailing field: the prefix
		// without them is the same write with none.
		bare := c
		bare.Absorbed = nil
		for i := range b {
			if got.Decode(b[:i]) == nil && (i != len(bare.Append(nil)) || !reflect.DeepEqual(got, bare)) {
				t.Errorf("%+v: %d of %d bytes decoded", c, i, len(b))
			}
		}
		if got.Decode(append(b, 0)) == nil {
			t.Errorf("%+v: a trailing byte decoded", c)
		}
	}
	if err := new(ChainExt).Decode((&ChainExt{Op: OpGet}).Append(nil)); err != ErrChainExt {
		t.Errorf("chain ext of a GET: %v", err)
	}
	if err := new(ChainExt).Decode([]byte{2, 0, 3, 1, 2, 3, 0}); err != ErrChainExt {
		t.Errorf("chain ext with a bad address: %v", err)
	}
	for name, c := range map[string]ChainExt{
		"oversize group":      {Op: OpPut, Absorbed: slices.Repeat([]AbsorbedWrite{{ReqID: 9, Op: OpPut}}, MaxWriteGroup)},
		"absorbed GET":        {Op: OpPut, Absorbed: []AbsorbedWrite{{ReqID: 9, Op: OpGet}}},
		"absorbed unknown op": {Op: OpDel, Absorbed: []AbsorbedWrite{{ReqID: 9, Op: 0x7f}}},
	} {
		var got ChainExt
		if err := got.Decode(c.Append(nil)); err != ErrChainExt || got.Absorbed != nil {
			t.Errorf("chain ext with an %s: %v %+v", name, err, got)
		}
	}
	// An empty absorbed list is encoded by leaving the field out: a count
	// of 0 is not canonical.
	if err := new(ChainExt).Decode(append((&ChainExt{Op: OpPut}).Append(nil), 0)); err != ErrChainExt {
		t.Errorf("chain ext with an empty absorbed list: %v", err)
	}
}

func TestNodeIDs(t *testing.T) {
	ids := []NodeID{1, 0xfffe, 7}
	got, err := ParseNodeIDs(AppendNodeIDs(nil, ids))
	if err != nil || !reflect.DeepEqual(got, ids) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if got, err := ParseNodeIDs(nil); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty list: %v %v", got, err)
	}
	if _, err := ParseNodeIDs([]byte{1, 2, 3}); err != ErrNodeIDs {
		t.Errorf("odd length: %v", err)
	}
}

// FuzzNodeOps: no node-op decoder panics, and what they accept encodes
// back to the same bytes (a chain-write extension: to the same extension).
func FuzzNodeOps(f *testing.F) {
	h := Header{Op: OpChainWrite, ReqID: 5}
	f.Add(AppendNodeOp(nil, &h, []byte("k"), []byte("v"), (&ChainExt{Op: OpPut, Extras: []NodeID{1}}).Append(nil)))
	f.Add((&ChainExt{Op: OpDel, Addr: netip.MustParseAddrPort("127.0.0.1:1")}).Append(nil))
	f.Add([]byte{0, 1, 0, 2})
	f.Add((&ChainExt{Op: OpPut, Extras: []NodeID{2}, Absorbed: []AbsorbedWrite{{ReqID: 3, Op: OpDel}}}).Append(nil))
	f.Add((&ChainExt{Op: OpPut, Absorbed: slices.Repeat([]AbsorbedWrite{{ReqID: 1, Op: OpPut}}, MaxWriteGroup-1)}).Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p NodePacket
		if p.Decode(b) == nil {
			if out := AppendNodeOp(nil, &p.Header, p.Key, p.Value, p.Ext); string(out) != string(b) {
				t.Fatalf("node op re-encodes differently:\n in %x\nout %x", b, out)
			}
		}
		var c, c2 ChainExt
		if c.Decode(b) == nil {
			if len(c.Absorbed) > MaxWriteGroup-1 {
				t.Fatalf("chain ext accepted with %d absorbed writes", len(c.Absorbed))
			}
			if err := c2.Decode(c.Append(nil)); err != nil || !reflect.DeepEqual(c, c2) {
				t.Fatalf("chain ext %+v decodes back as %+v, %v", c, c2, err)
			}
		}
		if ids, err := ParseNodeIDs(b); err == nil && string(AppendNodeIDs(nil, ids)) != string(b) {
			t.Fatalf("node ids re-encode differently: %x", b)
		}
	})
}
