package system

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/netdir/netdir/bench"
	"github.com/netdir/netdir/storagenode"
	"github.com/netdir/netdir/storagenode/device"
)

// Fresh starts a fresh system per experiment step from one preloaded
// template, so that no step inherits the LSM state (compaction debt, tree
// shapes, promoted keys) of the steps before it. A preload through an
// emulated device takes minutes (every write syncs R WALs on it); the
// template is preloaded once without device cost, into the same memtable
// and cache sizes, and each step copies it (tmpfs: a fraction of a second).
type Fresh struct {
	cfg      Config
	root     string // holds the template and the steps' data roots
	ownRoot  bool
	template string
}

// NewFresh preloads src's keys into a template for systems of cfg (cfg.Dir,
// if set, is where the template and the steps' data go; else a temporary
// directory that Close removes).
func NewFresh(ctx context.Context, cfg Config, src *bench.Source, workers int) (*Fresh, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	f := &Fresh{cfg: cfg, root: cfg.Dir}
	if f.root == "" {
		d, err := os.MkdirTemp(tempRoot(), "netdir-fresh-")
		if err != nil {
			return nil, err
		}
		f.root, f.ownRoot = d, true
	}
	f.template = filepath.Join(f.root, "template")
	if err := os.MkdirAll(f.template, 0o755); err != nil {
		f.Close()
		return nil, err
	}
	tc := cfg
	tc.Dir, tc.Template, tc.Progress = f.template, "", nil
	tc.Device, _ = device.Parse("none")
	onDev, mem, cache := cfg.onDevice(), cfg.MemTable, cfg.BlockCache+int64(cfg.Replicas)*2*cfg.MemTable
	user := cfg.NodeOptions
	tc.NodeOptions = func(o *storagenode.Options) {
		if onDev { // the device's memory sizes, without its cost
			o.MemTableBytes, o.CacheBytes = uint64(mem), cache
		}
		if user != nil {
			user(o)
		}
	}
	s, err := Start(ctx, tc)
	if err != nil {
		f.Close()
		return nil, err
	}
	err = s.Preload(ctx, src, workers, nil)
	if err == nil {
		s.SetCompactionBudget(storagenode.Unthrottled)
		for i := range s.N() {
			if n := s.Node(i); n != nil && err == nil {
				err = n.Settle(ctx)
			}
		}
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("system: template preload: %w", err)
	}
	return f, nil
}

// Start starts a fresh system from the template, for one run: its planes'
// Close skips the demotion of their keys, and its Close removes its data.
func (f *Fresh) Start(ctx context.Context) (*System, error) {
	d, err := os.MkdirTemp(f.root, "step-")
	if err != nil {
		return nil, err
	}
	c := f.cfg
	c.Dir, c.Template, c.Progress = d, f.template, nil
	user := c.NodeOptions
	c.NodeOptions = func(o *storagenode.Options) {
		o.Current = true // every node holds the same cleanly stopped template
		if user != nil {
			user(o)
		}
	}
	s, err := Start(ctx, c)
	if err != nil {
		os.RemoveAll(d)
		return nil, err
	}
	s.ownDir, s.discard = true, true
	return s, nil
}

// RunStep runs one experiment step on a fresh system (System.RunStep).
func (f *Fresh) RunStep(ctx context.Context, st ExperimentStep, o RunOptions) (bench.Run, PhaseResult, error) {
	s, err := f.Start(ctx)
	if err != nil {
		return bench.Run{}, PhaseResult{}, err
	}
	run, pr, err := s.RunStep(ctx, st, o)
	return run, pr, errors.Join(err, s.Close())
}

// Close removes the template (and the root, if Fresh made it).
func (f *Fresh) Close() error {
	if f.ownRoot {
		return os.RemoveAll(f.root)
	}
	return os.RemoveAll(f.template)
}
