package controller

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// replication is how commands reach the state (fsm.go): a lone
// controller applies them at once, replicas through raft.
type replication interface {
	// apply returns once c is applied to this controller's state, with the
	// command's own error; a controller that does not lead refuses it with
	// a *NotLeaderError.
	apply(c command) error
	// leading returns nil while this controller leads, and a
	// *NotLeaderError otherwise.
	leading() error
	close() error
}

// NotLeaderError refuses a change at a controller that does not lead; it
// names the leader if one is known.
type NotLeaderError struct {
	Leader RaftPeer // zero while no leader is known
}

func (e *NotLeaderError) Error() string {
	if e.Leader.ID == "" {
		return "controller: not the leader, and no leader is known"
	}
	return fmt.Sprintf("controller: not the leader; the leader is %s (API %s)", e.Leader.ID, e.Leader.API)
}

// local is the replication of a lone controller: every command applies at
// once, and it always leads.
type local struct{ st *state }

func (l local) apply(c command) error {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	return l.st.apply(c)
}

func (local) leading() error { return nil }
func (local) close() error   { return nil }

// RaftConfig makes a controller one of several replicas of the state,
// over hashicorp/raft.
type RaftConfig struct {
	ID   string `yaml:"id"`   // this controller's server id, one of Peers
	Bind string `yaml:"bind"` // raft's TCP address (this controller's Peers entry)
	// Dir keeps the log (BoltDB) and the snapshots; empty keeps them in
	// memory, lost with the process.
	Dir string `yaml:"data"`
	// Peers are all the controllers, this one included. A controller
	// without a log bootstraps the cluster from them; they also map a
	// leader to its API for NotLeaderError.
	Peers []RaftPeer `yaml:"peers"`
	// Timeouts; zero takes the LAN defaults (DefaultHeartbeatTimeout...).
	HeartbeatTimeout   time.Duration `yaml:"heartbeat_timeout"`
	ElectionTimeout    time.Duration `yaml:"election_timeout"`
	LeaderLeaseTimeout time.Duration `yaml:"leader_lease_timeout"`
	// SnapshotThreshold is the number of commands between snapshots
	// (default 8192).
	SnapshotThreshold uint64 `yaml:"snapshot_threshold"`
}

// RaftPeer is one controller of the cluster.
type RaftPeer struct {
	ID   string `yaml:"id"`
	Raft string `yaml:"raft"` // raft's TCP address
	API  string `yaml:"api"`  // gRPC API address
}

// The heartbeat and election timeouts and the leader lease for a LAN: a follower starts an election 0.5 to 1 s after
// the leader's last heartbeat, so a failover takes about a second.
const (
	DefaultHeartbeatTimeout   = 500 * time.Millisecond
	DefaultElectionTimeout    = 500 * time.Millisecond
	DefaultLeaderLeaseTimeout = 250 * time.Millisecond
)

// applyTimeout bounds a command's wait for its commit.
const applyTimeout = 5 * time.Second

// replica is the raft shell around the state.
type replica struct {
	r      *raft.Raft
	peers  []RaftPeer
	closer []io.Closer
}

// startRaft starts this controller's raft server over st.
func startRaft(cfg RaftConfig, st *state, log *slog.Logger) (_ *replica, err error) {
	if cfg.ID == "" || cfg.Bind == "" {
		return nil, errors.New("controller: raft needs an id and a bind address")
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cmp(cfg.HeartbeatTimeout, DefaultHeartbeatTimeout)
	rc.ElectionTimeout = cmp(cfg.ElectionTimeout, DefaultElectionTimeout)
	rc.LeaderLeaseTimeout = cmp(cfg.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	rc.CommitTimeout = 10 * time.Millisecond
	rc.SnapshotThreshold = 8192
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	hl := hclog.FromStandardLogger(slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn})
	rc.Logger = hl
	rp := &replica{peers: cfg.Peers}
	defer func() {
		if err != nil {
			rp.close()
		}
	}()
	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if cfg.Dir == "" {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		bolt, err := raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, "raft.db"))
		if err != nil {
			return nil, fmt.Errorf("controller: raft log: %w", err)
		}
		rp.closer = append(rp.closer, bolt)
		if logs, err = raft.NewLogCache(512, bolt); err != nil {
			return nil, err
		}
		stable = bolt
		if snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hl); err != nil {
			return nil, fmt.Errorf("controller: raft snapshots: %w", err)
		}
	}
	tr, err := raft.NewTCPTransportWithLogger(cfg.Bind, nil, 3, 2*time.Second, hl)
	if err != nil {
		return nil, fmt.Errorf("controller: raft transport: %w", err)
	}
	rp.closer = append(rp.closer, tr)
	known, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return nil, err
	}
	if rp.r, err = raft.NewRaft(rc, fsm{st}, logs, stable, snaps, tr); err != nil {
		return nil, fmt.Errorf("controller: raft: %w", err)
	}
	if !known && len(cfg.Peers) > 0 {
		var servers []raft.Server
		for _, p := range cfg.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Raft)})
		}
		// Every new controller bootstraps the same configuration; a
		// second bootstrap of the cluster is refused, and harmless.
		if err := rp.r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil &&
			!errors.Is(err, raft.ErrCantBootstrap) {
			return nil, fmt.Errorf("controller: raft bootstrap: %w", err)
		}
	}
	return rp, nil
}

