package storagenode

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/netdir/netdir/storagenode/device"
	"github.com/netdir/netdir/wire"
)

// TestLoadCountsRequestsInService: the load a reply carries counts a
// request from its submission until its shard has handled it, in the
// shard's hands too (where a GET waits for the device), and a request
// refused for a full queue not at all.
func TestLoadCountsRequestsInService(t *testing.T) {
	s := &shard{ch: make(chan item, 1)}
	a := &admission{shards: []*shard{s}}
	var h wire.KeyHash
	if !a.submit(h, true, wire.OpGet, item{b: []byte{1}}) {
		t.Fatal("submit refused with room in the queue")
	}
	if got := a.load(); got != 1 {
		t.Fatalf("load with one request queued: %d, want 1", got)
	}
	if a.submit(h, true, wire.OpGet, item{b: []byte{2}}) {
		t.Fatal("submit accepted into a full queue")
	}
	if got := a.load(); got != 1 {
		t.Fatalf("load after a refused request: %d, want 1", got)
	}
	it := <-s.ch // the shard takes it: in service, no longer queued
	if got := a.load(); got != 1 {
		t.Fatalf("load with one request in service: %d, want 1", got)
	}
	a.handled(it)
	if got := a.load(); got != 0 {
		t.Fatalf("load once handled: %d, want 0", got)
	}
	a.handled(item{fn: func() {}}) // a shard's own task was never counted
	if got := a.load(); got != 0 {
		t.Fatalf("load after an uncounted task: %d, want 0", got)
	}
}

// TestCachedGetNotBehindAnotherDeviceRead: with client requests waiting in
// admission (here MaxOps's bucket, as on a device's processor or under
// QoS), a GET whose block is cached is answered while a GET of another key
// of the same shard (the node has one) waits for its block on the device:
// the read pool serves GETs beside the shards, where a key-serial shard
// held the second behind the first's device read.
func TestCachedGetNotBehindAnotherDeviceRead(t *testing.T) {
	clock := device.NewFakeClock(t0)
	standStill := autoAdvance(t, clock)
	ssd, _ := device.Parse("ssd")
	ssd.RequestService = 0 // no processor: on a clock standing still only the device waits
	n, cl := startOnDevice(t, ssd, clock, func(o *Options) { o.MaxOps = 1 << 30 })
	loadCold(t, n, cl, 200)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cached, cold := deviceKey(1), deviceKey(100)
	if _, _, err := cl.Get(ctx, cached); err != nil {
		t.Fatal(err)
	}

	standStill.Lock()
	still := true
	defer func() { // before the cleanups: the node closes once its reads are served
		if still {
			standStill.Unlock()
		}
	}()
	reads := n.dev.Stats().Class[device.Read].IOs
	coldDone := make(chan error, 1)
	go func() {
		v, _, err := cl.Get(ctx, cold)
		if err == nil && len(v) != 1000 {
			t.Errorf("cold GET: %d bytes, want 1000", len(v))
		}
		coldDone <- err
	}()
	// The cold GET is in service once its block read is booked on the
	// device, where it waits while the clock stands still.
	for n.dev.Stats().Class[device.Read].IOs == reads || n.admit.load() != 1 {
		select {
		case err := <-coldDone:
			t.Fatalf("the cold GET was answered (%v) without the clock moving: want it waiting on the device", err)
		case <-ctx.Done():
			t.Fatal("the cold GET never reached the device")
		case <-time.After(time.Millisecond):
		}
	}
	if v, _, err := cl.Get(ctx, cached); err != nil || len(v) != 1000 {
		t.Fatalf("cached GET while another waits on the device: %d bytes, %v", len(v), err)
	}
	select {
	case err := <-coldDone:
		t.Fatalf("the cold GET was answered (%v) without the clock moving", err)
	default:
	}
	standStill.Unlock()
	still = false
	if err := <-coldDone; err != nil {
		t.Fatalf("cold GET once the device served it: %v", err)
	}
}

