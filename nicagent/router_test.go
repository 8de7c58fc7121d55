package nicagent

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// TestNetnsRouter runs the agent in router mode (--router, the contract's
// ToR mode) on a host r that is the client's gateway and the nodes' way
// back to the client, so it sees every request and reply: the client sends
// to the service address via r, XDP on r routes each request and sends it
// back out (XDP_TX) to the chosen node, and the node's reply passes r on
// its way to the client. GET/PUT/DEL correctness on the miss path; a key
// promoted by the hot-key round with an extra copy; writes stamped by r's
// XDP (the head applies the stamp as the version, the reply completes it);
// and, unlike a host agent, linearizable reads split over the whole
// LocationList, the fresh extra included.
func TestNetnsRouter(t *testing.T) {
	e := startE2E(t, directory.PolicyNetdir, clusterOptions{nodes: 4, reach: true, router: true})
	if m := e.agent.XDPMode(); m != "native" {
		t.Errorf("XDP attached in %s mode on a veth; want native", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Miss path: every request routed by r's XDP, every reply through r.
	e.missPath(ctx, t)
	s := e.stats(t)
	if s.Misses < 42 || s.Hits != 0 || s.XDPTx < 42 || s.TCFwd != 0 || s.Replies < 42 {
		t.Fatalf("after 42 requests on the miss path: %+v; want each routed by XDP and its reply seen", s)
	}

	// A hot key: a node reports it, the round promotes it with one extra
	// (four nodes, chains of three), and r gets the slot.
	hot := []byte("hot-key")
	h := wire.HashKey(hot)
	locs := e.promoteWithExtra(ctx, t, hot).Locs
	extra := locs[3]
	waitFor(t, 5*time.Second, "the promoted key in the router's directory", func() bool {
		sl, ok, _ := e.agent.Dataplane().Lookup(h)
		return ok && sl.N == 4
	})

	// Writes are stamped by r: the version the client gets back is the
	// slot's ver_next, or below it if the client re-sent the write: r
	// stamps the copy again, the head answers it from its dedup table with
	// the first version and commits the copy's stamp as a no-op version of
	// the same value (spec/README.md, flaw F), which reads may then return.
	// The reply (or the tail's VSB) completes each version. The head then
	// copies the committed version to the extra, whose VSB sets its fresh
	// bit. Reads after each write see it.
	var ver uint64
	var last []byte
	write := func(i int) {
		t.Helper()
		last = fmt.Appendf(nil, "v%d", i)
		prev := ver
		var err error
		if ver, err = e.client.Put(ctx, hot, last); err != nil {
			t.Fatalf("put of the hot key: %v (%s)", err, e.diag())
		}
		if sl, _, _ := e.agent.Dataplane().Lookup(h); ver <= prev || ver > sl.VerNext {
			t.Fatalf("put of the hot key got version %d after %d; the router stamped up to %d", ver, prev, sl.VerNext)
		}
		if got, gver, err := e.client.Get(ctx, hot); err != nil || !bytes.Equal(got, last) || gver < ver {
			t.Fatalf("get of the hot key = %q@%d, %v; want %q@%d or a no-op version above it", got, gver, err, last, ver)
		}
	}
	for i := range 5 {
		write(i + 2)
	}
	// Nothing is left pending, a re-sent write's second stamp included: the
	// slot settles with ver_next == ver_done, at the last write's version or
	// a no-op version above it, and the extra fresh.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		sl, _, _ := e.agent.Dataplane().Lookup(h)
		if sl.VerDone >= ver && sl.VerNext == sl.VerDone && sl.Fresh&(1<<3) != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the extra %d not fresh for version %d (or above, nothing pending) in 5s: slot %+v; %s", extra, ver, sl, e.diag())
		}
	}
	if sl, _, _ := e.agent.Dataplane().Lookup(h); sl.VerDone != ver {
		t.Logf("version %d, then %d: a re-sent write's stamp, committed as a no-op version", ver, sl.VerDone)
		ver = sl.VerDone
	}

	// Linearizable reads split over all four locations, the extra too,
	// which serves them from its copy unverified: it is fresh, and a ToR
	// sees every write (its node counts verified reads apart; a resent
	// read counts again).
	const reads = 400
	s0 := e.stats(t)
	en := e.nodes[extra-1]
	n0 := en.Stats()
	by := map[wire.NodeID]int{}
	for range reads {
		r, err := e.client.GetResult(ctx, hot)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Value, last) || r.Version != ver {
			t.Fatalf("read %q@%d from node %d, want %q@%d", r.Value, r.Version, r.Node, last, ver)
		}
		by[r.Node]++
	}
	t.Logf("linearizable reads of the hot key by node: %v (locations %v, extra %d)", by, locs, extra)
	if n1 := en.Stats(); n1.ExtraGets-n0.ExtraGets < uint64(by[extra]) || n1.VerifiedGets != n0.VerifiedGets {
		t.Errorf("the fresh extra's %d reads: %d from its copy, %d verified; want none verified",
			by[extra], n1.ExtraGets-n0.ExtraGets, n1.VerifiedGets-n0.VerifiedGets)
	}
	for _, n := range locs {
		// Each location is taken at least when both candidates are it:
		// 1/16 of the reads, 25 ± 5 of 400.
		if by[n] < reads/40 {
			t.Errorf("location %d served %d of %d linearizable reads: %v", n, by[n], reads, by)
		}
	}
	s1 := e.stats(t)
	if got := s1.Hits - s0.Hits; got < reads || s1.XDPTx-s0.XDPTx < reads || s1.TCFwd != 0 {
		t.Errorf("the hot key's reads: %d hits, %d routed by XDP, %d by TC", got, s1.XDPTx-s0.XDPTx, s1.TCFwd)
	}

	// The VSB rule refuses, as it must, VSBs that come too early: the
	// tail's announcement of the promotion racing the slot's arrival
	// (vsb-not-cached), an extra's copy of a version while r's next stamped
	// write is pending (vsb-pending) or before the tail's announcement of
	// it (vsb-version); the next commit is announced and copied again.
	// Nothing else is dropped.
	s = e.stats(t)
	vsbLate := s.Drops[directory.ReasonVSBNotCached] + s.Drops[directory.ReasonVSBPending] + s.Drops[directory.ReasonVSBVersion]
	if s.DropTotal != vsbLate || s.NoAddr != 0 {
		t.Errorf("drops: %+v", s)
	}
	e.noChecksumErrors(t)
	t.Logf("router counters: %+v", e.stats(t))
}
