package directory_test

import (
	"testing"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// TestReadAtVerify holds the read rule of issue 18: a hit goes to the member
// the buckets pick, fresh or not, and a read at an extra is flagged verify
// unless the extra is fresh and the plane sees every write (ToR), or the read
// is stale-ok on a host agent (the old rule: fresh members only). From a
// spine port (PortSpine), the spine's FlagVerify stands whichever member
// serves, fresh or of the chain (the spine's rule, issue 20); from any other
// port it is cleared.
func TestReadAtVerify(t *testing.T) {
	const extra = 3 // LocationList index of node 4 in populated
	cases := []struct {
		name    string
		mode    directory.Mode
		policy  directory.Policy
		bucket  uint8 // every slot bucket on this index
		fresh   bool  // the extra's VSB for ver_done accepted
		pending bool  // then a write stamped and not completed
		flags   uint8 // the client's, or the spine's
		spine   bool  // the read arrives on a spine port
		node    wire.NodeID
		verify  bool
	}{
		{name: "tor/pending-extra", bucket: extra, fresh: true, pending: true, node: 4, verify: true},
		{name: "tor/never-fresh-extra", bucket: extra, node: 4, verify: true},
		{name: "tor/fresh-extra", bucket: extra, fresh: true, node: 4},
		{name: "tor/chain-member-pending", bucket: 1, pending: true, node: 2},
		{name: "tor/stale-ok-pending-extra", bucket: extra, pending: true, flags: wire.FlagStaleOK, node: 4, verify: true},
		{name: "tor/client-verify-cleared", bucket: extra, fresh: true, flags: wire.FlagVerify, node: 4},
		{name: "tor/spine-verify-fresh-extra", bucket: extra, fresh: true, spine: true, flags: wire.FlagVerify, node: 4, verify: true},
		{name: "tor/spine-verify-chain-head", bucket: 0, spine: true, flags: wire.FlagVerify, node: 1, verify: true},
		{name: "tor/spine-unflagged-fresh-extra", bucket: extra, fresh: true, spine: true, node: 4},
		{name: "tor/spine-stale-ok-fresh-extra", bucket: extra, fresh: true, spine: true, flags: wire.FlagVerify | wire.FlagStaleOK, node: 4, verify: true},
		{name: "host/spine-verify-stale-ok-fresh-extra", mode: directory.ModeHost, bucket: extra, fresh: true, spine: true, flags: wire.FlagVerify | wire.FlagStaleOK, node: 4, verify: true},
		{name: "coarse/pending-extra", policy: directory.PolicyCoarse, bucket: extra, pending: true, node: 4, verify: true},
		{name: "host/fresh-extra", mode: directory.ModeHost, bucket: extra, fresh: true, node: 4, verify: true},
		{name: "host/stale-extra", mode: directory.ModeHost, bucket: extra, node: 4, verify: true},
		{name: "host/stale-ok-fresh-extra", mode: directory.ModeHost, bucket: extra, fresh: true, flags: wire.FlagStaleOK, node: 4},
		// stale-ok keeps the old rule: the chain by partition bucket 0.
		{name: "host/stale-ok-stale-extra", mode: directory.ModeHost, bucket: extra, flags: wire.FlagStaleOK, node: 1},
		{name: "host/chain-member", mode: directory.ModeHost, bucket: 2, node: 3},
		// pegasus: node 4 has load 0 (unlearnt), node 2 load 1; node 4 is
		// taken even while a write is pending.
		{name: "pegasus/pending-extra", policy: directory.PolicyPegasus, bucket: extra, pending: true, node: 4, verify: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := populated(t, directory.Config{Mode: tc.mode, Policy: tc.policy})
			if err := d.SetSlotBuckets(key("hot"), fill(tc.bucket)); err != nil {
				t.Fatal(err)
			}
			if tc.fresh {
				if v := d.Process(pkt(t, wire.OpVSB, "hot", 0, 7, 4), 4, 1); v.Action != directory.Multicast {
					t.Fatalf("extra's VSB: %v", v)
				}
			}
			if tc.pending {
				if v := d.Process(pkt(t, wire.OpPut, "hot", 9, 0, 0), 9, 2); v.Action != directory.Forward {
					t.Fatalf("put: %v", v)
				}
			}
			if tc.spine {
				d.SetPort(9, directory.PortSpine)
			}
			p := pkt(t, wire.OpGet, "hot", 0, 0, 0)
			f := wire.Frame(p)
			f.SetFlags(tc.flags)
			v := d.Process(p, 9, 3)
			if v.Action != directory.Forward || v.Node != tc.node {
				t.Fatalf("get: %v, want forward node=%d", v, tc.node)
			}
			if got := f.Flags()&wire.FlagVerify != 0; got != tc.verify {
				t.Errorf("verify flag %v, want %v (flags %#x)", got, tc.verify, f.Flags())
			}
			if f.Flags()&wire.FlagHit == 0 {
				t.Errorf("flags %#x: a directory hit without FlagHit", f.Flags())
			}
		})
	}
}

// TestSpineVerifyOnAMissGoesToTheChain: a read the spine flagged for a key
// this rack's directory does not hold goes to the partition's chain, which
// always may serve (CRAQ), unflagged.
func TestSpineVerifyOnAMissGoesToTheChain(t *testing.T) {
	d := populated(t, directory.Config{})
	d.SetPort(9, directory.PortSpine)
	p := pkt(t, wire.OpGet, "cold", 0, 0, 0)
	f := wire.Frame(p)
	f.SetFlags(wire.FlagVerify)
	v := d.Process(p, 9, 3)
	if v.Action != directory.Forward || f.Flags()&(wire.FlagVerify|wire.FlagHit) != 0 {
		t.Fatalf("get: %v, flags %#x; want forward to the chain unflagged", v, f.Flags())
	}
}