// TestWriteGroupsAtAdmission: an admitted write takes the writes of its
// key waiting behind it (its group), in arrival order, and the others keep
// theirs, ahead of writes that arrive later; the writes waiting, in the
// channel or the goroutine's FIFO, stay within the queue's length, and
// the load counts a group's writes until its shard has handled it.
func TestWriteGroupsAtAdmission(t *testing.T) {
	s := &shard{ch: make(chan item, 8)}
	a := &admission{shards: []*shard{s}, bucket: newTokenBucket(1, 1), queueLen: 4,
		writes: make(chan admitted, 4), reads: make(chan admitted, 4)}
	put := func(key string, id uint64) bool {
		h := wire.HashKey([]byte(key))
		b := wire.AppendNodeOp(nil, &wire.Header{Op: wire.OpPut, ReqID: id, KeyHash: h}, []byte(key), nil, nil)
		return a.submit(h, true, wire.OpPut, item{b: b})
	}
	take := func() (uint64, []uint64) {
		t.Helper()
		next, ok := a.take(nil)
		if !ok {
			t.Fatal("take: nothing")
		}
		var group []uint64
		for _, w := range next.it.group {
			group = append(group, wire.Frame(w.b).ReqID())
		}
		return wire.Frame(next.it.b).ReqID(), group
	}
	for i, k := range []string{"a", "b", "a", "c"} {
		if !put(k, uint64(i+1)) {
			t.Fatalf("write %d refused with room in the queue", i+1)
		}
	}
	if put("a", 5) {
		t.Fatal("a fifth write accepted into a queue of 4")
	}
	first, group := take()
	if first != 1 || !slices.Equal(group, []uint64{3}) {
		t.Fatalf("admitted write %d with group %v, want 1 with [3]", first, group)
	}
	if got := a.load(); got != 4 {
		t.Fatalf("load with a group of 2 admitted and 2 writes waiting: %d, want 4", got)
	}
	// Two writes wait in the FIFO: two more fit, then the queue is full.
	if !put("d", 6) || !put("a", 7) || put("e", 8) {
		t.Fatal("the queue's bound moved: want room for exactly 2 more writes")
	}
	var order []uint64
	for range 4 {
		id, group := take()
		if len(group) != 0 {
			t.Fatalf("write %d admitted with group %v, want none", id, group)
		}
		order = append(order, id)
	}
	if !slices.Equal(order, []uint64{2, 4, 6, 7}) {
		t.Fatalf("admission order %v, want [2 4 6 7]", order)
	}
	a.handled(item{counted: true, group: []item{{counted: true}}})
	if got := a.load(); got != 4 {
		t.Fatalf("load once the group of 2 is handled: %d, want 4", got)
	}
}

// TestAdmissionServesAReadAfterEachWrite: writes are admitted before
// reads, but after a write (its group) a waiting read goes next, so a
// head whose writes never stop waiting still admits its reads, one
// between two writes; with no read waiting the writes go on.
func TestAdmissionServesAReadAfterEachWrite(t *testing.T) {
	s := &shard{ch: make(chan item, 8)}
	a := &admission{shards: []*shard{s}, bucket: newTokenBucket(1, 1), queueLen: 8,
		writes: make(chan admitted, 8), reads: make(chan admitted, 8)}
	submit := func(op wire.Op, key string, id uint64) {
		t.Helper()
		h := wire.HashKey([]byte(key))
		b := wire.AppendNodeOp(nil, &wire.Header{Op: op, ReqID: id, KeyHash: h}, []byte(key), nil, nil)
		if !a.submit(h, true, op, item{b: b}) {
			t.Fatalf("request %d refused with room in the queue", id)
		}
	}
	for i, k := range []string{"a", "b", "c", "d"} { // no two of one key: no groups
		submit(wire.OpPut, k, uint64(1+i))
	}
	submit(wire.OpGet, "a", 10)
	submit(wire.OpGet, "b", 11)
	var order []uint64
	for range 6 {
		next, ok := a.take(nil)
		if !ok {
			t.Fatal("take: nothing")
		}
		order = append(order, wire.Frame(next.it.b).ReqID())
	}
	if want := []uint64{1, 10, 2, 11, 3, 4}; !slices.Equal(order, want) {
		t.Fatalf("admission order %v, want %v", order, want)
	}
}
