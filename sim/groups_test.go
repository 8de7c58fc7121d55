package sim

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/wire"
)

// groupHarness runs a Sim's events by hand for writes of one key sent
// straight to its head: the test routes each at a time of its choice and
// sees every reply as it reaches the data plane, and every commit.
type groupHarness struct {
	t       *testing.T
	s       *Sim
	key     int64
	chain   []wire.NodeID
	replies map[int32]groupReply
	commits []int32
}

type groupReply struct {
	t     uint64
	op    wire.Op
	code  wire.Code
	stamp uint64
	node  wire.NodeID
	load  uint16
}

func newGroupHarness(t *testing.T) *groupHarness {
	s := newSim(t, smallConfig(1)) // 8 nodes, chains of 3, 1 ms a service
	s.stats.measuring = true
	const k = 17
	return &groupHarness{t: t, s: s, key: k, chain: s.chain(s.hash(k).Partition(s.cfg.PartitionBits)),
		replies: map[int32]groupReply{}}
}

// write routes a write of the key at time at to its head, stamped with
// version stamp (0: unstamped), after running the events before at.
func (h *groupHarness) write(at, stamp uint64) int32 {
	hd := wire.Header{Op: wire.OpPut, Node: h.chain[0]}
	if stamp > 0 {
		hd.Flags, hd.Stamp = wire.FlagStamped, wire.MakeStamp(1, stamp)
	}
	return h.send(at, h.key, bench.OpUpdate, hd)
}

// read routes a read of key k to node n at time at, after running the
// events before at.
func (h *groupHarness) read(at uint64, k int64, n wire.NodeID) int32 {
	return h.send(at, k, bench.OpRead, wire.Header{Op: wire.OpGet, Node: n})
}

// send routes a request of key k, kind and header hd (its request id and
// key hash filled in) to hd.Node at time at, after running the events
// before at.
func (h *groupHarness) send(at uint64, k int64, kind bench.OpKind, hd wire.Header) int32 {
	s := h.s
	h.runBefore(at)
	s.now = at
	i := s.newRequest()
	r := &s.reqs[i]
	*r = request{key: k, kind: kind, client: -1, issued: at}
	r.op = s.newOp(i)
	hd.ReqID, hd.KeyHash = uint64(i)+1, s.hash(k)
	_ = hd.EncodeHeader(r.hdr[:])
	s.route(i, hd.Op != wire.OpGet, int32(hd.Node)-1)
	return i
}

// runBefore handles the events before time t (all: math.MaxUint64).
func (h *groupHarness) runBefore(t uint64) {
	s := h.s
	for {
		src, et, ok := s.ev.earliest()
		if !ok || et >= t {
			return
		}
		e := s.ev.take(src)
		s.now = e.t
		switch e.kind {
		case evAtNode:
			s.atNode(e.a)
		case evServed:
			s.served(wire.NodeID(e.a))
		case evCommit:
			h.commits = append(h.commits, e.a)
			s.commit(e.a)
		case evReplyAtPlane:
			f := wire.Frame(s.reqs[e.a].hdr[:])
			if _, dup := h.replies[e.a]; dup {
				h.t.Fatalf("request %d answered twice", e.a)
			}
			h.replies[e.a] = groupReply{s.now, f.Op(), f.Code(), f.Stamp(), f.Node(), f.Load()}
		default:
			h.t.Fatalf("unexpected event %+v", e)
		}
	}
}

// members is the group headed by request i: its writes in order.
func (h *groupHarness) members(i int32) []int32 {
	var out []int32
	for j := i; j >= 0; j = h.s.reqs[j].next {
		out = append(out, j)
	}
	return out
}

func (h *groupHarness) link() uint64 { return h.s.link() }

