package directory_test

import (
	"testing"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// spineWith is a spine over 4 racks, 2 partition bits, partition p homed in
// rack p, and key k spread over racks 0 (its home), 2 and 3 at version 5.
func spineWith(t *testing.T) (*directory.Spine, wire.KeyHash) {
	t.Helper()
	s, err := directory.NewSpine(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	for p := range 4 {
		if err := s.SetHome(uint32(p), p); err != nil {
			t.Fatal(err)
		}
	}
	var k wire.KeyHash // partition 0: home rack 0
	k[15] = 1
	if err := s.Insert(k, []int{0, 2, 3}, 5); err != nil {
		t.Fatal(err)
	}
	return s, k
}

func spinePkt(op wire.Op, k wire.KeyHash, reqid, stamp uint64, code wire.Code) []byte {
	b := make([]byte, wire.HeaderLen)
	_ = (&wire.Header{Op: op, KeyHash: k, ReqID: reqid, Stamp: stamp, Code: code}).EncodeHeader(b)
	return b
}

// reads sends n reads of k with request ids 0..n−1 and counts them by
// rack, and by rack those the spine flagged FlagVerify.
func reads(s *directory.Spine, k wire.KeyHash, n int) (by, verified map[int]int) {
	by, verified = map[int]int{}, map[int]int{}
	for i := range n {
		pkt := spinePkt(wire.OpGet, k, uint64(i)*0x9e3779b97f4a7c15, 0, 0)
		r := s.Request(pkt)
		by[r]++
		if wire.Frame(pkt).Flags()&wire.FlagVerify != 0 {
			verified[r]++
		}
	}
	return by, verified
}

// TestSpineVerifiesReadsAtRacksNotFresh: freshness decides how a remote
// rack serves a read, not whether (issue 18's rule, one level up). Until
// a rack announces the completed version every read the spine sends it is
// flagged FlagVerify; once it has, none is. The home rack is never
// flagged. (Before, the spine sent reads to fresh racks only.)
func TestSpineVerifiesReadsAtRacksNotFresh(t *testing.T) {
	s, k := spineWith(t)
	by, ver := reads(s, k, 300)
	if by[2] == 0 || by[3] == 0 || by[1] != 0 {
		t.Fatalf("before any VSB reads went to %v, want racks 0, 2 and 3", by)
	}
	if ver[0] != 0 || ver[2] != by[2] || ver[3] != by[3] {
		t.Fatalf("before any VSB reads flagged %v of %v, want every remote one and no home one", ver, by)
	}
	if s.VSB(spinePkt(wire.OpVSB, k, 0, 4, 0), 2) {
		t.Fatal("a VSB for an older version made rack 2 fresh")
	}
	if s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 1) {
		t.Fatal("a VSB from a rack not holding the key was accepted")
	}
	if !s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 2) {
		t.Fatal("rack 2's VSB for the completed version was refused")
	}
	flagged := ver[2] + ver[3]
	by, ver = reads(s, k, 300)
	if by[2] == 0 || ver[2] != 0 || ver[0] != 0 || ver[3] != by[3] || by[3] == 0 {
		t.Fatalf("with rack 2 fresh reads went to %v, flagged %v; want rack 3's only flagged", by, ver)
	}
	if c := s.Counters(); c.Verified != uint64(flagged+ver[3]) {
		t.Fatalf("counted %d reads flagged, sent %d", c.Verified, flagged+ver[3])
	}
}

// TestSpineClearsAClientsFlag: only the spine sets FlagVerify on what it
// sends a rack directory, which trusts it from the spine's port.
func TestSpineClearsAClientsFlag(t *testing.T) {
	s, k := spineWith(t)
	s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 2)
	s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 3)
	var other wire.KeyHash // partition 1, not spread
	other[15] = 1 << 4
	for _, pkt := range [][]byte{spinePkt(wire.OpGet, k, 1, 0, 0), spinePkt(wire.OpGet, other, 1, 0, 0), spinePkt(wire.OpPut, k, 1, 0, 0)} {
		f := wire.Frame(pkt)
		f.SetFlags(wire.FlagVerify)
		s.Request(pkt)
		if f.Flags()&wire.FlagVerify != 0 {
			t.Fatalf("%v of a fresh or unspread key left the client's FlagVerify", f.Op())
		}
	}
}

func TestSpineWriteClearsRemoteRacksUntilItsReplyAndANewVSB(t *testing.T) {
	s, k := spineWith(t)
	s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 2)
	s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 3)
	if by, ver := reads(s, k, 300); ver[2]+ver[3] != 0 || by[2] == 0 || by[3] == 0 {
		t.Fatalf("with racks 2 and 3 fresh reads went to %v, flagged %v; want none flagged", by, ver)
	}
	if r := s.Request(spinePkt(wire.OpPut, k, 7, 0, 0)); r != 0 {
		t.Fatalf("a write went to rack %d, want its home", r)
	}
	if by, ver := reads(s, k, 300); ver[0] != 0 || ver[2] != by[2] || ver[3] != by[3] || by[2] == 0 {
		t.Fatalf("with a write pending reads went to %v, flagged %v; want every remote one flagged", by, ver)
	}
	if s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 2) {
		t.Fatal("a remote VSB was accepted while a write was pending")
	}
	s.Reply(spinePkt(wire.OpPutReply, k, 7, 6, wire.CodeOK), 0)
	if e, _ := s.Lookup(k); e.Pending != 0 || e.VerDone != 6 {
		t.Fatalf("after the reply: pending %d, ver_done %d; want 0 and 6", e.Pending, e.VerDone)
	}
	if s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 3) {
		t.Fatal("a remote VSB for the old version was accepted")
	}
	if !s.VSB(spinePkt(wire.OpVSB, k, 0, 6, 0), 3) {
		t.Fatal("rack 3's VSB for the new version was refused")
	}
	if by, ver := reads(s, k, 300); ver[3] != 0 || ver[2] != by[2] || by[3] == 0 {
		t.Fatalf("reads went to %v, flagged %v; want rack 2's only flagged", by, ver)
	}
}

