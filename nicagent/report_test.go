package nicagent

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/sched"
	"github.com/netdir/netdir/wire"
)

// serveController serves ctl's API on loopback until the test ends and
// returns a client of it.
func serveController(tb testing.TB, ctl *controller.Controller, opts ...grpc.DialOption) *controller.Controllers {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer()
	api.RegisterControllerServer(gs, controller.NewAPI(ctl))
	go gs.Serve(lis)
	tb.Cleanup(gs.Stop)
	cs, err := controller.DialControllers([]string{lis.Addr().String()}, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	return cs
}

// TestReportsDrivePromotion runs the agent's report path end to end on BPF
// maps: GETs through the TC program (BPF_PROG_TEST_RUN) count misses in the
// sketch, the agent reports them over real gRPC (loopback) to a controller
// with no switch, and the controller's hot-key round promotes the key a node
// named with too small a count; the agent's subscription installs it, and
// its hits, reported, are the key's count in the next round. A report whose
// answer is lost is sent again and counted once.
func TestReportsDrivePromotion(t *testing.T) {
	d := loadTest(t)
	ctl, err := controller.New(controller.Config{Layout: testLayout(t, 3), Round: time.Hour,
		PromoteMin: 16, Log: quietLog()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// loseAnswer makes the next report's answer fail after the controller
	// took it, as a lost response would.
	var loseAnswer atomic.Bool
	cl := serveController(t, ctl, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoke(ctx, method, req, reply, cc, opts...)
		if err == nil && strings.HasSuffix(method, "/ReportAgentStats") && loseAnswer.CompareAndSwap(true, false) {
			return status.Error(codes.DeadlineExceeded, "the answer was lost") // Unavailable would be retried at once (controller.Controllers.Call)
		}
		return err
	}))

	// The agent on the test's Dataplane: its subscription and reporter (no
	// interface, so node addresses are installed by the test).
	a := testAgent(d, false, "test/agent")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subscribeTest(t, ctx, a, cl)
	for n := wire.NodeID(1); n <= 3; n++ {
		if err := d.SetNodeAddr(n, testNodeAddr(n)); err != nil {
			t.Fatal(err)
		}
	}

	const key = "hot-key"
	h := wire.HashKey([]byte(key))
	gets := func(n int) {
		t.Helper()
		for i := range n {
			ret, out, err := run(d.TC(), benchPacket(wire.OpGet, key, uint64(i+1), 0))
			if err != nil || ret != tcOK {
				t.Fatalf("GET through TC: %d, %v", ret, err)
			}
			p, err := parseFrame(out)
			if err != nil || p.ip.DstIP.To4()[1] != 100 {
				t.Fatalf("GET not routed to a node: %v %+v", err, p)
			}
		}
	}
	named := func() {
		// The head names the key with the count its own top-k kept: too
		// few to promote it (PromoteMin 16).
		ctl.Report(controller.NodeReport{Node: 1, HotKeys: []sched.KeyCount{{Key: []byte(key), Count: 1}}})
	}
	report := func() {
		t.Helper()
		if err := a.reporter.report(ctx, d, cl); err != nil {
			t.Fatalf("report: %v", err)
		}
	}

	// 40 misses, not yet reported: the node's count alone does not promote.
	gets(40)
	if est, _ := d.SketchEstimate(h); est != 40 {
		t.Fatalf("the sketch estimates %d misses of the key, want 40", est)
	}
	named()
	if err := ctl.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(ctl.Entries()); n != 0 {
		t.Fatalf("promoted before the agent reported: %d entries", n)
	}

	// Reported, with the answer lost once: sent again, counted once.
	loseAnswer.Store(true)
	if err := a.reporter.report(ctx, d, cl); err == nil {
		t.Fatal("the report with its answer lost did not fail")
	}
	if rs := a.ReportStats(); !rs.Pending || rs.Failed != 1 {
		t.Fatalf("after a lost answer: %+v", rs)
	}
	report()
	if rs := a.ReportStats(); rs.Pending || rs.Sent != 1 || rs.Duplicates != 1 {
		t.Fatalf("after the report was sent again: %+v", rs)
	}
	if tot := ctl.AgentTotals(); tot.Reports != 1 || tot.Duplicates != 1 || tot.Misses != 40 || tot.Hits != 0 {
		t.Fatalf("the controller took %+v; want one report of 40 misses", tot)
	}

	// The round promotes the key on the agent's sketch; the agent gets it.
	named()
	if err := ctl.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	ents := ctl.Entries()
	if len(ents) != 1 || ents[0].Hash != h {
		t.Fatalf("after the agent's report the directory is %+v; want the key", ents)
	}
	waitFor(t, 5*time.Second, "the promoted key in the agent's maps", func() bool {
		_, ok, _ := d.Lookup(h)
		return ok
	})

	// Its reads are hits now; reported, they are its count for the round.
	s0, _ := d.Stats()
	gets(30)
	if s1, _ := d.Stats(); s1.Hits-s0.Hits != 30 || s1.Misses != s0.Misses {
		t.Fatalf("30 GETs of the promoted key: %d hits, %d misses", s1.Hits-s0.Hits, s1.Misses-s0.Misses)
	}
	report()
	if tot := ctl.AgentTotals(); tot.Reports != 2 || tot.Hits != 30 || tot.Misses != 40 {
		t.Fatalf("the controller took %+v; want 30 hits more", tot)
	}
	if err := ctl.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	if ents := ctl.Entries(); len(ents) != 1 || ents[0].Hits != 30 {
		t.Fatalf("the round after 30 reported hits: %+v", ents)
	}

	// Nothing counted since: nothing sent.
	report()
	if rs := a.ReportStats(); rs.Sent != 2 {
		t.Errorf("a report with nothing to say was sent: %+v", rs)
	}
}

// TestNetnsReportsPromote is the report path in the netns testbed: the
// agent (Run, reporting every 50 ms) in front of three storage nodes, the
// controller's API on loopback and no switch. Reads of a key through the
// agent reach the controller as sketch growth and drive its promotion; the
// promoted key's reads then split over its replicas, and the hits the agent
// reports keep it in the directory round after round.
func TestNetnsReportsPromote(t *testing.T) {
	e := startE2E(t, directory.PolicyNetdir, clusterOptions{reportEvery: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hot := []byte("hot-key")
	h := wire.HashKey(hot)
	if _, err := e.client.Put(ctx, hot, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	read := func(n int) map[wire.NodeID]int { return e.readsByNode(ctx, t, hot, "v1", n) }
	// delivered waits until the controller has taken every miss and hit
	// the agent's maps counted.
	delivered := func() {
		t.Helper()
		sk, err := e.agent.Dataplane().Sketch()
		if err != nil {
			t.Fatal(err)
		}
		var misses uint64
		for _, n := range sk[0] {
			misses += n
		}
		s, _, _ := e.agent.Dataplane().Lookup(h)
		waitFor(t, 5*time.Second, "the agent's counts at the controller", func() bool {
			tot := e.ctl.AgentTotals()
			return tot.Misses == misses && tot.Hits >= s.Hits
		})
	}

	read(60)
	delivered()
	if est, _ := e.agent.Dataplane().SketchEstimate(h); est < 60 {
		t.Fatalf("the agent's sketch estimates %d misses of the key, want ≥ 60", est)
	}
	// The head names the key with a count below PromoteMin (16): its
	// top-k lost most of it. The agent's sketch saw every miss.
	e.ctl.Report(controller.NodeReport{Node: e.lay.ChainOf(h)[0], HotKeys: []sched.KeyCount{{Key: hot, Count: 1}}})
	if err := e.ctl.HotKeyRound(ctx); err != nil {
		t.Fatal(err)
	}
	if ents := e.ctl.Entries(); len(ents) != 1 || ents[0].Hash != h {
		t.Fatalf("the controller's directory after the agent's report: %+v; want the key", ents)
	}
	waitFor(t, 5*time.Second, "the promoted key in the agent's maps", func() bool {
		_, ok, _ := e.agent.Dataplane().Lookup(h)
		return ok
	})

	// Cached: reads hit the slot and split over the replicas; the hits,
	// reported, keep the key through more rounds than the cold limit (3).
	total := map[wire.NodeID]int{}
	for round := range 4 {
		before := e.ctl.AgentTotals().Hits
		for n, c := range read(50) {
			total[n] += c
		}
		delivered()
		if err := e.ctl.HotKeyRound(ctx); err != nil {
			t.Fatal(err)
		}
		ents := e.ctl.Entries()
		if len(ents) != 1 {
			t.Fatalf("round %d: the key left the directory while read", round)
		}
		if got := e.ctl.AgentTotals().Hits - before; ents[0].Hits != got || got < 50 {
			t.Fatalf("round %d: the key's count %d, the agent reported %d hits; want the same, ≥ 50", round, ents[0].Hits, got)
		}
	}
	t.Logf("reads of the promoted key by node: %v; reports %+v; controller %+v", total, e.agent.ReportStats(), e.ctl.AgentTotals())
	for _, n := range e.lay.ChainOf(h) {
		if total[n] == 0 {
			t.Errorf("replica %d served none of the promoted key's 200 reads: %v", n, total)
		}
	}
	if rs := e.agent.ReportStats(); rs.Failed != 0 || rs.Sent == 0 {
		t.Errorf("agent reports: %+v", rs)
	}
}

// follower is a controller that is not the leader: it refuses the
// subscription, naming the leader's API.
type follower struct {
	api.UnimplementedControllerServer
	leader string
}

func (f *follower) WatchDirectory(*api.WatchDirectoryRequest, api.Controller_WatchDirectoryServer) error {
	return controller.NotLeaderStatus(&controller.NotLeaderError{Leader: controller.RaftPeer{ID: "c2", API: f.leader}})
}

// TestSubscribeFollowsLeader: given several controllers, the agent
// subscribes at the one that leads, following a follower's refusal to it
// (controller.Controllers, as netdir ctl does).
func TestSubscribeFollowsLeader(t *testing.T) {
	d := loadTest(t)
	ctl, err := controller.New(controller.Config{Layout: testLayout(t, 3), Round: time.Hour, Log: quietLog()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	leader := serveController(t, ctl).Current()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	api.RegisterControllerServer(gs, &follower{leader: leader})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cs, err := controller.DialControllers([]string{lis.Addr().String(), leader}, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	a := &Agent{dp: d, nodes: map[wire.NodeID]netip.AddrPort{}, resolved: map[wire.NodeID]NodeAddr{},
		resolveKick: make(chan struct{}, 1), ifmac: agentMAC, cfg: Config{Service: service},
		log: quietLog(), reporter: newReporter("test/agent")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.subscribe(ctx, cs)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, 5*time.Second, "a snapshot from the leader", func() bool { return a.SyncStats().Synced })
	if cs.Current() != leader {
		t.Fatalf("subscribed at %s, want the leader %s", cs.Current(), leader)
	}
	if s := a.SyncStats(); s.Resubscribes != 0 {
		t.Errorf("%d resubscriptions: the follower's refusal was taken as a broken stream", s.Resubscribes)
	}
}
