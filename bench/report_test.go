package bench

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// sampleResults builds runs for three policies at two skews from synthetic
// latencies, as a bench sweep would.
func sampleResults(t *testing.T) Results {
	t.Helper()
	var res Results
	for pi, pol := range []string{"static", "pegasus", "netdir"} {
		for _, z := range []float64{0.99, 1.2} {
			src := build(t, Workload{Name: "B", Keys: 100, Zipf: z, ParetoAlpha: 2})
			rec := NewRecorder(time.Unix(0, 0))
			xs := paretoSamples(20_000, float64(20_000*(3-pi)), 1.2+float64(pi)*0.3, uint64(pi+1))
			for _, x := range xs {
				rec.Record(OpRead, time.Duration(x), nil)
			}
			r := rec.Snapshot()
			r.Elapsed = time.Second
			nodes := make([]NodeStat, 8)
			for i := range nodes {
				load := 100.0
				if i == 0 {
					load = 100 * (z * 4 / float64(pi+1))
				}
				nodes[i] = NodeStat{Requests: load, MeanLatency: time.Duration(load) * time.Microsecond}
			}
			res.Runs = append(res.Runs, Summarize(RunInfo{Policy: pol, Workload: src.Workload(), Nodes: nodes, DirHitRate: 0.5 * float64(pi)}, r))
		}
	}
	return res
}