func TestSpineWriteErrorsEndPendingAndTheTailAnnouncesCommits(t *testing.T) {
	s, k := spineWith(t)
	s.Request(spinePkt(wire.OpPut, k, 1, 0, 0))
	s.Reply(spinePkt(wire.OpErr, k, 1, 0, wire.CodeNotFound), 0) // not a write's error
	if e, _ := s.Lookup(k); e.Pending != 1 {
		t.Fatalf("pending %d after an error no write gets, want 1", e.Pending)
	}
	s.Reply(spinePkt(wire.OpErr, k, 1, 0, wire.CodeStaleVersion), 0)
	if e, _ := s.Lookup(k); e.Pending != 0 {
		t.Fatalf("pending %d after ERR stale-version, want 0", e.Pending)
	}
	if !s.VSB(spinePkt(wire.OpVSB, k, 0, 9, 0), 0) {
		t.Fatal("the home tail's commit announcement was refused")
	}
	if e, _ := s.Lookup(k); e.VerDone != 9 {
		t.Fatalf("ver_done %d after the tail announced 9", e.VerDone)
	}
}

func TestSpineTwoChoicesPreferTheRackWithLessInFlight(t *testing.T) {
	s, k := spineWith(t)
	s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 2)
	s.VSB(spinePkt(wire.OpVSB, k, 0, 5, 0), 3)
	// Without replies, in-flight counts grow with every choice: two
	// choices keep the three racks within a few requests of each other.
	reads(s, k, 300)
	lo, hi := s.InFlight(0), s.InFlight(0)
	for r := range 4 {
		if r == 1 {
			continue
		}
		lo, hi = min(lo, s.InFlight(r)), max(hi, s.InFlight(r))
	}
	if hi-lo > 10 {
		t.Errorf("in flight per rack from %d to %d after 300 reads, want within 10", lo, hi)
	}
	if s.InFlight(1) != 0 {
		t.Errorf("rack 1 holds no copy but has %d in flight", s.InFlight(1))
	}
}

// TestSpineCountsReadsInFlightNotWrites: a write-hot key's writes queue at
// its chain head in the home rack; counted as the rack's load they would
// turn every read of the key away from home (issue 20, YCSB B at 1024
// nodes). Only reads count, and only a read's reply ends one.
func TestSpineCountsReadsInFlightNotWrites(t *testing.T) {
	s, k := spineWith(t)
	for i := range 100 {
		s.Request(spinePkt(wire.OpPut, k, uint64(i), 0, 0))
	}
	if n := s.InFlight(0); n != 0 {
		t.Fatalf("100 writes pending home count as %d reads in flight", n)
	}
	by, _ := reads(s, k, 300)
	if by[0] < 60 {
		t.Fatalf("with writes backed up at home reads went to %v, want a third or so home", by)
	}
	s.Reply(spinePkt(wire.OpPutReply, k, 1, 6, wire.CodeOK), 0)
	s.Reply(spinePkt(wire.OpErr, k, 2, 0, wire.CodeStaleVersion), 0)
	if n := s.InFlight(0); n != int64(by[0]) {
		t.Fatalf("write replies took reads off rack 0: %d in flight, sent %d", n, by[0])
	}
	s.Reply(spinePkt(wire.OpGetReply, k, 3, 6, wire.CodeOK), 0)
	s.Reply(spinePkt(wire.OpErr, k, 4, 0, wire.CodeNotFound), 0)
	if n := s.InFlight(0); n != int64(by[0])-2 {
		t.Fatalf("two read replies left %d in flight of %d", n, by[0])
	}
}

func TestSpineRefusesBadInput(t *testing.T) {
	s, k := spineWith(t)
	if err := s.Insert(k, []int{0}, 0); err != directory.ErrExists {
		t.Errorf("second insert: %v", err)
	}
	var other wire.KeyHash
	other[0] = 0x40 // partition 1: home rack 1
	for _, racks := range [][]int{nil, {0, 1}, {1, 1}, {1, 9}} {
		if err := s.Insert(other, racks, 0); err == nil {
			t.Errorf("insert over racks %v accepted", racks)
		}
	}
	if r := s.Request([]byte{1, 2, 3}); r != 0 {
		t.Errorf("a short packet went to rack %d", r)
	}
	s.Reply([]byte{1}, 7) // neither panics nor counts
	if s.VSB([]byte{1}, 0) {
		t.Error("a short VSB was accepted")
	}
	if _, err := directory.NewSpine(0, 10); err == nil {
		t.Error("a spine of no racks")
	}
	if err := s.Evict(other); err != directory.ErrNotFound {
		t.Errorf("evicting an absent key: %v", err)
	}
}
