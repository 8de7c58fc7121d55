package cluster

import (
	"context"
	"sync"

	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/wire"
)

// apiPlane is a controller.DataPlane over the software switch's Go control
// API: the stand-in for controller.P4Plane while no P4Info exists. It makes the
// same changes the P4Runtime target makes (node table, partitions, slots,
// buckets) and reads the same counters (slot hits, the miss sketch).
type apiPlane struct {
	sw *model.Switch

	mu    sync.Mutex
	slots map[uint32]wire.KeyHash // controller slot → key
}

func newAPIPlane(sw *model.Switch) *apiPlane {
	return &apiPlane{sw: sw, slots: map[uint32]wire.KeyHash{}}
}

func (p *apiPlane) Name() string { return "model (control API)" }

func (p *apiPlane) Setup(_ context.Context, m *layout.Map, _ []uint32) error {
	if err := p.sw.SetNodes(model.NodesOf(m)); err != nil {
		return err
	}
	return directory.InstallLayout(p.sw, m)
}

func (p *apiPlane) InstallEntry(_ context.Context, e *controller.Entry) error {
	if _, err := p.sw.Insert(e.Hash, e.Locs, e.R, e.Ver, e.Buckets); err != nil {
		return err
	}
	p.mu.Lock()
	p.slots[e.Slot] = e.Hash
	p.mu.Unlock()
	return nil
}

func (p *apiPlane) RemoveEntry(_ context.Context, e *controller.Entry) error {
	p.mu.Lock()
	delete(p.slots, e.Slot)
	p.mu.Unlock()
	return p.sw.Evict(e.Hash)
}

func (p *apiPlane) SetSlotBuckets(_ context.Context, e *controller.Entry) error {
	return p.sw.SetSlotBuckets(e.Hash, e.Buckets)
}

func (p *apiPlane) SetPartitionBuckets(_ context.Context, part uint32, _ []wire.NodeID, b []uint8) error {
	return p.sw.SetPartitionBuckets(part, b)
}

func (p *apiPlane) ReadHits(_ context.Context, slots []uint32) (map[uint32]uint64, error) {
	out := make(map[uint32]uint64, len(slots))
	for _, s := range slots {
		p.mu.Lock()
		h, ok := p.slots[s]
		p.mu.Unlock()
		if !ok {
			continue
		}
		if sl, ok := p.sw.Lookup(h); ok {
			out[s] = sl.Hits
		}
	}
	return out, nil
}

func (p *apiPlane) ReadSketch(context.Context) (out [directory.SketchRows][directory.SketchCols]uint64, _ error) {
	for r := range out {
		for c := range out[r] {
			out[r][c] = uint64(p.sw.SketchCell(r, uint32(c)))
		}
	}
	return out, nil
}
