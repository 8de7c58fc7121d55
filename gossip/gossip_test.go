package gossip

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netdir/netdir/wire"
)

func TestTableKeepsNewest(t *testing.T) {
	var tab table
	if !tab.put(entry{Key: "s/1", Version: 5, Data: []byte(`5`)}) {
		t.Fatal("first version refused")
	}
	if tab.put(entry{Key: "s/1", Version: 4, Data: []byte(`4`)}) || tab.put(entry{Key: "s/1", Version: 5, Data: []byte(`x`)}) {
		t.Fatal("an older or equal version replaced a newer one")
	}
	if tab.put(entry{Key: "s/2", Version: 0}) {
		t.Fatal("version 0 taken")
	}
	var other table
	other.put(entry{Key: "s/1", Version: 7, Data: []byte(`7`)})
	other.put(entry{Key: "e/1", Version: 1, Data: []byte(`1`)})
	newer, err := tab.merge(other.encode())
	if err != nil || len(newer) != 2 {
		t.Fatalf("merge: %v newer %v", err, newer)
	}
	// Merging again changes nothing (idempotent), and merging back gives
	// the other table the same state.
	if again, _ := tab.merge(other.encode()); len(again) != 0 {
		t.Fatalf("merge not idempotent: %v", again)
	}
	if back, _ := other.merge(tab.encode()); len(back) != 0 {
		t.Fatalf("tables differ after merging: %v", back)
	}
	if e, _ := tab.get("s/1"); string(e.Data) != "7" {
		t.Fatalf("s/1 = %s", e.Data)
	}
}

func TestVersionsMonotone(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	c := versionClock{now: func() time.Time { return at }}
	a := c.next()
	b := c.next() // the clock did not move
	at = at.Add(-time.Hour)
	d := c.next() // the clock stepped back
	at = at.Add(2 * time.Hour)
	e := c.next()
	if !(a < b && b < d && d < e) || e != uint64(at.UnixNano()) {
		t.Fatalf("versions %d %d %d %d", a, b, d, e)
	}
}

func TestEpoch(t *testing.T) {
	prev := NodeStats{Node: 2, Version: 10, Trees: []TreeStats{
		{Position: 0, Reads: 100, Writes: 10, ReadNanos: 100_000},
		{Position: 1, Reads: 50, ReadNanos: 50_000},
	}}
	cur := NodeStats{Node: 2, Version: 20, Capacity: 200, Trees: []TreeStats{
		{Position: 0, Reads: 300, Writes: 30, ReadNanos: 500_000},
		{Position: 1, Reads: 150, ReadNanos: 150_000},
	}}
	s := Epoch(prev, cur)
	if s.Node != 2 || s.Capacity != 200 || fmt.Sprint(s.Requests) != "[220 100]" {
		t.Fatalf("epoch %+v", s)
	}
	// 300 reads in 500 µs: 1.67 µs each.
	if s.ReadLatency != 500_000/300 {
		t.Fatalf("read latency %v", s.ReadLatency)
	}
	// No earlier version: since the start; a restart (counters went back):
	// since the restart.
	if s := Epoch(NodeStats{}, cur); fmt.Sprint(s.Requests) != "[330 150]" {
		t.Fatalf("from start: %v", s.Requests)
	}
	restarted := NodeStats{Node: 2, Version: 30, Trees: []TreeStats{{Position: 0, Reads: 5, ReadNanos: 50}}}
	if s := Epoch(cur, restarted); fmt.Sprint(s.Requests) != "[5]" || s.ReadLatency != 10 {
		t.Fatalf("after restart: %+v", s)
	}
}

