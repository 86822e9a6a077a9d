package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unicode"
)

// alertRules is what the tests read of alerts.yaml.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// requiredAlerts are the alerts issue 19 asks for.
var requiredAlerts = map[string]string{
	"OrderlogNoSequencerLeader":      "no sequencer leader",
	"OrderlogCommitStalled":          "C not advancing while producers wait",
	"OrderlogFsyncSlow":              "fsync p99 high",
	"OrderlogDiskNearlyFull":         "disk nearly full",
	"OrderlogLedgersUnderReplicated": "under-replicated ledgers",
	"OrderlogTieringBehind":          "tiering behind",
	"OrderlogConsumerLagGrowing":     "consumer lag growing",
	"OrderlogAuthFailuresSpiking":    "authentication failures spiking",
}

// unitTestedAlerts must have a case in alerts_test.yaml.
var unitTestedAlerts = []string{"OrderlogNoSequencerLeader", "OrderlogConsumerLagGrowing", "OrderlogLimitRefusals"}

func TestAlertRules(t *testing.T) {
	rules := readOneYAML[alertRules](t, alertsFile)
	anchors := operationsAnchors(t)
	e := exportedNames(t)
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule without an alert name (%q)", g.Name, r.Record)
				continue
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			doc, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "#")
			if doc != "docs/operations.md" || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q is no section of docs/operations.md", r.Alert, r.Annotations["runbook_url"])
			}
			checkExported(t, e, r.Alert, r.Expr)
		}
	}
	for name, what := range requiredAlerts {
		if !seen[name] {
			t.Errorf("alerts.yaml has no %s (%s)", name, what)
		}
	}
}

// operationsAnchors returns the anchors of docs/operations.md's headings,
// as GitHub makes them: lower case, punctuation dropped, spaces to hyphens.
func operationsAnchors(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors := map[string]bool{}
	inCode := false
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if inCode || !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		anchors[strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(heading))] = true
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return anchors
}

func TestAlertRulesUnitTestsCover(t *testing.T) {
	type unitTests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	u := readOneYAML[unitTests](t, alertsTestFile)
	if len(u.RuleFiles) != 1 || u.RuleFiles[0] != "alerts.yaml" {
		t.Errorf("%s tests %v, want alerts.yaml", alertsTestFile, u.RuleFiles)
	}
	tested := map[string]bool{}
	for _, c := range u.Tests {
		for _, a := range c.AlertRuleTest {
			tested[a.Alertname] = true
		}
	}
	for _, name := range unitTestedAlerts {
		if !tested[name] {
			t.Errorf("%s has no case for %s", alertsTestFile, name)
		}
	}
}

// TestPromtool checks the rules, runs their unit tests and checks the
// compose Prometheus configuration with promtool (`make promtool-tool`,
// Debian's prometheus package).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH: run `make promtool-tool`")
	}
	for name, args := range map[string][]string{
		"check_rules":  {"check", "rules", alertsFile},
		"test_rules":   {"test", "rules", alertsTestFile},
		"check_config": {"check", "config", prometheusConfig},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(promtool, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}
