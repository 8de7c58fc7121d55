//go:build linux

package bmv2test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/netdir/netdir/directory/vectors"
)

// buildDir is p4/build, relative to this package.
func buildDir(t *testing.T) string {
	d, err := filepath.Abs(filepath.Join("..", "build"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestVectors runs the shared vector suite on BMv2. It needs root (network
// namespaces, veths), iproute2 and simple_switch_grpc built with PI and
// Thrift (see p4/README.md); without them it skips.
func TestVectors(t *testing.T) {
	bin, err := exec.LookPath("simple_switch_grpc")
	if err != nil {
		t.Skip("simple_switch_grpc not on PATH: build BMv2 with PI and Thrift (p4/README.md) to run the vector suite on BMv2")
	}
	if os.Geteuid() != 0 {
		t.Skip("the BMv2 vector runner needs root for its network namespace and veths")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2 (ip) not on PATH")
	}
	for _, f := range []string{"netdir.json", "netdir.p4info.txtpb"} {
		if _, err := os.Stat(filepath.Join(buildDir(t), f)); err != nil {
			t.Skipf("p4/build/%s missing: run `make p4` where p4c is installed", f)
		}
	}
	ports, err := VectorPorts(vectors.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(Options{
		Binary:   bin,
		BuildDir: buildDir(t),
		Ports:    ports,
		WorkDir:  t.TempDir(),
		Verbose:  os.Getenv("NETDIR_BMV2_LOG") != "",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	vectors.Run(t, p)
	if t.Failed() {
		t.Logf("switch log tail:\n%s", p.LogTail(40))
	}
}

// TestScoreRanges checks that the fine-score table realises Window/t exactly.
func TestScoreRanges(t *testing.T) {
	for _, w := range []uint64{1, 7, 1000, 1_000_000} {
		rs := ScoreRanges(w)
		next := uint64(1)
		for _, r := range rs {
			if r.Lo != next || r.Hi < r.Lo {
				t.Fatalf("window %d: range %+v after %d", w, r, next)
			}
			for _, x := range []uint64{r.Lo, r.Hi, (r.Lo + r.Hi) / 2} {
				if w/x != r.Quota {
					t.Fatalf("window %d: t=%d quota %d, want %d", w, x, r.Quota, w/x)
				}
			}
			next = r.Hi + 1
		}
		if next != w+1 {
			t.Fatalf("window %d: ranges end at %d", w, next-1)
		}
		if w == 1_000_000 && len(rs) > 4096 {
			t.Fatalf("window %d needs %d entries, more than the table's 4096", w, len(rs))
		}
	}
}

// TestP4InfoNames checks that every P4 object the runner names exists in the
// committed P4Info and BMv2 JSON, so a renamed table fails here, not only
// where BMv2 is installed.
func TestP4InfoNames(t *testing.T) {
	info, err := LoadP4Info(filepath.Join(buildDir(t), "netdir.p4info.txtpb"))
	if err != nil {
		t.Skipf("no committed P4Info: %v", err)
	}
	for _, n := range []string{tSlots, tPartitions, tPartBucketsA, tPartBucketsB, tSlotBucketsA, tSlotBucketsB,
		tStoragePorts, tMembers, tScoreA, tScoreB, tNodeAddr, tNodeAddrB, tRoutes, tClock} {
		if _, err := info.Table(n); err != nil {
			t.Error(err)
		}
	}
	for _, n := range []string{aSlotHit, aSetPartition, aSetChainA, aSetChainB, aSetLocA, aSetLocB,
		aStoragePort, aMember, aQuotaA, aQuotaB, aSetNodeAddr, aSetNodeAddrB, aRoute, aFixedClock} {
		if _, err := info.Action(n, nil); err != nil {
			t.Error(err)
		}
	}
	for _, n := range []string{cEvents, cSwitched, cDrops, cSlotHits, cSketchRow + "0", cSketchRow + "1", cSketchRow + "2", cSketchRow + "3"} {
		if _, err := info.Counter(n); err != nil {
			t.Error(err)
		}
	}
	js, err := os.ReadFile(filepath.Join(buildDir(t), "netdir.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registerNames(js); err != nil {
		t.Error(err)
	}
}