// TestGroupFormsOfArrivedWrites: when a write starts service at its head,
// the writes of its key that have arrived there join it, in arrival
// order; one that arrives at the same time but after that start (its
// order, taken when it was routed, comes after the service's end that
// starts the group) waits for the next group. Each group is one service
// time and one commit, at the version of its last write, every write of
// it answered OK with that version, none before the commit.
func TestGroupFormsOfArrivedWrites(t *testing.T) {
	h := newGroupHarness(t)
	s, link, svc := h.s, h.link(), uint64(time.Millisecond)
	head := s.node(h.chain[0])
	w0 := h.write(0, 0) // served from link to link + svc
	w1 := h.write(svc/2, 0)
	w2 := h.write(svc-1, 0) // arrives 1 ns before w0's service ends
	w3 := h.write(svc, 0)   // arrives at w0's end, after it: the next group
	w4 := h.write(svc+link/2, 0)
	h.runBefore(link + svc + 1)
	if head.serving != w1 || !slices.Equal(h.members(w1), []int32{w1, w2}) || head.grouped != 1 {
		t.Fatalf("after w0: serving %d, group %v, %d grouped; want w1 (%d) with w2 (%d), 1", head.serving, h.members(w1), head.grouped, w1, w2)
	}
	h.runBefore(link + 2*svc + 1)
	if head.serving != w3 || !slices.Equal(h.members(w3), []int32{w3, w4}) || head.grouped != 1 {
		t.Fatalf("after the first group: serving %d, group %v, %d grouped; want w3 (%d) with w4 (%d), 1", head.serving, h.members(w3), head.grouped, w3, w4)
	}
	h.runBefore(1 << 62)
	if len(h.commits) != 3 || h.commits[0] != w0 || h.commits[1] != w2 || h.commits[2] != w4 {
		t.Fatalf("commits %v; want w0, w2, w4 (%d, %d, %d): one a group, its last write", h.commits, w0, w2, w4)
	}
	// Service ends: w0 at link+svc, the first group at link+2svc, the
	// second at link+3svc; a commit R−1 links later.
	chainLinks := uint64(len(h.chain)-1) * link
	for _, c := range []struct {
		group   []int32
		end     uint64
		version uint64
	}{{[]int32{w0}, link + svc, 1}, {[]int32{w1, w2}, link + 2*svc, 3}, {[]int32{w3, w4}, link + 3*svc, 5}} {
		commit := c.end + chainLinks
		last := c.group[len(c.group)-1]
		for _, j := range c.group {
			r, ok := h.replies[j]
			if !ok || r.op != wire.OpPutReply || r.code != wire.CodeOK || r.stamp != c.version {
				t.Fatalf("write %d: reply %+v (answered %v); want OK at version %d", j, r, ok, c.version)
			}
			want, from := commit+link, h.chain[len(h.chain)-1] // the tail's reply
			if j != last {
				want, from = commit+chainLinks+link, h.chain[0] // the head's, when the ack is back
			}
			if r.t != want || r.node != from {
				t.Errorf("write %d of group %v: answered at %d from node %d; want %d from %d (commit at %d)", j, c.group, r.t, r.node, want, from, commit)
			}
		}
	}
	if s.keys[h.key].committed != 5 || s.keys[h.key].version != 5 {
		t.Errorf("key at version %d, committed %d; want 5 and 5", s.keys[h.key].version, s.keys[h.key].committed)
	}
	if s.stats.writeGroups != 2 || s.stats.groupedWrites != 2 || head.grouped != 0 || head.backlog() != 0 {
		t.Errorf("%d groups absorbing %d writes, %d grouped left, backlog %d; want 2 absorbing 2, none, 0", s.stats.writeGroups, s.stats.groupedWrites, head.grouped, head.backlog())
	}
}

// TestGroupRefusesAStaleStampAlone: in a group, a stamp at or below the
// version an earlier write of the group took is stale: that write alone
// is answered stale-version, at once; the others make one version, the
// last accepted write's, all answered with it.
func TestGroupRefusesAStaleStampAlone(t *testing.T) {
	h := newGroupHarness(t)
	s, link, svc := h.s, h.link(), uint64(time.Millisecond)
	w0 := h.write(0, 3)
	a := h.write(svc/4, 5)
	stale := h.write(svc/2, 5) // not above a's, taken in the group
	c := h.write(3*svc/4, 7)
	h.runBefore(1 << 62)
	end := link + 2*svc // the group's service end
	if r := h.replies[stale]; r.op != wire.OpErr || r.code != wire.CodeStaleVersion || r.t != end+link {
		t.Fatalf("stale write: %+v; want stale-version at %d", r, end+link)
	}
	for _, j := range []int32{a, c} {
		if r := h.replies[j]; r.op != wire.OpPutReply || r.code != wire.CodeOK || r.stamp != 7 {
			t.Fatalf("write %d: %+v; want OK at the group's version 7", j, r)
		}
	}
	if len(h.commits) != 2 || h.commits[0] != w0 || h.commits[1] != c || s.keys[h.key].committed != 7 {
		t.Fatalf("commits %v, committed %d; want w0 (%d) and c (%d), 7", h.commits, s.keys[h.key].committed, w0, c)
	}
	if s.stats.writeGroups != 1 || s.stats.groupedWrites != 1 {
		t.Errorf("%d groups absorbing %d writes; want 1 absorbing 1 (a; the stale write is no part of the version)", s.stats.writeGroups, s.stats.groupedWrites)
	}
}

