package storagenode_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/wire"
)

// rateLimited starts a cluster whose nodes admit maxOps client requests a
// second (Options.MaxOps): writes wait for admission, so they group.
func rateLimited(t *testing.T, n int, maxOps float64) *cluster.Cluster {
	return startCluster(t, cluster.Options{N: n, R: n, Node: func(o *storagenode.Options) { o.MaxOps = maxOps }})
}

// TestWriteGroups: many concurrent writes of one key at a head that admits
// 50 requests a second are applied as few versions (write groups), and
// every write is acknowledged OK with its group's version: the last one of
// a group by the tail, the others by the head once the tail acked. The
// key's value is a write of the last group; a retry of an absorbed write
// is answered with its version, not applied, at the head and, once the
// head is killed and spliced out, at the new head (the middle remembered
// the absorbed request ids).
func TestWriteGroups(t *testing.T) {
	c := rateLimited(t, 3, 50)
	p := newPeer(t).sealing(c)
	key := []byte("hot")
	h := wire.HashKey(key)
	ch := c.Layout.ChainOf(h)
	head := addrOf(c, ch[0])
	const writes = 200
	start := time.Now()
	for i := range writes {
		p.send(head, raw(wire.Header{Op: wire.OpPut, ReqID: uint64(1000 + i), KeyHash: h}, key, fmt.Appendf(nil, "v%d", i)))
	}
	ver := map[uint64]uint64{} // request id -> acknowledged version
	from := map[uint64]wire.NodeID{}
	for len(ver) < writes {
		r, ok := p.recv(0)
		if !ok {
			t.Fatalf("%d of %d writes answered", len(ver), writes)
		}
		if r.Op != wire.OpPutReply || r.Code != wire.CodeOK || r.Stamp == 0 {
			t.Fatalf("write %d: %s %s v%d, want put-reply OK with a version", r.ReqID, r.Op, r.Code, r.Stamp)
		}
		ver[r.ReqID], from[r.ReqID] = r.Stamp, r.Node
	}
	took := time.Since(start)
	byVer := map[uint64][]uint64{} // version -> its writes' request ids
	for id, v := range ver {
		byVer[v] = append(byVer[v], id)
	}
	versions := len(byVer)
	st := c.Node(int(ch[0]) - 1).Stats()
	t.Logf("%d writes in %v (%.0f/s at a head admitting 50/s) as %d versions; head: %d groups, %d absorbed writes",
		writes, took, writes/took.Seconds(), versions, st.WriteGroups, st.GroupedWrites)
	if versions >= writes || st.GroupedWrites != uint64(writes-versions) || st.WriteGroups == 0 {
		t.Fatalf("%d writes made %d versions, head counted %d groups and %d absorbed writes", writes, versions, st.WriteGroups, st.GroupedWrites)
	}
	var absorbed uint64 // a write the head answered: absorbed in a group
	for v, ids := range byVer {
		slices.Sort(ids)
		last := ids[len(ids)-1] // sent last of its group
		for _, id := range ids {
			want := ch[0]
			if id == last {
				want = ch[2]
			}
			if from[id] != want {
				t.Errorf("write %d of v%d (group of %d) answered by node %d, want %d", id, v, len(ids), from[id], want)
			}
			if id != last && absorbed == 0 {
				absorbed = id
			}
		}
	}
	top := slices.Max(slices.Collect(maps.Keys(byVer)))
	g := p.call(addrOf(c, ch[2]), raw(wire.Header{Op: wire.OpGet, ReqID: 1, KeyHash: h}, key, nil))
	lastIDs := byVer[top]
	if g.Op != wire.OpGetReply || g.Stamp != top || !slices.ContainsFunc(lastIDs, func(id uint64) bool { return string(g.Value) == fmt.Sprintf("v%d", id-1000) }) {
		t.Fatalf("read v%d %q, want v%d with a value of its writes %v", g.Stamp, g.Value, top, lastIDs)
	}
	retry := func(to wire.NodeID) wire.Packet {
		return p.call(addrOf(c, to), raw(wire.Header{Op: wire.OpPut, ReqID: absorbed, KeyHash: h}, key, []byte("again")))
	}
	if r := retry(ch[0]); r.Op != wire.OpPutReply || r.Stamp != ver[absorbed] {
		t.Fatalf("retry of absorbed write %d at the head: %s %s v%d, want v%d", absorbed, r.Op, r.Code, r.Stamp, ver[absorbed])
	}
	time.Sleep(50 * time.Millisecond) // the last acks reach the middle
	killHead(t, c, ch)
	r := untilAvailable(func() wire.Packet { return retry(ch[1]) })
	if r.Op != wire.OpPutReply || r.Stamp != ver[absorbed] {
		t.Fatalf("retry of absorbed write %d at the new head: %s %s v%d, want v%d", absorbed, r.Op, r.Code, r.Stamp, ver[absorbed])
	}
	if g := p.call(addrOf(c, ch[2]), raw(wire.Header{Op: wire.OpGet, ReqID: 2, KeyHash: h}, key, nil)); g.Stamp != top || string(g.Value) == "again" {
		t.Fatalf("read after the retries: v%d %q, want v%d unchanged", g.Stamp, g.Value, top)
	}
}

// TestWriteGroupStaleStamp: in a group of stamped writes, a write whose
// stamp is at or below the version an earlier write of the group took is
// refused as stale (with that version), and only it: the others make the
// group's version. At a chain of one every write is answered at once.
func TestWriteGroupStaleStamp(t *testing.T) {
	for _, n := range []int{3, 1} {
		t.Run(fmt.Sprintf("chain of %d", n), func(t *testing.T) {
			c := rateLimited(t, n, 2) // a token each 500 ms
			p := newPeer(t).sealing(c)
			key := []byte("stamped-group")
			h := wire.HashKey(key)
			ch := c.Layout.ChainOf(h)
			head := addrOf(c, ch[0])
			put := func(id, stamp uint64) {
				p.send(head, raw(wire.Header{Op: wire.OpPut, Flags: wire.FlagStamped, ReqID: id, KeyHash: h, Stamp: stamp}, key, fmt.Appendf(nil, "s%d", stamp)))
			}
			// The first takes the bucket's token; the others wait for the
			// next one together.
			put(1, 2)
			put(2, 5)
			put(3, 3)
			put(4, 7)
			got := map[uint64]wire.Packet{}
			for len(got) < 4 {
				r, ok := p.recv(0)
				if !ok {
					t.Fatalf("answers %v, then none", got)
				}
				got[r.ReqID] = r
			}
			if r := got[3]; r.Op != wire.OpErr || r.Code != wire.CodeStaleVersion || r.Stamp != 5 {
				t.Fatalf("stamp 3 after stamp 5 in a group: %s %s v%d, want stale-version v5", r.Op, r.Code, r.Stamp)
			}
			for _, id := range []uint64{2, 4} {
				if r := got[id]; r.Op != wire.OpPutReply || r.Stamp != 7 {
					t.Fatalf("write %d of the group: %s %s v%d, want put-reply v7", id, r.Op, r.Code, r.Stamp)
				}
			}
			if st := c.Node(int(ch[0]) - 1).Stats(); st.GroupedWrites == 0 {
				t.Fatalf("no write grouped: %d groups", st.WriteGroups)
			}
			if g := p.call(addrOf(c, ch[len(ch)-1]), raw(wire.Header{Op: wire.OpGet, ReqID: 9, KeyHash: h}, key, nil)); g.Stamp != 7 || string(g.Value) != "s7" {
				t.Fatalf("read v%d %q, want v7 \"s7\"", g.Stamp, g.Value)
			}
		})
	}
}
