package bench

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Figure is one rendered figure of the report.
type Figure struct {
	Title   string
	Caption string
	PNG     []byte
}

const (
	figW = 6 * vg.Inch
	figH = 4 * vg.Inch
)

// policies returns the policies of runs in first-appearance order.
func policies(runs []Run) []string {
	var ps []string
	seen := map[string]bool{}
	for _, r := range runs {
		if !seen[r.Policy] {
			seen[r.Policy] = true
			ps = append(ps, r.Policy)
		}
	}
	return ps
}

// focusRuns picks, for each policy, the run that the per-policy figures show:
// the one at the highest skew (uniform counts as zipf 0), then the most
// nodes, then the last in the file.
func focusRuns(runs []Run) []Run {
	var out []Run
	for _, p := range policies(runs) {
		var best *Run
		for i := range runs {
			r := &runs[i]
			if r.Policy != p {
				continue
			}
			if best == nil || r.Zipf > best.Zipf || (r.Zipf == best.Zipf && r.Nodes >= best.Nodes) {
				best = r
			}
		}
		out = append(out, *best)
	}
	return out
}

func runLabel(r Run) string {
	skew := fmt.Sprintf("zipf %.2f", r.Zipf)
	if r.Dist == DistUniform || r.Zipf == 0 {
		skew = "uniform"
	}
	return fmt.Sprintf("%s %s, N=%d%s", r.Workload, skew, r.Nodes, loopLabel(r))
}

// loopLabel is ", open loop N ops/s" for an open-loop run, else "".
func loopLabel(r Run) string {
	if r.OfferedOps > 0 {
		return fmt.Sprintf(", open loop %.0f ops/s", r.OfferedOps)
	}
	return ""
}

// legend names a run in a figure: its policy, and its offered load if it
// ran open loop.
func legend(r Run) string {
	if r.OfferedOps > 0 {
		return fmt.Sprintf("%s @ %.0f ops/s", r.Policy, r.OfferedOps)
	}
	return r.Policy
}