func cmp(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}

func (rp *replica) apply(c command) error {
	b, err := encodeCommand(c)
	if err != nil {
		return err
	}
	f := rp.r.Apply(b, applyTimeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return rp.notLeader()
		}
		return fmt.Errorf("controller: replicate: %w", err)
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

func (rp *replica) leading() error {
	if rp.r.State() == raft.Leader {
		return nil
	}
	return rp.notLeader()
}

func (rp *replica) notLeader() error {
	addr, id := rp.r.LeaderWithID()
	e := &NotLeaderError{}
	if id != "" {
		e.Leader = RaftPeer{ID: string(id), Raft: string(addr)}
		for _, p := range rp.peers {
			if p.ID == string(id) {
				e.Leader = p
			}
		}
	}
	return e
}

func (rp *replica) close() error {
	var errs []error
	if rp.r != nil {
		errs = append(errs, rp.r.Shutdown().Error())
	}
	for _, c := range rp.closer {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// fsm is the state as raft's state machine: Apply is the only writer of the
// replicated state.
type fsm struct{ st *state }

// Apply applies one committed command; its error is the command's answer.
func (f fsm) Apply(l *raft.Log) any {
	c, err := decodeCommand(l.Data)
	if err != nil {
		return fmt.Errorf("controller: command at index %d: %w", l.Index, err)
	}
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	return f.st.apply(c)
}

// Snapshot copies the state; raft persists it in the background.
func (f fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	return fsmSnapshot(f.st.snapshotLocked()), nil
}

// Restore replaces the state with a snapshot's.
func (f fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var sn snapshot
	if err := gob.NewDecoder(rc).Decode(&sn); err != nil {
		return fmt.Errorf("controller: restore: %w", err)
	}
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	return f.st.restoreLocked(sn)
}

type fsmSnapshot snapshot

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := gob.NewEncoder(sink).Encode(snapshot(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}

// Leadership is this controller's raft leadership: Changes delivers true
// on winning it and false on losing it (the latest value, never blocking
// raft). A lone controller's has no Changes and always leads.
type Leadership struct {
	rp *replica
}

// Replicated reports whether the controller is one of several replicas.
func (l Leadership) Replicated() bool { return l.rp != nil }

// Changes delivers leadership changes (nil for a lone controller).
func (l Leadership) Changes() <-chan bool {
	if l.rp == nil {
		return nil
	}
	return l.rp.r.LeaderCh()
}

// Term is raft's current term (0 for a lone controller): it grows with
// every election, so a new leader's P4Runtime election id out-ranks its
// predecessors' (ElectionID).
func (l Leadership) Term() uint64 {
	if l.rp == nil {
		return 0
	}
	return l.rp.r.CurrentTerm()
}

// Leader names the leader as this controller knows it (zero if none).
func (l Leadership) Leader() RaftPeer {
	if l.rp == nil {
		return RaftPeer{}
	}
	var e *NotLeaderError
	if errors.As(l.rp.notLeader(), &e) {
		return e.Leader
	}
	return RaftPeer{}
}

// ElectionID is the P4Runtime election id of a leader in term: the term
// above, the configured id (below 1<<16) beneath, so a later term always
// out-ranks an earlier one and a lone controller keeps its id.
func ElectionID(term, configured uint64) uint64 { return term<<16 | configured&0xffff }

// Barrier waits until every command committed before this call is applied
// here: a new leader's first step before acting on the state.
func (l Leadership) Barrier(ctx context.Context) error {
	if l.rp == nil {
		return nil
	}
	timeout := applyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	return l.rp.r.Barrier(timeout).Error()
}

// Snapshot has raft take a snapshot now (tests, operators).
func (l Leadership) Snapshot() error {
	if l.rp == nil {
		return errors.New("controller: not replicated")
	}
	return l.rp.r.Snapshot().Error()
}
