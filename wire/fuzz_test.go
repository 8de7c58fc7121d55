package wire

import (
	"bytes"
	"testing"
)

func fuzzSeeds(f *testing.F) {
	for _, p := range []Packet{full(), {}, {Header: Header{Op: OpVSB, Stamp: 7, Node: 4}},
		{Header: Header{Op: OpGetReply, Flags: FlagReservation, Tenant: 3, Delta: 5, Rho: 2}}, {Header: Header{Op: OpGet}, Key: []byte("k")}} {
		b, err := p.AppendEncode(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:HeaderLen])
		f.Add(append(b, 0))
	}
	f.Add([]byte{})
	f.Add([]byte{0x4e, 0x44, Version})
}

// FuzzDecode: Decode never panics, fails only with its own errors, and what
// it accepts re-encodes to the same bytes and decodes to the same packet.
func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		err := p.Decode(b)
		switch err {
		case nil:
		case ErrShort, ErrMagic, ErrVersion, ErrLengths, ErrTrailing, ErrKeyLarge, ErrValLarge:
			return
		default:
			t.Fatalf("Decode returned an undocumented error %v", err)
		}
		if p.Len() != len(b) || len(p.Key) > MaxKey || len(p.Value) > MaxValue {
			t.Fatalf("accepted %d bytes as a packet of Len %d (key %d, value %d)", len(b), p.Len(), len(p.Key), len(p.Value))
		}
		out := make([]byte, len(b))
		n, err := p.Encode(out)
		if err != nil || n != len(b) {
			t.Fatalf("re-encode: %d, %v", n, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, out)
		}
		var q Packet
		if err := q.Decode(out); err != nil || !equalPackets(&p, &q) {
			t.Fatalf("second decode: %v, %+v != %+v", err, q, p)
		}
	})
}

// FuzzDecodeHeader: DecodeHeader never panics, fails only with its own
// errors, and what it accepts re-encodes to the same HeaderLen bytes.
func FuzzDecodeHeader(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Header
		err := h.DecodeHeader(b)
		switch err {
		case nil:
		case ErrShort, ErrMagic, ErrVersion:
			if Frame(b).Check() != err {
				t.Fatalf("DecodeHeader %v, Check %v", err, Frame(b).Check())
			}
			return
		default:
			t.Fatalf("DecodeHeader returned an undocumented error %v", err)
		}
		var out [HeaderLen]byte
		if err := h.EncodeHeader(out[:]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out[:], b[:HeaderLen]) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b[:HeaderLen], out)
		}
		if f := Frame(b); f.Check() != nil || f.Op() != h.Op || f.KeyHash() != h.KeyHash || f.ReqID() != h.ReqID ||
			f.Delta() != h.Delta || f.Rho() != h.Rho {
			t.Fatalf("Frame %v %v %x %x, DecodeHeader %+v", f.Check(), f.Op(), f.KeyHash(), f.ReqID(), h)
		}
	})
}
