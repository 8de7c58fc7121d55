package sim

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/netdir/netdir/bench"
)

// BalanceGoal is the throughput against the ideal that stands for load
// max/mean ≤ 1.05 in a closed loop: a node drawing 1.05 times the mean
// share saturates first and holds the cluster to 1/1.05 of N×C.
const BalanceGoal = 1 / 1.05

// DirectoryNeed is, for one cluster size, the smallest directory of a
// sweep over directory capacities that balanced it: the keys in use in
// all its directories (racks' and spine's) in the first run that reached
// the goal.
type DirectoryNeed struct {
	Nodes       int
	Keys        int     // directory keys in use; 0 if no run met the goal
	OfIdeal     float64 // that run's throughput against N×C
	MaxOverMean float64
	Met         bool
}

// DirectoryNeeds reads a sweep's runs (several directory capacities per
// node count) and gives each node count's need, in node order.
func DirectoryNeeds(runs []bench.Run, goal float64) []DirectoryNeed {
	byNodes := map[int][]bench.Run{}
	for _, r := range runs {
		byNodes[r.Nodes] = append(byNodes[r.Nodes], r)
	}
	var out []DirectoryNeed
	for _, n := range slices.Sorted(maps.Keys(byNodes)) {
		rs := byNodes[n]
		slices.SortFunc(rs, func(a, b bench.Run) int { return cmp.Compare(a.DirSize, b.DirSize) })
		need := DirectoryNeed{Nodes: n}
		for _, r := range rs {
			of := r.ThroughputOps / (float64(n) * r.CapacityOps)
			if of >= goal {
				need = DirectoryNeed{Nodes: n, Keys: r.DirSize, OfIdeal: of, MaxOverMean: r.LoadMaxOverMean, Met: true}
				break
			}
		}
		out = append(out, need)
	}
	return out
}

// WriteNeeds writes the needs as a Markdown table beside n·log2 n.
func WriteNeeds(w io.Writer, needs []DirectoryNeed) error {
	if _, err := fmt.Fprintln(w, "| nodes | directory keys needed | n·log2 n | ratio | throughput/ideal | load max/mean |\n|---|---|---|---|---|---|"); err != nil {
		return err
	}
	for _, d := range needs {
		nlogn := float64(d.Nodes) * math.Log2(float64(d.Nodes))
		keys := "not met"
		if d.Met {
			keys = fmt.Sprint(d.Keys)
		}
		if _, err := fmt.Fprintf(w, "| %d | %s | %.0f | %.2f | %.3f | %.3f |\n", d.Nodes, keys, nlogn, float64(d.Keys)/nlogn, d.OfIdeal, d.MaxOverMean); err != nil {
			return err
		}
	}
	return nil
}

// PlotNeeds draws the needs against n·log2 n on log-log axes, as PNG or
// SVG by path's extension; label names the runs in the legend.
func PlotNeeds(w io.Writer, path, label string, needs []DirectoryNeed) error {
	p := plot.New()
	p.Title.Text = "Directory keys needed for throughput ≥ ideal/1.05 (simulated)"
	p.X.Label.Text = "storage nodes n"
	p.Y.Label.Text = "directory keys"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	var ticks []plot.Tick
	for _, d := range needs {
		ticks = append(ticks, plot.Tick{Value: float64(d.Nodes), Label: fmt.Sprint(d.Nodes)})
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.ConstantTicks(ticks), plot.LogTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	var got, ref plotter.XYs
	for _, d := range needs {
		n := float64(d.Nodes)
		ref = append(ref, plotter.XY{X: n, Y: n * math.Log2(n)})
		if d.Met {
			got = append(got, plotter.XY{X: n, Y: float64(d.Keys)})
		}
	}
	for i, s := range []struct {
		xy    plotter.XYs
		label string
	}{{got, "measured need, " + label}, {ref, "n·log2 n"}} {
		if len(s.xy) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(s.xy)
		if err != nil {
			return err
		}
		l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(1.5)
		pts.Color, pts.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(s.label, l, pts)
	}
	format := "png"
	if filepath.Ext(path) == ".svg" {
		format = "svg"
	}
	wt, err := p.WriterTo(6*vg.Inch, 4*vg.Inch, format)
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}
