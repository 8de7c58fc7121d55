package system

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/controller/p4rt"
	"github.com/netdir/netdir/storagenode"
)

// ExpChaos is `netdir bench --experiment chaos` (issue 15, item 6), the
// long form of cluster's TestChaos.
const ExpChaos = "chaos"

// ChaosExperiment configures the chaos experiment: 4 nodes, chains of 3,
// every node behind a fault proxy, a switch programmed over P4Runtime by
// a controller that splices dead nodes out.
type ChaosExperiment struct {
	Dir string
	// P4Info is the controller's P4Info file; empty: the one embedded in
	// package p4.
	P4Info    string
	Histories int    // default 100
	Seed      uint64 // default 1
	Workers   int    // closed-loop clients of the throughput phase (default 16)
	// Visualize is where each non-linearizable history's Porcupine
	// visualization goes (empty: nowhere).
	Visualize string
	Log       func(format string, args ...any)
	// ControlLog is the controller's log (nil: none).
	ControlLog *slog.Logger
}

// ChaosResults are the experiment's figures.
type ChaosResults struct {
	cluster.ChaosResult
	// ThroughputBefore is the closed-loop rate in the second before a
	// node's kill; ThroughputAfter in the third second after it (2 s to
	// 3 s); KillRatio is After/Before (goal ≥ 0.6).
	ThroughputBefore, ThroughputAfter, KillRatio float64
	// SwitchWriteResume is the time from a fresh switch's start until a
	// write to a promoted key is acknowledged (goal ≤ 1 s).
	SwitchWriteResume time.Duration
	// Failover is the time from the raft leader's kill until another
	// controller leads and has programmed the switch (goal ≤ 2 s);
	// FailoverErrors are the closed-loop clients' failed operations from
	// the kill until a second after that (goal 0), out of FailoverOps.
	Failover                    time.Duration
	FailoverErrors, FailoverOps int64
}

// RunChaos runs the histories, then the node-kill throughput phase, then
// the switch restart.
func RunChaos(ctx context.Context, e ChaosExperiment) (ChaosResults, error) {
	var res ChaosResults
	if e.Histories == 0 {
		e.Histories = 100
	}
	if e.Seed == 0 {
		e.Seed = 1
	}
	if e.Workers == 0 {
		e.Workers = 16
	}
	if e.Log == nil {
		e.Log = func(string, ...any) {}
	}
	schema, err := embeddedSchema()
	if e.P4Info != "" {
		schema, err = p4rt.LoadSchema(e.P4Info)
	}
	if err != nil {
		return res, err
	}
	c, err := cluster.Start(cluster.Options{N: 4, R: 3, Dir: e.Dir, Proxy: true, Seed: e.Seed,
		Controller: true, Controllers: 3, Round: 100 * time.Millisecond,
		Node: func(o *storagenode.Options) { o.RetransmitAfter = 30 * time.Millisecond }})
	if err != nil {
		return res, err
	}
	defer c.Close()
	pl, err := c.StartPlane(ctx, cluster.PlaneConfig{Schema: schema,
		Controller: cluster.ControllerConfig{Round: 100 * time.Millisecond, CoarseEpoch: time.Minute, Log: e.ControlLog}, Replicas: 3})
	if err != nil {
		return res, err
	}
	defer func() { pl.Close() }()
	cl := client.Options{Service: c.DataPlane(), Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond}
	res.ChaosResult, err = c.Chaos(ctx, cluster.ChaosConfig{Histories: e.Histories, Seed: e.Seed, Plane: pl,
		History: cluster.HistoryConfig{Clients: 4, OpsPer: 30, Keys: 3, Gets: 45, Puts: 40, OpTimeout: 5 * time.Second, Client: cl},
		Faults:  cluster.ChaosFaults, Down: [2]time.Duration{100 * time.Millisecond, 2 * time.Second},
		Settle: 30 * time.Second, Visualize: e.Visualize, Log: e.Log})
	if err != nil {
		return res, err
	}
	c.SetFaults(cluster.Faults{})
	if err := killThroughput(ctx, c, pl, cl, e, &res); err != nil {
		return res, err
	}
	if res.SwitchWriteResume, err = switchRestart(ctx, c, pl, cl, e.Log); err != nil {
		return res, err
	}
	e.Log("switch restart: writes to a promoted key resumed after %v", res.SwitchWriteResume.Round(time.Millisecond))
	if err := c.Settle(ctx, pl, 30*time.Second); err != nil {
		return res, err
	}
	if err := leaderFailover(ctx, c, pl, cl, e, &res); err != nil {
		return res, err
	}
	return res, nil
}

