package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/netdir/netdir/wire"
)

// ChaosRoles are what a chaos run kills: the positions of a key's chain
// (its head, a middle member, its tail, and a node outside the chain: the
// extra that holds the key's copy while it is promoted), the switch, and
// the raft leader of the controllers (with PlaneConfig.Replicas > 1).
var ChaosRoles = []string{"head", "middle", "tail", "extra", "switch", "leader"}

// chaosRole is the role of history i: every block of as many histories as
// there are roles kills each role once, in a random order.
func chaosRole(seed uint64, i, roles int) int {
	perm := rand.New(rand.NewPCG(seed, uint64(i/roles)|1<<32)).Perm(roles)
	return perm[i%roles]
}

// ChaosConfig is a chaos run (issue 15, item 6): histories of concurrent
// clients, each while a node is killed and restarted, with the proxies'
// faults and the plane's controller promoting and evicting the keys.
type ChaosConfig struct {
	Histories int
	Seed      uint64
	// Plane is the switch clients talk to and the controller that splices
	// dead nodes out and pins the history's keys (required).
	Plane *Plane
	// History is the template of each history; Prefix, Seed and the
	// client's Service are set per history.
	History HistoryConfig
	Faults  []Faults         // one per history, in turn (needs Options.Proxy)
	Down    [2]time.Duration // a killed node's time down, drawn in [Down[0], Down[1])
	// Settle bounds the wait, after each history, for every node to be
	// back in the controller's layout.
	Settle time.Duration
	Check  time.Duration // Porcupine's time per history (default 20 s)
	// Visualize is where each non-linearizable history's Porcupine
	// visualization goes (empty: nowhere).
	Visualize string
	Log       func(format string, args ...any)
}

// ChaosResult sums a chaos run.
type ChaosResult struct {
	Histories, Ops, Undecided int
	Violations                int      // histories Porcupine or the version check refuses
	Acked, Lost               int      // keys with an acknowledged write; of those, lost
	Kills                     [6]int   // per ChaosRoles
	Pins                      int      // keys the controller promoted during the histories
	Failures                  []string // each violation or loss, with its history
}

