// Package grafana holds netdir's Grafana dashboard (netdir.json) and its
// test: every metric a panel queries is one that the code exports.
package grafana

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/nicagent"
	"github.com/netdir/netdir/storagenode"
)

// exported is every metric name the node, switch, agent and controller
// collectors describe, by component. Describe reads only the descriptors,
// so the collectors need no running component behind them.
func exported(t *testing.T) map[string]string {
	var node *storagenode.Node
	components := map[string][]prometheus.Collector{
		"node":       {node.Collector()},
		"switch":     {model.NewCollector(nil)},
		"agent":      {nicagent.NewCollector(nil)},
		"controller": {controller.NewCollector(nil), controller.NewStatsCollector(nil)},
	}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]string{}
	for comp, cs := range components {
		for _, c := range cs {
			ch := make(chan *prometheus.Desc, 64)
			go func() { c.Describe(ch); close(ch) }()
			for d := range ch {
				m := fqName.FindStringSubmatch(d.String())
				if m == nil {
					t.Fatalf("no fqName in %s", d)
				}
				names[m[1]] = comp
			}
		}
	}
	return names
}

type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// Parts of a PromQL expression that are not metric names: strings, label
// matchers, range and offset durations, grouping clauses' label lists, and
// Grafana variables.
var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVars     = regexp.MustCompile(`\$\{?\w+\}?`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*\s*\(?`)
	promKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "and": true, "or": true, "unless": true, "offset": true, "bool": true}
)

// metricsOf returns the metric names an expression selects.
func metricsOf(expr string) []string {
	s := promStrings.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = promVars.ReplaceAllString(s, " ")
	var names []string
	for _, id := range promIdent.FindAllString(s, -1) {
		if strings.HasSuffix(id, "(") || promKeywords[strings.TrimSpace(id)] {
			continue // a function or aggregation, or a keyword
		}
		names = append(names, strings.TrimSpace(id))
	}
	return names
}

func TestMetricsOf(t *testing.T) {
	got := metricsOf(`sum by (node, class) (rate(a_total{x=~"b{c}"}[$__rate_interval])) / on (node) group_left max by (node) (c) * 60`)
	if !slices.Equal(got, []string{"a_total", "c"}) {
		t.Errorf("metricsOf = %q", got)
	}
}

// TestDashboardQueriesExportedMetrics reads netdir.json and checks that
// each panel queries something, that every metric it queries is exported
// by a collector of the code, and that the dashboard covers each
// component.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("netdir.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("netdir.json: %v", err)
	}
	names := exported(t)
	covered := map[string]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q queries nothing", p.Title)
			}
			for _, tg := range p.Targets {
				ms := metricsOf(tg.Expr)
				if len(ms) == 0 {
					t.Errorf("panel %q: %q selects no metric", p.Title, tg.Expr)
				}
				for _, m := range ms {
					comp, ok := names[m]
					if !ok {
						t.Errorf("panel %q queries %s, which no collector exports", p.Title, m)
					}
					covered[comp] = true
				}
			}
		}
	}
	walk(dash.Panels)
	for _, comp := range []string{"node", "switch", "agent", "controller"} {
		if !covered[comp] {
			t.Errorf("no panel shows a %s metric", comp)
		}
	}
	t.Logf("%d panels' queries checked against %d exported metrics", len(dash.Panels), len(names))
}