// closedLoop runs workers closed-loop clients (half gets, half puts over
// 1000 keys, the first 16 pinned by the caller) until stop, counting
// operations and failures (not-found is no failure).
func closedLoop(ctx context.Context, c *cluster.Cluster, o client.Options, workers int, stop <-chan struct{}, ops, fails *atomic.Int64) (wait func(), err error) {
	var wg sync.WaitGroup
	for w := range workers {
		cl, err := c.Client(o)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := []byte(fmt.Sprintf("load-%d", (w*7919+i*104729)%1000))
				octx, cancel := context.WithTimeout(ctx, 2*time.Second)
				var err error
				if i%2 == 0 {
					_, err = cl.Put(octx, key, []byte("v"))
				} else {
					_, _, err = cl.Get(octx, key)
				}
				cancel()
				if err == nil || errors.Is(err, client.ErrNotFound) {
					ops.Add(1)
				} else if fails != nil {
					fails.Add(1)
				}
			}
		}()
	}
	return wg.Wait, nil
}

// leaderFailover pins 16 of the load's keys, runs e.Workers closed-loop
// clients, kills the raft leader, and measures until another controller
// leads and has programmed the switch, and the clients' failures from the
// kill until a second after that; the old leader then restarts.
func leaderFailover(ctx context.Context, c *cluster.Cluster, pl *cluster.Plane, o client.Options, e ChaosExperiment, res *ChaosResults) error {
	lead, err := pl.WaitLeader(ctx)
	if err != nil {
		return err
	}
	for i := range 16 {
		if _, err := lead.Pin(ctx, fmt.Appendf(nil, "load-%d", i)); err != nil {
			return err
		}
	}
	var ops, fails atomic.Int64
	stop := make(chan struct{})
	wait, err := closedLoop(ctx, c, o, e.Workers, stop, &ops, &fails)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	ops0, fails0 := ops.Load(), fails.Load()
	start := time.Now()
	killed, err := pl.KillLeader()
	if err == nil {
		_, err = pl.WaitLeader(ctx)
	}
	res.Failover = time.Since(start)
	time.Sleep(time.Second)
	close(stop)
	wait()
	res.FailoverOps, res.FailoverErrors = ops.Load()-ops0, fails.Load()-fails0
	if err != nil {
		return err
	}
	e.Log("controller failover: %v; %d client errors in %d operations from the kill to 1 s after",
		res.Failover.Round(time.Millisecond), res.FailoverErrors, res.FailoverOps)
	return pl.RestartController(ctx, killed)
}

// killThroughput runs e.Workers closed-loop clients (half gets, half puts
// over 1000 keys) for 2 s, kills node 1, and compares the rate in the
// third second after the kill with the second before it; node 1 then
// restarts and the cluster heals.
func killThroughput(ctx context.Context, c *cluster.Cluster, pl *cluster.Plane, o client.Options, e ChaosExperiment, res *ChaosResults) error {
	var ops atomic.Int64
	stop := make(chan struct{})
	wait, err := closedLoop(ctx, c, o, e.Workers, stop, &ops, nil)
	if err != nil {
		return err
	}
	rate := func(from, to time.Duration) float64 {
		time.Sleep(from)
		n := ops.Load()
		time.Sleep(to - from)
		return float64(ops.Load()-n) / (to - from).Seconds()
	}
	res.ThroughputBefore = rate(time.Second, 2*time.Second)
	if err := c.Crash(0); err != nil {
		return err
	}
	res.ThroughputAfter = rate(2*time.Second, 3*time.Second)
	close(stop)
	wait()
	if res.ThroughputBefore > 0 {
		res.KillRatio = res.ThroughputAfter / res.ThroughputBefore
	}
	e.Log("node 1 killed: %.0f ops/s before, %.0f ops/s 2-3 s after (%.2f×)", res.ThroughputBefore, res.ThroughputAfter, res.KillRatio)
	if err := c.Restart(0); err != nil {
		return err
	}
	return c.Settle(ctx, pl, 30*time.Second)
}

// switchRestart pins a key, restarts the switch and returns how long after
// the fresh switch's start a write to the key is acknowledged.
func switchRestart(ctx context.Context, c *cluster.Cluster, pl *cluster.Plane, o client.Options, log func(string, ...any)) (time.Duration, error) {
	cl, err := c.Client(o)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	key := []byte("chaos-switch-hot")
	if _, err := cl.Put(ctx, key, []byte("v")); err != nil {
		return 0, err
	}
	lead, err := pl.WaitLeader(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := lead.Pin(ctx, key); err != nil {
		return 0, err
	}
	if err := pl.RestartSwitch(); err != nil {
		return 0, err
	}
	start := time.Now()
	for try := 1; time.Since(start) < time.Minute; try++ {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := cl.Put(wctx, key, []byte("v"))
		cancel()
		if err == nil {
			log("switch restart: write %d acknowledged", try)
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("system: no write to a promoted key within a minute of the switch's restart")
}