// Chaos runs cfg.Histories histories. Everything random (victims, their
// time down, faults, promotions, the clients' operations) follows
// cfg.Seed and the history's index; a failure names both.
func (c *Cluster) Chaos(ctx context.Context, cfg ChaosConfig) (ChaosResult, error) {
	var res ChaosResult
	if cfg.Check == 0 {
		cfg.Check = 20 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	for i := range cfg.Histories {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		hc := cfg.History
		hc.Prefix, hc.Seed = fmt.Sprintf("chaos%d-h%d", cfg.Seed, i), rng.Uint64()
		hc.Client.Service = c.DataPlane()
		if len(cfg.Faults) > 0 {
			c.SetFaults(cfg.Faults[i%len(cfg.Faults)])
		}
		roles := len(ChaosRoles)
		if cfg.Plane.Controllers() < 3 {
			roles-- // no raft leader to kill
		}
		role := chaosRole(cfg.Seed, i, roles)
		victim := c.chaosVictim(cfg.Plane, hc.Key(0), role)
		res.Kills[role]++
		down := cfg.Down[0] + time.Duration(rng.Int64N(int64(cfg.Down[1]-cfg.Down[0])+1))
		killed := make(chan error, 1)
		go func(delay time.Duration) {
			time.Sleep(delay)
			killed <- c.chaosKill(ctx, cfg.Plane, role, victim, down)
		}(time.Duration(rng.IntN(100)) * time.Millisecond)
		stop := make(chan struct{})
		pins := make(chan int)
		go func(seed uint64) { pins <- promoteAtRandom(ctx, cfg.Plane, hc, seed, stop) }(rng.Uint64())
		h, err := c.RunHistory(hc)
		close(stop)
		res.Pins += <-pins
		if kerr := <-killed; err == nil {
			err = kerr
		}
		if err != nil {
			return res, fmt.Errorf("history %d (seed %d): %w", i, cfg.Seed, err)
		}
		res.Histories++
		res.Ops += len(h.Ops)
		what := fmt.Sprintf("history %d (seed %d, %s node %d killed for %v)", i, cfg.Seed, ChaosRoles[role], victim+1, down.Round(time.Millisecond))
		if victim < 0 {
			what = fmt.Sprintf("history %d (seed %d, %s killed for %v)", i, cfg.Seed, ChaosRoles[role], down.Round(time.Millisecond))
		}
		lin, info := porcupine.CheckOperationsVerbose(KVModel, h.Ops, cfg.Check)
		switch lin {
		case porcupine.Illegal:
			res.Violations++
			msg := what + ": not linearizable"
			if cfg.Visualize != "" {
				path := filepath.Join(cfg.Visualize, fmt.Sprintf("chaos-%d-h%d.html", cfg.Seed, i))
				if porcupine.VisualizePath(KVModel, info, path) == nil {
					msg += " (" + path + ")"
				}
			}
			res.Failures = append(res.Failures, msg)
		case porcupine.Unknown:
			res.Undecided++
		}
		if err := h.CheckVersions(); err != nil {
			res.Violations++
			res.Failures = append(res.Failures, fmt.Sprintf("%s: %v", what, err))
		}
		if err := c.Settle(ctx, cfg.Plane, cfg.Settle); err != nil {
			return res, fmt.Errorf("%s: %w", what, err)
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lost, err := c.LostWrites(lctx, hc.Client, h.Acked)
		cancel()
		if err != nil {
			return res, fmt.Errorf("%s: %w", what, err)
		}
		res.Acked += len(h.Acked)
		res.Lost += len(lost)
		for _, l := range lost {
			res.Failures = append(res.Failures, fmt.Sprintf("%s: write lost: %s", what, l))
		}
		cfg.Log("%s: %d ops, %d keys acknowledged, %d lost; epoch %d", what, len(h.Ops), len(h.Acked), len(lost), cfg.Plane.View().Layout().Epoch())
	}
	return res, nil
}

// chaosKill kills the role's victim (a node, 0-based, for the chain's
// roles), waits down, and starts it again.
func (c *Cluster) chaosKill(ctx context.Context, pl *Plane, role, victim int, down time.Duration) error {
	switch ChaosRoles[role] {
	case "switch":
		if err := pl.KillSwitch(); err != nil {
			return err
		}
		time.Sleep(down)
		return pl.ReviveSwitch()
	case "leader":
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := pl.WaitLeader(wctx) // not in the middle of an election
		cancel()
		if err != nil {
			return err
		}
		i, err := pl.KillLeader()
		if err != nil {
			return err
		}
		time.Sleep(down)
		return pl.RestartController(ctx, i)
	}
	if err := c.Crash(victim); err != nil {
		return err
	}
	time.Sleep(down)
	return c.Restart(victim)
}

// chaosVictim is the node (0-based) at role in key's chain of the
// controller's layout; the extra is the first node outside it; -1 for the
// switch and the leader.
func (c *Cluster) chaosVictim(pl *Plane, key string, role int) int {
	switch ChaosRoles[role] {
	case "switch", "leader":
		return -1
	}
	lay := pl.View().Layout()
	ch := lay.ChainOf(wire.HashKey([]byte(key)))
	switch ChaosRoles[role] {
	case "head":
		return int(ch[0]) - 1
	case "middle":
		return int(ch[len(ch)/2]) - 1
	case "tail":
		return int(ch[len(ch)-1]) - 1
	}
	for _, id := range lay.Nodes() {
		if !slices.Contains(ch, id) {
			return int(id) - 1
		}
	}
	return int(ch[len(ch)-1]) - 1
}

// promoteAtRandom pins and unpins the history's keys through the
// controller every few milliseconds until stop, and unpins what is left.
// A pin may fail while a chain has no head; the run goes on. It returns
// the pins that took.
func promoteAtRandom(ctx context.Context, pl *Plane, hc HistoryConfig, seed uint64, stop <-chan struct{}) (pins int) {
	r := rand.New(rand.NewPCG(seed, 3))
	pinned := map[string]bool{}
	defer func() {
		for k := range pinned {
			uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if lead, err := pl.WaitLeader(uctx); err == nil {
				_ = lead.Unpin(uctx, []byte(k))
			}
			cancel()
		}
	}()
	for {
		select {
		case <-stop:
			return pins
		case <-time.After(time.Duration(5+r.IntN(20)) * time.Millisecond):
		}
		k := hc.Key(r.IntN(hc.Keys))
		lead := pl.Lead()
		if lead == nil {
			continue // a failover: no leader yet
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if pinned[k] {
			if lead.Unpin(pctx, []byte(k)) == nil {
				delete(pinned, k)
			}
		} else if _, err := lead.Pin(pctx, []byte(k)); err == nil {
			pinned[k] = true
			pins++
		}
		cancel()
	}
}

// Settle waits until a controller leads and has programmed the switch,
// and every node is back in its layout, serving at its epoch.
func (c *Cluster) Settle(ctx context.Context, pl *Plane, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		lead := pl.Lead()
		if lead == nil {
			lead = pl.View()
		}
		m := lead.Layout()
		var behind []string
		if !lead.Serving() {
			behind = append(behind, "no controller leads and serves")
		}
		for i := range c.N() {
			switch n := c.Node(i); {
			case n == nil:
				behind = append(behind, fmt.Sprintf("node %d stopped", i+1))
			case !n.Ready():
				behind = append(behind, fmt.Sprintf("node %d not ready", i+1))
			case n.Layout().Epoch() != m.Epoch():
				behind = append(behind, fmt.Sprintf("node %d at epoch %d", i+1, n.Layout().Epoch()))
			}
		}
		if len(m.Down()) == 0 && len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: not healed within %v (down %v, epoch %d; %s)", within, m.Down(), m.Epoch(), strings.Join(behind, ", "))
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ChaosFaults are the proxies' faults a chaos run cycles through: loss,
// delay and reordering, alone and together.
var ChaosFaults = []Faults{
	{Loss: 0.03},
	{Delay: 300 * time.Microsecond, Reorder: 0.2, Jitter: 3 * time.Millisecond},
	{Loss: 0.02, Dup: 0.05, Reorder: 0.1},
	{Loss: 0.03, Delay: 200 * time.Microsecond, Reorder: 0.2, Jitter: 2 * time.Millisecond},
}