func render(p *plot.Plot) ([]byte, error) {
	wt, err := p.WriterTo(figW, figH, "png")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

func styleLine(l *plotter.Line, i int) {
	l.Color = plotutil.Color(i)
	l.Dashes = plotutil.Dashes(i)
	l.Width = vg.Points(1.5)
}

// addLine adds the i-th styled line through xy, with its legend.
func addLine(p *plot.Plot, xy plotter.XYs, i int, label string) error {
	l, err := plotter.NewLine(xy)
	if err != nil {
		return err
	}
	styleLine(l, i)
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

// noData marks an empty figure.
func noData(p *plot.Plot) {
	p.Title.Text += " (no data)"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
}

// throughputVsSkew: one line per policy (and node count, when runs differ in
// it) through (zipf θ, throughput); uniform runs sit at θ = 0.
func throughputVsSkew(runs []Run) (*plot.Plot, string, error) {
	p := newPlot("Throughput vs skew", "zipf θ (0 = uniform)", "throughput (ops/s)")
	nodeCounts := map[int]bool{}
	for _, r := range runs {
		nodeCounts[r.Nodes] = true
	}
	type series struct {
		label string
		pts   map[float64]float64
	}
	var order []string
	byKey := map[string]*series{}
	for _, r := range runs {
		label := r.Policy
		if len(nodeCounts) > 1 {
			label = fmt.Sprintf("%s N=%d", r.Policy, r.Nodes)
		}
		s := byKey[label]
		if s == nil {
			s = &series{label: label, pts: map[float64]float64{}}
			byKey[label] = s
			order = append(order, label)
		}
		s.pts[r.Zipf] = r.ThroughputOps // the last run at a skew wins
	}
	n := 0
	for i, label := range order {
		s := byKey[label]
		xs := make([]float64, 0, len(s.pts))
		for x := range s.pts {
			xs = append(xs, x)
		}
		sort.Float64s(xs)
		xy := make(plotter.XYs, len(xs))
		for j, x := range xs {
			xy[j] = plotter.XY{X: x, Y: s.pts[x]}
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, "", err
		}
		styleLine(l, i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(label, l, pts)
		n += len(xy)
	}
	if n == 0 {
		noData(p)
	} else {
		p.Y.Min = 0
		p.Y.Max *= 1.25 // room for the legend
	}
	return p, "Throughput of each policy against key skew (zipf θ; 0 is uniform key choice).", nil
}

// latencyCDFs: per policy, the latency CDF of its focus run on a log x axis.
func latencyCDFs(focus []Run) (*plot.Plot, string, error) {
	p := newPlot("Latency CDF", "latency (ms, log)", "fraction of operations ≤ x")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	n := 0
	var labels []string
	for i, r := range focus {
		var xy plotter.XYs
		for _, q := range r.Latency {
			if q.Us > 0 {
				xy = append(xy, plotter.XY{X: q.Us / 1e3, Y: q.Q})
			}
		}
		if len(xy) < 2 {
			continue
		}
		if err := addLine(p, xy, i, legend(r)); err != nil {
			return nil, "", err
		}
		labels = append(labels, fmt.Sprintf("%s (%s)", r.Policy, runLabel(r)))
		n++
	}
	if n == 0 {
		p.X.Scale = plot.LinearScale{}
		p.X.Tick.Marker = plot.DefaultTicks{}
		noData(p)
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.YOffs = vg.Points(20)
	return p, "Latency CDF per policy: " + strings.Join(labels, "; ") + ".", nil
}

// loadBars: per-node load over the mean load, grouped by node, one bar per
// policy (focus runs); 1.0 is perfect balance.
func loadBars(focus []Run) (*plot.Plot, string, error) {
	p := newPlot("Per-node load", "storage node", "load / mean load")
	var with []Run
	maxN := 0
	for _, r := range focus {
		if len(r.NodeLoads) > 0 && Mean(r.NodeLoads) > 0 {
			with = append(with, r)
			maxN = max(maxN, len(r.NodeLoads))
		}
	}
	if len(with) == 0 {
		noData(p)
		return p, "No per-node load was recorded.", nil
	}
	w := vg.Points(math.Max(2, math.Min(14, 300/float64(maxN*len(with)))))
	var labels []string
	for i, r := range with {
		m := Mean(r.NodeLoads)
		vals := make(plotter.Values, maxN)
		for j, x := range r.NodeLoads {
			vals[j] = x / m
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, "", err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(with)-1)/2)
		p.Add(b)
		p.Legend.Add(fmt.Sprintf("%s (max/mean %.2f)", r.Policy, r.LoadMaxOverMean), b)
		labels = append(labels, fmt.Sprintf("%s (%s)", r.Policy, runLabel(r)))
	}
	names := make([]string, maxN)
	for j := range names {
		names[j] = fmt.Sprintf("n%d", j)
	}
	if maxN > 16 { // keep the axis readable
		for j := range names {
			if j%(maxN/16+1) != 0 {
				names[j] = ""
			}
		}
	}
	p.NominalX(names...)
	p.Y.Min = 0
	p.Y.Max *= 1.2 // room for the legend
	ref := plotter.NewFunction(func(float64) float64 { return 1 })
	ref.Color = plotutil.Color(len(with) + 1)
	ref.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(ref)
	return p, "Requests per storage node over the mean, per policy: " + strings.Join(labels, "; ") + ".", nil
}

// latencyTail: the complementary CDF P(latency > x) on log-log axes; a
// power-law tail of index a is a straight line of slope −a.
func latencyTail(focus []Run) (*plot.Plot, string, error) {
	p := newPlot("Latency tail (CCDF, log-log)", "latency (ms, log)", "P(latency > x) (log)")
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	n := 0
	var labels []string
	for i, r := range focus {
		var xy plotter.XYs
		for _, q := range r.Latency {
			if c := 1 - q.Q; q.Us > 0 && c > 1e-12 && q.Q >= 0.5 {
				xy = append(xy, plotter.XY{X: q.Us / 1e3, Y: c})
			}
		}
		if len(xy) < 2 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, "", err
		}
		styleLine(l, i)
		p.Add(l)
		label := legend(r)
		if r.TailIndex > 0 {
			label = fmt.Sprintf("%s (Hill %.2f)", legend(r), r.TailIndex)
		}
		p.Legend.Add(label, l)
		s := fmt.Sprintf("%s: Hill tail index %.2f", r.Policy, r.TailIndex)
		if r.TailIndexExpected > 0 {
			s += fmt.Sprintf(" against α−1 = %.2f", r.TailIndexExpected)
		}
		labels = append(labels, s)
		n++
	}
	if n == 0 {
		p.X.Scale, p.Y.Scale = plot.LinearScale{}, plot.LinearScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.DefaultTicks{}, plot.DefaultTicks{}
		noData(p)
	}
	p.Legend.Left = false
	return p, "Latency tail per policy (from the median out); " + strings.Join(labels, "; ") + ".", nil
}

// Figures renders the report's figures, in order:
//   - throughput vs skew, when some policy ran at two skews or more;
//   - the latency CDF and the log-log latency tail, of each policy's
//     open-loop run if there are any (equal offered load), else of its
//     focus run (the highest skew, then the most nodes);
//   - per-node load bars, of the closed-loop focus runs;
//   - throughput and load max/mean over time, when runs carry a Series.
func Figures(res Results) ([]Figure, error) {
	var closed, open []Run
	for _, r := range res.Runs {
		if r.OfferedOps > 0 {
			open = append(open, r)
		} else {
			closed = append(closed, r)
		}
	}
	focus := focusRuns(closed)
	latency := focus
	if len(open) > 0 {
		latency = focusRuns(open)
	}
	type maker struct {
		title string
		mk    func() (*plot.Plot, string, error)
	}
	var makers []maker
	if sweeps(closed) {
		makers = append(makers, maker{"Throughput vs skew", func() (*plot.Plot, string, error) { return throughputVsSkew(closed) }})
	}
	makers = append(makers,
		maker{"Latency CDF", func() (*plot.Plot, string, error) { return latencyCDFs(latency) }},
		maker{"Per-node load", func() (*plot.Plot, string, error) { return loadBars(focus) }},
		maker{"Latency tail", func() (*plot.Plot, string, error) { return latencyTail(latency) }},
	)
	if hasSeries(res.Runs) {
		makers = append(makers,
			maker{"Throughput over time", func() (*plot.Plot, string, error) { return seriesPlot(res.Runs, false) }},
			maker{"Load max/mean over time", func() (*plot.Plot, string, error) { return seriesPlot(res.Runs, true) }},
		)
	}
	figs := make([]Figure, 0, len(makers))
	for _, m := range makers {
		p, caption, err := m.mk()
		if err != nil {
			return nil, fmt.Errorf("bench: figure %q: %w", m.title, err)
		}
		png, err := render(p)
		if err != nil {
			return nil, fmt.Errorf("bench: figure %q: %w", m.title, err)
		}
		figs = append(figs, Figure{Title: m.title, Caption: caption, PNG: png})
	}
	return figs, nil
}

// sweeps reports whether some policy ran at two skews or more: the
// throughput-vs-skew figure has a line to draw, not one point per policy.
func sweeps(runs []Run) bool {
	skews := map[string]map[float64]bool{}
	for _, r := range runs {
		if skews[r.Policy] == nil {
			skews[r.Policy] = map[float64]bool{}
		}
		skews[r.Policy][r.Zipf] = true
		if len(skews[r.Policy]) > 1 {
			return true
		}
	}
	return false
}

func hasSeries(runs []Run) bool {
	for _, r := range runs {
		if len(r.Series) > 1 {
			return true
		}
	}
	return false
}

// seriesPlot: one line per run through its Series, of throughput or of
// load max/mean.
func seriesPlot(runs []Run, load bool) (*plot.Plot, string, error) {
	title, y, caption := "Throughput over time", "throughput (ops/s)", "Throughput each second of each run (measured part)."
	if load {
		title, y, caption = "Load max/mean over time", "busiest node's load / mean load",
			"Per-node load's max over mean each second of each run (1 is perfect balance)."
	}
	p := newPlot(title, "time in the run (s)", y)
	i := 0
	for _, r := range runs {
		if len(r.Series) < 2 {
			continue
		}
		xy := make(plotter.XYs, len(r.Series))
		for j, pt := range r.Series {
			xy[j] = plotter.XY{X: pt.T, Y: pt.ThroughputOps}
			if load {
				xy[j].Y = pt.LoadMaxOverMean
			}
		}
		if err := addLine(p, xy, i, legend(r)); err != nil {
			return nil, "", err
		}
		i++
	}
	p.Y.Min = 0
	p.Y.Max *= 1.3 // room for the legend
	return p, caption, nil
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{"mib": mib, "ms": ms}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font-family: sans-serif; margin: 2em auto; max-width: 80em; color: #222; }
div.table { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.8em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td.l, th.l { text-align: left; }
figure { display: inline-block; margin: 1em; vertical-align: top; max-width: 40em; }
figcaption { font-size: 0.85em; color: #555; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p>Generated {{.Generated}}. {{len .Runs}} runs. Latencies in ms; load is requests per storage node;
offered load is the open-loop rate (closed loop: blank);
tail index is the Hill estimate over the top 5% of latencies (α−1 beside it when value sizes are Pareto(α)).</p>
<div class="table"><table>
<tr><th class="l">policy</th><th class="l">workload</th><th>zipf</th><th>nodes</th><th>offered (ops/s)</th><th>throughput (ops/s)</th>
<th>p50</th><th>p99</th><th>p999</th><th>load max/mean</th><th>load CoV</th><th>node latency CoV</th>
<th>dir hit rate</th><th>tail index</th><th>α−1</th><th>ops</th><th>errors</th><th>write groups (absorbed)</th><th>CPU s</th><th>RSS MiB</th></tr>
{{range .Runs}}<tr><td class="l">{{.Policy}}</td><td class="l">{{.Workload}}</td><td>{{printf "%.2f" .Zipf}}</td><td>{{.Nodes}}</td>
<td>{{if .OfferedOps}}{{printf "%.0f" .OfferedOps}}{{end}}</td><td>{{printf "%.0f" .ThroughputOps}}</td><td>{{ms .P50us}}</td><td>{{ms .P99us}}</td><td>{{ms .P999us}}</td>
<td>{{printf "%.3f" .LoadMaxOverMean}}</td><td>{{printf "%.3f" .LoadCoV}}</td><td>{{printf "%.3f" .NodeLatencyCoV}}</td>
<td>{{printf "%.3f" .DirHitRate}}</td><td>{{printf "%.2f" .TailIndex}}</td><td>{{if .TailIndexExpected}}{{printf "%.2f" .TailIndexExpected}}{{end}}</td>
<td>{{.Ops}}</td><td>{{.Errors}}</td><td>{{if .WriteGroups}}{{.WriteGroups}} ({{.GroupedWrites}}){{end}}</td><td>{{printf "%.1f" .CPUSeconds}}</td><td>{{printf "%.0f" (mib .RSSBytes)}}</td></tr>
{{end}}</table></div>
{{range .Figures}}<figure><img alt="{{.Title}}" src="{{.Src}}" width="576" height="384">
<figcaption>{{.Caption}}</figcaption></figure>
{{end}}
</body>
</html>
`))

type htmlFigure struct {
	Title, Caption string
	Src            template.URL
}

// WriteHTML writes a self-contained HTML report: the summary table and the
// Figures embedded as base64 PNG data URIs.
func WriteHTML(w io.Writer, res Results, title string) error {
	figs, err := Figures(res)
	if err != nil {
		return err
	}
	if title == "" {
		title = "netdir bench report"
	}
	data := struct {
		Title, Generated string
		Runs             []Run
		Figures          []htmlFigure
	}{Title: title, Generated: time.Now().UTC().Format(time.RFC3339), Runs: res.Runs}
	for _, f := range figs {
		data.Figures = append(data.Figures, htmlFigure{
			Title:   f.Title,
			Caption: f.Caption,
			Src:     template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(f.PNG)),
		})
	}
	return reportTmpl.Execute(w, data)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// ms prints a latency in µs as milliseconds with three significant
// digits, at least two decimals.
func ms(us float64) string {
	m := us / 1e3
	switch {
	case m >= 100:
		return fmt.Sprintf("%.0f", m)
	case m >= 10:
		return fmt.Sprintf("%.1f", m)
	}
	return fmt.Sprintf("%.2f", m)
}

// WriteSummary writes the terminal summary table of runs. The last two
// columns are the system's resource use: CPU cores (CPU seconds per second of
// the run) and resident memory.
func WriteSummary(w io.Writer, runs []Run) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tworkload\tzipf\tnodes\tops/s\tp50 ms\tp99 ms\tp999 ms\twrite p99\tmax/mean\tload CoV\tlat CoV\thot locs\thot max/mean\thot extras\thit rate\ttail\tα−1\terrors\tcores\tRSS MiB\t")
	for _, r := range runs {
		exp := "-"
		if r.TailIndexExpected > 0 {
			exp = fmt.Sprintf("%.2f", r.TailIndexExpected)
		}
		zipf := fmt.Sprintf("%.2f", r.Zipf)
		if r.Dist == DistUniform {
			zipf = "unif"
		}
		cores := 0.0
		if r.DurationS > 0 {
			cores = r.CPUSeconds / r.DurationS
		}
		pol := r.Policy
		if r.OfferedOps > 0 {
			pol += fmt.Sprintf(" @%.0f/s", r.OfferedOps)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%d\t%.3f\t%.1f%%\t%.3f\t%.2f\t%s\t%d\t%.2f\t%.0f\t\n",
			pol, r.Workload, zipf, r.Nodes, r.ThroughputOps, ms(r.P50us), ms(r.P99us), ms(r.P999us), ms(r.WriteP99us),
			r.LoadMaxOverMean, r.LoadCoV, r.NodeLatencyCoV, r.HotKeyLocations, r.HotKeyReadMaxOverMean, 100*r.HotKeyExtraShare,
			r.DirHitRate, r.TailIndex, exp, r.Errors,
			cores, mib(r.RSSBytes))
	}
	return tw.Flush()
}

// LiveStats is one frame of the live view.
type LiveStats struct {
	Policy     string
	Elapsed    time.Duration
	NodeLoads  []float64 // requests (or requests/s) per node in the last interval
	Throughput float64   // ops/s in the last interval
	P99        time.Duration
	DirSize    int // keys in the directory
}

// LiveView renders a frame: a header line with policy, time, throughput,
// p99 and directory size, then one line per node with a load bar of up to
// width cells (eighth-block resolution, scaled to the busiest node) and the
// node's load over the mean. The result ends in a newline; the caller
// redraws it in place (e.g. "\x1b[H\x1b[J" before it).
func LiveView(s LiveStats, width int) string {
	if width <= 0 {
		width = 40
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s t=%-6s %12s ops/s  p99 %-9s dir %d keys",
		s.Policy, s.Elapsed.Truncate(time.Second), groupDigits(s.Throughput), fmtDur(s.P99), s.DirSize)
	if len(s.NodeLoads) > 0 {
		fmt.Fprintf(&b, "  max/mean %.2f", MaxOverMean(s.NodeLoads))
	}
	b.WriteByte('\n')
	mx, m := 0.0, Mean(s.NodeLoads)
	for _, x := range s.NodeLoads {
		mx = max(mx, x)
	}
	for i, x := range s.NodeLoads {
		rel := 0.0
		if m > 0 {
			rel = x / m
		}
		fmt.Fprintf(&b, "n%-3d %s %5.2f×\n", i, Bar(x, mx, width), rel)
	}
	return b.String()
}

// Bar draws x on a scale where max fills width cells, with eighth-block
// characters, padded with spaces to width cells.
func Bar(x, max float64, width int) string {
	const eighths = " ▏▎▍▌▋▊▉"
	parts := []rune(eighths)
	cells := 0.0
	if max > 0 && x > 0 {
		cells = math.Min(float64(width), x/max*float64(width))
	}
	full := int(cells)
	frac := int((cells - float64(full)) * 8)
	var b strings.Builder
	b.WriteString(strings.Repeat("█", full))
	n := full
	if full < width && frac > 0 {
		b.WriteRune(parts[frac])
		n++
	}
	b.WriteString(strings.Repeat(" ", width-n))
	return b.String()
}

func groupDigits(x float64) string {
	s := fmt.Sprintf("%.0f", math.Max(0, x))
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
}
