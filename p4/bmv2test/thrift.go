package bmv2test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Thrift is a minimal client of BMv2's Thrift runtime API (service
// "standard", binary protocol, buffered transport), enough to read and write
// registers. P4Runtime register reads and writes are not implemented by
// BMv2/PI, so this is how tests observe the coherence registers (ver_next,
// ver_done, fresh) and the node stats (latency, load). simple_switch_CLI's
// register_read does the same.
type Thrift struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	seq  int32
}

// NewThrift wraps a connection to the switch's Thrift port.
func NewThrift(conn net.Conn) *Thrift {
	return &Thrift{conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}
}

// Close closes the connection.
func (t *Thrift) Close() error { return t.conn.Close() }

// Thrift binary protocol types.
const (
	tStop   = 0
	tBool   = 2
	tByte   = 3
	tDouble = 4
	tI16    = 6
	tI32    = 8
	tI64    = 10
	tString = 11
	tStruct = 12
	tMap    = 13
	tSet    = 14
	tList   = 15

	msgCall      = 1
	msgReply     = 2
	msgException = 3
	version1     = 0x80010000
)

// RegisterRead reads one cell of a register array.
func (t *Thrift) RegisterRead(name string, index int) (uint64, error) {
	var v uint64
	err := t.call("bm_register_read", func(w *tw) {
		w.fieldI32(1, 0) // cxt_id
		w.fieldString(2, name)
		w.fieldI32(3, int32(index))
	}, func(id int16, typ byte, r *tr) (bool, error) {
		if id == 0 && typ == tI64 {
			x, err := r.i64()
			v = uint64(x)
			return true, err
		}
		return false, nil
	})
	return v, err
}

// RegisterWrite writes one cell of a register array.
func (t *Thrift) RegisterWrite(name string, index int, value uint64) error {
	return t.call("bm_register_write", func(w *tw) {
		w.fieldI32(1, 0)
		w.fieldString(2, name)
		w.fieldI32(3, int32(index))
		w.fieldI64(4, int64(value))
	}, nil)
}

