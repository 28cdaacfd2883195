package agent

// The alert rules in docs/alerts.yml: promtool takes them, every metric they name is one this
// agent serves, and promtool's unit tests (docs/alerts_test.yml, docs/alerts_week_test.yml) show
// each rule fire on a series that should fire it and stay quiet on one that should not.

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"meshd/internal/testenv"
)

const alertRules = "../docs/alerts.yml"

// alertTests are promtool's unit tests of alertRules.
var alertTests = []string{"../docs/alerts_test.yml", "../docs/alerts_week_test.yml"}

func TestAlertRulesPassPromtool(t *testing.T) {
	if m := testenv.Missing(false, "promtool"); len(m) > 0 {
		testenv.Prereq(t, "checking %s needs promtool (Debian package prometheus; scripts/deps.sh installs it)", alertRules)
	}
	out, err := exec.Command("promtool", "check", "rules", alertRules).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", alertRules, err, out)
	}
	out, err = exec.Command("promtool", append([]string{"test", "rules"}, alertTests...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", strings.Join(alertTests, " "), err, out)
	}
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, d := range append(append([]*prometheus.Desc{}, reportDescs...), boardDescs...) {
		served[regexp.MustCompile(`fqName: "([a-z_]+)"`).FindStringSubmatch(d.String())[1]] = true
	}
	for _, m := range regexp.MustCompile(`\b(meshd_[a-z_]+)\b`).FindAllStringSubmatch(string(b), -1) {
		if !served[m[1]] {
			t.Errorf("%s names %s, which the agent does not serve", alertRules, m[1])
		}
	}
}

// Every rule has a promtool test where it fires (an eval with exp_alerts) and one where it stays
// quiet (an eval with none), so a rule added without its tests fails here.
func TestAlertRulesEachTested(t *testing.T) {
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	var tests strings.Builder
	for _, f := range alertTests {
		tb, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tests.Write(tb)
	}
	rules := regexp.MustCompile(`(?m)^\s*- alert: (\S+)$`).FindAllStringSubmatch(string(b), -1)
	if len(rules) == 0 {
		t.Fatalf("%s has no alert rules", alertRules)
	}
	for _, r := range rules {
		name := regexp.QuoteMeta(r[1])
		if !regexp.MustCompile(`alertname: ` + name + `\n\s*exp_alerts:\n\s*- exp_labels:`).MatchString(tests.String()) {
			t.Errorf("%s: no promtool test in %s where it fires", r[1], strings.Join(alertTests, ", "))
		}
		if !regexp.MustCompile(`\{eval_time: \w+, alertname: ` + name + `\}`).MatchString(tests.String()) {
			t.Errorf("%s: no promtool test in %s where it stays quiet", r[1], strings.Join(alertTests, ", "))
		}
	}
}