// images parses doc as HTML and returns the src of every <img>.
func images(t *testing.T, doc string) []string {
	t.Helper()
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	var srcs []string
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "img" {
			for _, a := range n.Attr {
				if a.Key == "src" {
					srcs = append(srcs, a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)
	return srcs
}

func checkReport(t *testing.T, res Results) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, res, "test <report>"); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	if !strings.HasPrefix(doc, "<!DOCTYPE html>") || !strings.Contains(doc, "</html>") {
		t.Error("not a complete HTML document")
	}
	if !strings.Contains(doc, "test &lt;report&gt;") {
		t.Error("title not escaped")
	}
	srcs := images(t, doc)
	figs, err := Figures(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != len(figs) || len(srcs) < 3 {
		t.Fatalf("%d <img> elements for %d figures", len(srcs), len(figs))
	}
	const prefix = "data:image/png;base64,"
	for i, s := range srcs {
		if !strings.HasPrefix(s, prefix) {
			t.Fatalf("img %d src %.40q is not a PNG data URI", i, s)
		}
		raw, err := base64.StdEncoding.DecodeString(s[len(prefix):])
		if err != nil {
			t.Fatalf("img %d: %v", i, err)
		}
		if !bytes.HasPrefix(raw, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("img %d lacks the PNG signature", i)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(raw))
		if err != nil || cfg.Width < 100 || cfg.Height < 100 {
			t.Errorf("img %d: %+v %v", i, cfg, err)
		}
	}
	return doc
}

func TestReportHTML(t *testing.T) {
	res := sampleResults(t)
	doc := checkReport(t, res)
	for _, p := range []string{"static", "pegasus", "netdir"} {
		if !strings.Contains(doc, "<td class=\"l\">"+p+"</td>") {
			t.Errorf("summary table lacks %s", p)
		}
	}
	figs, err := Figures(res)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Throughput vs skew", "Latency CDF", "Per-node load", "Latency tail"}
	for i, f := range figs {
		if f.Title != want[i] || f.Caption == "" {
			t.Errorf("figure %d: %q %q", i, f.Title, f.Caption)
		}
	}
	if !strings.Contains(figs[3].Caption, "α−1 = 1.00") {
		t.Errorf("tail caption does not set the estimate against α−1: %q", figs[3].Caption)
	}
}

// TestReportOpenLoop: a demo's results (one skew; closed-loop runs, then
// open-loop runs at one offered load, with time series) drop the
// one-point throughput-vs-skew figure, draw the latency figures from the
// open-loop runs, add the time series, and print latencies in ms.
func TestReportOpenLoop(t *testing.T) {
	var res Results
	for _, r := range sampleResults(t).Runs {
		if r.Zipf != 1.2 || r.Policy == "pegasus" {
			continue
		}
		for i := range 5 {
			r.Series = append(r.Series, SeriesPoint{T: float64(i + 1), ThroughputOps: 1000 + float64(i), LoadMaxOverMean: 1.5})
		}
		res.Runs = append(res.Runs, r)
		r.OfferedOps = 700
		res.Runs = append(res.Runs, r)
	}
	doc := checkReport(t, res)
	figs, err := Figures(res)
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	for _, f := range figs {
		titles = append(titles, f.Title)
	}
	want := "Latency CDF,Per-node load,Latency tail,Throughput over time,Load max/mean over time"
	if strings.Join(titles, ",") != want {
		t.Errorf("figures %q, want %s", titles, want)
	}
	if !strings.Contains(figs[0].Caption, "open loop 700 ops/s") {
		t.Errorf("the CDF is not of the open-loop runs: %q", figs[0].Caption)
	}
	if !strings.Contains(doc, "Latencies in ms") || !strings.Contains(doc, "<td>700</td>") {
		t.Error("the table does not give latencies in ms and the offered load")
	}
	var b strings.Builder
	if err := WriteSummary(&b, res.Runs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "netdir @700/s") {
		t.Errorf("summary does not name the open-loop runs:\n%s", b.String())
	}
}

func TestMs(t *testing.T) {
	for us, want := range map[float64]string{240: "0.24", 44_800: "44.8", 1_234_567: "1235", 5: "0.01"} {
		if got := ms(us); got != want {
			t.Errorf("ms(%g) = %s, want %s", us, got, want)
		}
	}
}

func TestReportEmpty(t *testing.T) {
	checkReport(t, Results{})
	// Runs with no latency or node data still give four figures.
	checkReport(t, Results{Runs: []Run{{Policy: "static", Workload: "C"}}})
}

func TestFocusRuns(t *testing.T) {
	runs := []Run{
		{Policy: "a", Zipf: 1.2, Nodes: 8}, {Policy: "b", Zipf: 0.9}, {Policy: "a", Zipf: 1.2, Nodes: 16},
		{Policy: "a", Zipf: 0.99, Nodes: 32}, {Policy: "b", Zipf: 1.1},
	}
	f := focusRuns(runs)
	if len(f) != 2 || f[0].Policy != "a" || f[0].Nodes != 16 || f[1].Zipf != 1.1 {
		t.Errorf("focus %+v", f)
	}
}

func TestSummaryTable(t *testing.T) {
	res := sampleResults(t)
	var b bytes.Buffer
	if err := WriteSummary(&b, res.Runs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 1+len(res.Runs) {
		t.Fatalf("%d lines for %d runs:\n%s", len(lines), len(res.Runs), b.String())
	}
	if !strings.Contains(lines[0], "p99 ms") || !strings.Contains(lines[0], "max/mean") {
		t.Errorf("header %q", lines[0])
	}
	if !strings.Contains(lines[len(lines)-1], "netdir") || !strings.Contains(lines[len(lines)-1], "1.00") {
		t.Errorf("last row %q", lines[len(lines)-1])
	}
	// Columns line up: every row is as wide as the header.
	w := utf8.RuneCountInString(lines[0])
	for _, l := range lines[1:] {
		if utf8.RuneCountInString(l) != w {
			t.Errorf("row width %d, header %d: %q", utf8.RuneCountInString(l), w, l)
		}
	}
}

func TestBar(t *testing.T) {
	cases := []struct {
		x, max float64
		width  int
		want   string
	}{
		{1, 1, 4, "████"},
		{0.5, 1, 8, "████    "},
		{0, 1, 3, "   "},
		{1, 0, 3, "   "},
		{2, 1, 3, "███"},
		{0.5625, 1, 2, "█▏"}, // 1.125 cells
		{0.95, 1, 2, "█▉"},   // 1.9 cells: 7 eighths
	}
	for _, c := range cases {
		if got := Bar(c.x, c.max, c.width); got != c.want {
			t.Errorf("Bar(%g, %g, %d) = %q, want %q", c.x, c.max, c.width, got, c.want)
		}
	}
}

func TestLiveView(t *testing.T) {
	s := LiveStats{
		Policy: "netdir", Elapsed: 12*time.Second + 300*time.Millisecond,
		NodeLoads:  []float64{400, 100, 100, 200},
		Throughput: 123456, P99: 812 * time.Microsecond, DirSize: 1024,
	}
	out := LiveView(s, 20)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	for _, want := range []string{"netdir", "t=12s", "123,456 ops/s", "p99 812µs", "dir 1024 keys", "max/mean 2.00"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header %q lacks %q", lines[0], want)
		}
	}
	if !strings.Contains(lines[1], strings.Repeat("█", 20)) || !strings.Contains(lines[1], "2.00×") {
		t.Errorf("busiest node line %q", lines[1])
	}
	if !strings.Contains(lines[2], strings.Repeat("█", 5)+strings.Repeat(" ", 15)) || !strings.Contains(lines[2], "0.50×") {
		t.Errorf("node 1 line %q", lines[2])
	}
	// All node lines have the same display width.
	for _, l := range lines[2:] {
		if utf8.RuneCountInString(l) != utf8.RuneCountInString(lines[1]) {
			t.Errorf("ragged line %q", l)
		}
	}
}