// TestGroupIsCappedAtMaxWriteGroup: writes of a key waiting together
// beyond wire.MaxWriteGroup wait for the next group, in arrival order.
func TestGroupIsCappedAtMaxWriteGroup(t *testing.T) {
	h := newGroupHarness(t)
	s, svc := h.s, uint64(time.Millisecond)
	h.write(0, 0)
	var ws []int32
	for j := range wire.MaxWriteGroup + 8 {
		ws = append(ws, h.write(svc/2+uint64(j), 0))
	}
	h.runBefore(1 << 62)
	if len(h.commits) != 3 || h.commits[1] != ws[wire.MaxWriteGroup-1] || h.commits[2] != ws[len(ws)-1] {
		t.Fatalf("commits %v; want 3: the first write, the %dth grouped write and the last", h.commits, wire.MaxWriteGroup)
	}
	for j, w := range ws {
		want := uint64(1 + wire.MaxWriteGroup)
		if j >= wire.MaxWriteGroup {
			want = uint64(1 + len(ws))
		}
		if r := h.replies[w]; r.stamp != want {
			t.Fatalf("grouped write %d answered at version %d; want %d", j, r.stamp, want)
		}
	}
	if s.stats.writeGroups != 2 || s.stats.groupedWrites != int64(len(ws)-2) {
		t.Errorf("%d groups absorbing %d writes; want 2 absorbing %d", s.stats.writeGroups, s.stats.groupedWrites, len(ws)-2)
	}
}

// TestGroupedWritesReadsAreLinearizable: YCSB A at zipf 1.2 saturates
// the hottest keys' heads, whose writes are grouped: every read still
// returns no older a version than any write acknowledged (each grouped
// write's included) or read answered before it was sent, flat and under
// a spine with copies held back; and a run is still a function of its
// seed.
func TestGroupedWritesReadsAreLinearizable(t *testing.T) {
	flat := smallConfig(4)
	flat.Workload.Name, flat.Concurrency, flat.CheckReads = "A", 256, true
	layered := flat
	layered.Nodes, layered.RackSize, layered.Concurrency, layered.copyDelay = 12, 4, 384, 20*time.Millisecond
	for name, cfg := range map[string]Config{"flat": flat, "layered": layered} {
		run, err := Run(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if run.WriteGroups == 0 || run.GroupedWrites < run.WriteGroups || run.Errors != 0 {
			t.Fatalf("%s: %d groups absorbing %d writes, %d errors; want some groups, no errors", name, run.WriteGroups, run.GroupedWrites, run.Errors)
		}
		t.Logf("%s: %.0f ops/s, %d write groups absorbing %d writes", name, run.ThroughputOps, run.WriteGroups, run.GroupedWrites)
		cfg.CheckReads = false
		if a, b := runJSON(t, cfg), runJSON(t, cfg); !bytes.Equal(a, b) {
			t.Fatalf("%s: two runs of the same seed wrote different JSON", name)
		}
	}
}

// TestWriteHotHeadServesReads: at a head whose key's next write always
// waits when a service ends, the reads waiting there are served one
// between two groups: writes first, but after a write a waiting read.
// Writes first without that starved them until the writes stopped.
func TestWriteHotHeadServesReads(t *testing.T) {
	h := newGroupHarness(t)
	s, link, svc := h.s, h.link(), uint64(time.Millisecond)
	head := h.chain[0]
	h.write(0, 0)
	r1 := h.read(svc/4, h.key, head)
	r2 := h.read(svc/4+1, h.key+1, head)
	var last int32
	for j := range uint64(16) { // a write every half service, for 8 services
		last = h.write(svc/2+j*svc/2, 0)
	}
	h.runBefore(1 << 62)
	// Services: the first write, r1, a group, r2, then groups.
	for j, c := range []struct {
		read int32
		end  uint64
	}{{r1, link + 2*svc}, {r2, link + 4*svc}} {
		r, ok := h.replies[c.read]
		if !ok || r.op != wire.OpGetReply || r.t != c.end+link {
			t.Fatalf("read %d: reply %+v (answered %v); want a GET reply at %d, after its service between two write groups", j+1, r, ok, c.end+link)
		}
	}
	if r := h.replies[last]; r.op != wire.OpPutReply || r.code != wire.CodeOK || r.t <= h.replies[r2].t {
		t.Fatalf("last write: %+v; want OK after the reads", r)
	}
	if n := s.node(head); n.backlog() != 0 {
		t.Errorf("head's backlog %d at the end; want 0", n.backlog())
	}
}

// TestTailReplyCarriesTheTailsLoad: the tail answers a write with its own
// queue depth, as a storage node's reply does, not the head's: the data
// plane's fine score learns each node's load from the replies it sends.
func TestTailReplyCarriesTheTailsLoad(t *testing.T) {
	h := newGroupHarness(t)
	s := h.s
	tail := h.chain[len(h.chain)-1]
	for range 5 {
		h.read(0, h.key+1, tail) // served at the tail one a millisecond from link
	}
	w := h.write(0, 0) // the head's only request: served from link to link + svc
	h.runBefore(1 << 62)
	// The commit is at link + svc + 2 links = 1.75 ms: one read done, one in
	// service, three waiting.
	if r := h.replies[w]; r.node != tail || r.load != 4 {
		t.Fatalf("write answered by node %d with load %d; want the tail (%d) with its 4 (%v)", r.node, r.load, tail, s.node(tail).backlog())
	}
}
