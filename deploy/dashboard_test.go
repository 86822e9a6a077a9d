package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"testing"
)

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashboardPanel `json:"panels"`
}

type dashboardPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		X int `json:"x"`
		W int `json:"w"`
	} `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}

// dashboardShows are metrics the dashboard must chart (issue 19's list:
// produce rate and bytes, ack latency, fsync latency, C lag, holes,
// ledgers, store sizes, consumer lag, tiering lag, errors by code).
var dashboardShows = []string{
	"orderlog_ingest_logged_messages_total",
	"orderlog_ingest_appended_bytes_total",
	"orderlog_ingest_ack_latency_seconds_bucket",
	"orderlog_wal_fsync_latency_seconds_bucket",
	"orderlog_committed_watermark",
	"orderlog_committed_lag_offsets",
	"orderlog_hole_offsets",
	"orderlog_ledgers",
	"orderlog_store_ledgers",
	"orderlog_wal_journal_bytes",
	"orderlog_wal_disk_used_ratio",
	"orderlog_consumer_group_lag_offsets",
	"orderlog_tiering_archived_watermark",
	"orderlog_ingest_refused_frames_total",
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels returns the panels, those in collapsed rows included.
func (d dashboard) allPanels() []dashboardPanel {
	var all []dashboardPanel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	return all
}

func TestDashboardStructure(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard needs a uid and a title")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("no datasource variable: the panels' data source must be chosen where the dashboard is imported")
	}
	ids := map[int]bool{}
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X < 0 || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: x %d, width %d: outside the 24 columns", p.Title, p.GridPos.X, p.GridPos.W)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
}

// labelValues matches a query variable's label_values(metric, label).
var labelValues = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)

func TestDashboardMetricsAreExported(t *testing.T) {
	d := readDashboard(t)
	e := exportedNames(t)
	charted := map[string]bool{}
	for _, p := range d.allPanels() {
		for i, target := range p.Targets {
			for _, name := range checkExported(t, e, fmt.Sprintf("panel %q query %d", p.Title, i), target.Expr) {
				charted[name] = true
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(string(v.Query))
		if m == nil {
			t.Errorf("variable %s: query %s is not label_values(metric, label)", v.Name, v.Query)
			continue
		}
		checkExported(t, e, "variable "+v.Name, m[1])
	}
	for _, name := range dashboardShows {
		if !charted[name] {
			t.Errorf("no panel charts %s", name)
		}
	}
}