// call sends one request and reads its reply. onField handles the result
// struct's fields; field 1 (the declared exception) becomes an error.
func (t *Thrift) call(method string, args func(*tw), onField func(int16, byte, *tr) (bool, error)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	w := &tw{w: t.w}
	w.u32(version1 | msgCall)
	w.str("standard:" + method) // TMultiplexedProtocol prefixes the service name
	w.i32(t.seq)
	args(w)
	w.byte(tStop)
	if w.err != nil {
		return w.err
	}
	if err := t.w.Flush(); err != nil {
		return err
	}
	r := &tr{r: t.r}
	hdr, err := r.i32()
	if err != nil {
		return err
	}
	if uint32(hdr)&0xffff0000 != version1 {
		return fmt.Errorf("thrift: bad reply header %#x", uint32(hdr))
	}
	if _, err := r.str(); err != nil {
		return err
	}
	if _, err := r.i32(); err != nil {
		return err
	}
	if hdr&0xff == msgException {
		var msg string
		err := r.structFields(func(id int16, typ byte) (bool, error) {
			if id == 1 && typ == tString {
				s, err := r.str()
				msg = s
				return true, err
			}
			return false, nil
		})
		if err != nil {
			return err
		}
		return fmt.Errorf("thrift %s: %s", method, msg)
	}
	if hdr&0xff != msgReply {
		return fmt.Errorf("thrift: unexpected message type %d", hdr&0xff)
	}
	var callErr error
	err = r.structFields(func(id int16, typ byte) (bool, error) {
		if id == 1 && typ == tStruct { // InvalidRegisterOperation{1: code}
			code := int32(0)
			err := r.structFields(func(id int16, typ byte) (bool, error) {
				if id == 1 && typ == tI32 {
					c, err := r.i32()
					code = c
					return true, err
				}
				return false, nil
			})
			callErr = fmt.Errorf("thrift %s: invalid register operation (code %d)", method, code)
			return true, err
		}
		if onField != nil {
			return onField(id, typ, r)
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	return callErr
}

type tw struct {
	w   *bufio.Writer
	err error
}

func (w *tw) write(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}
func (w *tw) byte(b byte)  { w.write([]byte{b}) }
func (w *tw) i16(v int16)  { w.write(binary.BigEndian.AppendUint16(nil, uint16(v))) }
func (w *tw) i32(v int32)  { w.write(binary.BigEndian.AppendUint32(nil, uint32(v))) }
func (w *tw) u32(v uint32) { w.write(binary.BigEndian.AppendUint32(nil, v)) }
func (w *tw) i64(v int64)  { w.write(binary.BigEndian.AppendUint64(nil, uint64(v))) }
func (w *tw) str(s string) {
	w.i32(int32(len(s)))
	w.write([]byte(s))
}
func (w *tw) field(id int16, typ byte) {
	w.byte(typ)
	w.i16(id)
}
func (w *tw) fieldI32(id int16, v int32)     { w.field(id, tI32); w.i32(v) }
func (w *tw) fieldI64(id int16, v int64)     { w.field(id, tI64); w.i64(v) }
func (w *tw) fieldString(id int16, s string) { w.field(id, tString); w.str(s) }

type tr struct{ r *bufio.Reader }

func (r *tr) n(k int) ([]byte, error) {
	b := make([]byte, k)
	_, err := io.ReadFull(r.r, b)
	return b, err
}
func (r *tr) byte() (byte, error) { return r.r.ReadByte() }
func (r *tr) i16() (int16, error) {
	b, err := r.n(2)
	if err != nil {
		return 0, err
	}
	return int16(binary.BigEndian.Uint16(b)), nil
}
func (r *tr) i32() (int32, error) {
	b, err := r.n(4)
	if err != nil {
		return 0, err
	}
	return int32(binary.BigEndian.Uint32(b)), nil
}
func (r *tr) i64() (int64, error) {
	b, err := r.n(8)
	if err != nil {
		return 0, err
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}
func (r *tr) str() (string, error) {
	n, err := r.i32()
	if err != nil {
		return "", err
	}
	if n < 0 || n > 1<<24 {
		return "", errors.New("thrift: bad string length")
	}
	b, err := r.n(int(n))
	return string(b), err
}

// structFields reads a struct's fields up to STOP, handing each to f, which
// says whether it consumed the value; unconsumed values are skipped.
func (r *tr) structFields(f func(id int16, typ byte) (bool, error)) error {
	for {
		typ, err := r.byte()
		if err != nil {
			return err
		}
		if typ == tStop {
			return nil
		}
		id, err := r.i16()
		if err != nil {
			return err
		}
		done, err := f(id, typ)
		if err != nil {
			return err
		}
		if !done {
			if err := r.skip(typ); err != nil {
				return err
			}
		}
	}
}

func (r *tr) skip(typ byte) error {
	var err error
	switch typ {
	case tBool, tByte:
		_, err = r.n(1)
	case tI16:
		_, err = r.n(2)
	case tI32:
		_, err = r.n(4)
	case tI64, tDouble:
		_, err = r.n(8)
	case tString:
		_, err = r.str()
	case tStruct:
		err = r.structFields(func(int16, byte) (bool, error) { return false, nil })
	case tMap:
		var kt, vt byte
		if kt, err = r.byte(); err != nil {
			return err
		}
		if vt, err = r.byte(); err != nil {
			return err
		}
		var n int32
		if n, err = r.i32(); err != nil {
			return err
		}
		for i := int32(0); i < n && err == nil; i++ {
			if err = r.skip(kt); err == nil {
				err = r.skip(vt)
			}
		}
	case tSet, tList:
		var et byte
		if et, err = r.byte(); err != nil {
			return err
		}
		var n int32
		if n, err = r.i32(); err != nil {
			return err
		}
		for i := int32(0); i < n && err == nil; i++ {
			err = r.skip(et)
		}
	default:
		err = fmt.Errorf("thrift: cannot skip type %d", typ)
	}
	return err
}