// waitFor polls cond every 10 ms for at most d.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGossipLoopback runs a controller member and three node members on
// loopback: every member learns every node's newest stats, the controller's
// expected loads reach the nodes, and an older version never replaces a
// newer one.
func TestGossipLoopback(t *testing.T) {
	var mu sync.Mutex
	seen := map[wire.NodeID]uint64{}
	ctl, err := Start(Config{Name: "controller", Bind: "127.0.0.1:0", OnStats: func(s NodeStats) {
		mu.Lock()
		defer mu.Unlock()
		if s.Version <= seen[s.Node] {
			t.Errorf("node %d: version %d delivered after %d", s.Node, s.Version, seen[s.Node])
		}
		seen[s.Node] = s.Version
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	var nodes []*Gossip
	for i := 1; i <= 3; i++ {
		g, err := Start(Config{Name: fmt.Sprintf("node-%d", i), Bind: "127.0.0.1:0", Seeds: []string{ctl.Addr()}})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		nodes = append(nodes, g)
	}
	if !waitFor(10*time.Second, func() bool { return ctl.Members() == 4 }) {
		t.Fatalf("%d members, want 4", ctl.Members())
	}
	for round := 1; round <= 3; round++ {
		for i, g := range nodes {
			s := NodeStats{Node: wire.NodeID(i + 1), Version: NextVersion(), Trees: []TreeStats{
				{Position: 0, Reads: uint64(round * 100 * (i + 1)), CompactionDebt: uint64(round)},
			}}
			if err := g.PublishStats(s); err != nil {
				t.Fatal(err)
			}
			if err := g.PublishStats(NodeStats{Node: s.Node, Version: s.Version - 1}); err == nil {
				t.Fatal("an older version was published")
			}
		}
	}
	want := func(g *Gossip) bool {
		st := g.Stats()
		for i := 1; i <= 3; i++ {
			s, ok := st[wire.NodeID(i)]
			if !ok || len(s.Trees) != 1 || s.Trees[0].Reads != uint64(300*i) || s.Trees[0].CompactionDebt != 3 {
				return false
			}
		}
		return true
	}
	for _, g := range append([]*Gossip{ctl}, nodes...) {
		if !waitFor(20*time.Second, func() bool { return want(g) }) {
			t.Fatalf("%s has %+v, want every node's third round", g.cfg.Name, g.Stats())
		}
	}
	if err := ctl.PublishExpected(Expected{Node: 2, Version: NextVersion(), Trees: []float64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(15*time.Second, func() bool {
		e, ok := nodes[1].Expected(2)
		return ok && len(e.Trees) == 3 && e.Trees[2] == 3
	}) {
		t.Fatal("node 2 never got its expected load")
	}
}

// TestGossipLateSeed: a node that starts before its seed joins once the
// seed is up.
func TestGossipLateSeed(t *testing.T) {
	probe, err := Start(Config{Name: "probe", Bind: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr()
	probe.Close()
	n, err := Start(Config{Name: "node-1", Bind: "127.0.0.1:0", Seeds: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.PublishStats(NodeStats{Node: 1, Version: NextVersion()}); err != nil {
		t.Fatal(err)
	}
	ctl, err := Start(Config{Name: "controller", Bind: addr})
	if err != nil {
		t.Skipf("seed address %s taken meanwhile: %v", addr, err)
	}
	defer ctl.Close()
	if !waitFor(20*time.Second, func() bool { _, ok := ctl.Stats()[1]; return ok }) {
		t.Fatal("the late seed never learnt the node's stats")
	}
}

// TestGossipLargeEntry: stats too large for a gossip packet (eight trees
// of large counters) still reach the other members.
func TestGossipLargeEntry(t *testing.T) {
	ctl, err := Start(Config{Name: "controller", Bind: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	n, err := Start(Config{Name: "node-9", Bind: "127.0.0.1:0", Seeds: []string{ctl.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if !waitFor(10*time.Second, func() bool { return n.Members() == 2 }) {
		t.Fatal("not joined")
	}
	s := NodeStats{Node: 9, Version: NextVersion(), At: time.Now()}
	for j := range 8 {
		s.Trees = append(s.Trees, TreeStats{Position: j, Reads: 1 << 60, Writes: 1 << 60, ReadNanos: 1 << 62,
			MeanReadLatency: time.Second, WindowReads: 1 << 40, CompactionDebt: 1 << 50, L0Files: 1000, CompactionRate: 1 << 30})
	}
	if b, _ := json.Marshal(s); len(b) <= maxBroadcast {
		t.Fatalf("%d bytes: not larger than a packet's entry", len(b))
	}
	if err := n.PublishStats(s); err != nil {
		t.Fatal(err)
	}
	if !waitFor(20*time.Second, func() bool { return len(ctl.Stats()[9].Trees) == 8 }) {
		t.Fatal("the large entry never arrived")
	}
}

// TestGossipKeys: with keys, a member holding none of them is never heard
// (it cannot join, and its layouts do not arrive), and members keep
// talking through a rotation (add the next key, send with it, drop the
// old one).
func TestGossipKeys(t *testing.T) {
	k1, k2 := bytesOf(1), bytesOf(2)
	layouts := make(chan []byte, 16)
	ctl, err := Start(Config{Name: "controller", Bind: "127.0.0.1:0", Keys: [][]byte{k1},
		OnLayout: func(y []byte) { layouts <- y }})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	intruder, err := Start(Config{Name: "intruder", Bind: "127.0.0.1:0", Seeds: []string{ctl.Addr()}, Keys: [][]byte{bytesOf(9)}})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	if err := intruder.PublishLayout(1<<30, []byte("epoch: 1073741824\n")); err != nil {
		t.Fatal(err)
	}
	n, err := Start(Config{Name: "node-1", Bind: "127.0.0.1:0", Seeds: []string{ctl.Addr()}, Keys: [][]byte{k1}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if !waitFor(10*time.Second, func() bool { return n.Members() == 2 && ctl.Members() == 2 }) {
		t.Fatalf("members: node sees %d, controller %d; want 2 each (the intruder never)", n.Members(), ctl.Members())
	}
	for step, keys := range [][][]byte{{k1, k2}, {k2, k1}, {k2}} {
		for _, g := range []*Gossip{ctl, n} {
			if err := g.SetKeys(keys); err != nil {
				t.Fatal(err)
			}
		}
		epoch := uint32(step + 1)
		if err := n.PublishLayout(epoch, []byte(fmt.Sprintf("epoch: %d\n", epoch))); err != nil {
			t.Fatal(err)
		}
		select {
		case y := <-layouts:
			if want := fmt.Sprintf("epoch: %d\n", epoch); string(y) != want {
				t.Fatalf("step %d: layout %q, want %q (the intruder's?)", step, y, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("step %d: the node's layout never arrived", step)
		}
	}
	if ctl.Members() != 2 {
		t.Fatalf("controller sees %d members after the rotation, want 2", ctl.Members())
	}
}

func bytesOf(b byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = b
	}
	return k
}

// TestNoCallbackAfterClose: an entry that memberlist's packet handler
// delivers once Close has returned (its Shutdown does not wait for the
// handler) reaches no callback: a node being closed was handed a layout so
// (a data race in ci43).
func TestNoCallbackAfterClose(t *testing.T) {
	var layouts atomic.Int32
	g, err := Start(Config{Name: "node-1", Bind: "127.0.0.1:0", OnLayout: func([]byte) { layouts.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	y, _ := json.Marshal("epoch: 2")
	g.deliver(entry{Key: layoutKey, Version: 2, Data: y})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	g.deliver(entry{Key: layoutKey, Version: 3, Data: y})
	if n := layouts.Load(); n != 1 {
		t.Fatalf("OnLayout called %d times; want once, before Close", n)
	}
}
