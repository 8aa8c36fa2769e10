package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// promInstall is how the rules' tests get promtool and prometheus.
const promInstall = "apt-get install prometheus (Debian's package, promtool with it; scripts/test installs it as root)"

// promBinary is a binary of Debian's prometheus package: $env, else name
// on PATH. Missing, the test fails (the test command installs it).
func promBinary(t *testing.T, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v; install with %s", env, p, err, promInstall)
		}
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("no %s for the alerting rules' tests: install it (%s) or set %s to its binary", name, promInstall, env)
	}
	return p
}

// unitCheck is one assertion of the promtool unit tests: at eval time at,
// the alert is firing or quiet (promtool lists firing alerts only).
type unitCheck struct {
	group, alert string
	at           time.Duration
	firing       bool
	line         int
}

var (
	groupLine  = regexp.MustCompile(`^  - name: "([^"]+)"$`)
	quietLine  = regexp.MustCompile(`^\s+- \{eval_time: (\w+), alertname: (\w+), exp_alerts: \[\]\}$`)
	evalLine   = regexp.MustCompile(`^\s+- eval_time: (\w+)$`)
	alertLine  = regexp.MustCompile(`^\s+alertname: (\w+)$`)
	expectLine = regexp.MustCompile(`^\s+exp_alerts:(.*)$`)
)

// unitChecksOf reads the unit tests' assertions, by lines (the format its
// header states): a quiet check on one line, a block for a firing one.
func unitChecksOf(t *testing.T, path string) (groups []string, checks []unitCheck) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	var cur unitCheck
	dur := func(s string) time.Duration {
		d, err := model.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s:%d: eval_time %q: %v", path, n, s, err)
		}
		return time.Duration(d)
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		if m := groupLine.FindStringSubmatch(line); m != nil {
			groups = append(groups, m[1])
			continue
		}
		if len(groups) == 0 {
			continue
		}
		group := groups[len(groups)-1]
		switch {
		case quietLine.MatchString(line):
			m := quietLine.FindStringSubmatch(line)
			checks = append(checks, unitCheck{group: group, alert: m[2], at: dur(m[1]), line: n})
		case evalLine.MatchString(line):
			cur = unitCheck{group: group, at: dur(evalLine.FindStringSubmatch(line)[1]), line: n}
		case alertLine.MatchString(line):
			cur.alert = alertLine.FindStringSubmatch(line)[1]
		case expectLine.MatchString(line):
			if cur.alert == "" {
				t.Fatalf("%s:%d: exp_alerts outside an alert_rule_test block", path, n)
			}
			cur.firing = strings.TrimSpace(expectLine.FindStringSubmatch(line)[1]) != "[]"
			checks = append(checks, cur)
			cur = unitCheck{}
		case strings.Contains(line, "eval_time") || strings.Contains(line, "alertname"):
			t.Fatalf("%s:%d: an assertion in neither form of the file's header: %s", path, n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return groups, checks
}

// The groups of the unit tests every alert must go through: the healthy
// and on-purpose cases each alert must stay quiet on, and the causes that
// must page once (an alert of the fleet, when there is one, joins these
// tests like any other; its own causes, a unit with no live owner and
// repeated takeovers, come as "fires: " and "one alert per cause: "
// groups with it).
var (
	quietGroups = []string{"quiet: a healthy idle fleet", "quiet: a paused fold", "quiet: a fold exporting on demand only"}
	causeGroups = []string{"one alert per cause: a failed fold", "one alert per cause: NATS unreachable", "one alert per cause: a host down"}
)

// TestRulesUnderPromtool (issue 40): the shipped rules pass `promtool check
// rules` and their unit tests (`promtool test rules`,
// prometheus/foldhost-rules.test.yml), and the unit tests cover every
// alert: each fires in some group a minute after it was asserted quiet
// (its `for` pinned to the minute), stays quiet in each "quiet: " group
// past the longest `for`, and is asserted in each "one alert per cause: "
// group, where one alert fires. A rule added without its tests fails here.
// The unit tests fail on each fault of the issue: a healthy idle fold's
// artifact taken for stale (the rule on the last publish's age), a failed
// fold that also pages as stalled or lagging, a stall alert 5 minutes into
// a young series, a host down without an alert.
func TestRulesUnderPromtool(t *testing.T) {
	promtool := promBinary(t, "FOLDHOST_PROMTOOL", "promtool")
	dir := filepath.Join(here(t), "prometheus")
	for _, args := range [][]string{{"check", "rules", "foldhost-rules.yml"}, {"test", "rules", "foldhost-rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	rules := rulesOf(t, filepath.Join(dir, "foldhost-rules.yml"))
	var longest time.Duration
	forOf := map[string]time.Duration{}
	for _, r := range rules {
		d, _ := model.ParseDuration(r.forDur)
		forOf[r.alert] = time.Duration(d)
		longest = max(longest, time.Duration(d))
	}
	groups, checks := unitChecksOf(t, filepath.Join(dir, "foldhost-rules.test.yml"))
	for _, g := range slices.Concat(quietGroups, causeGroups) {
		if !slices.Contains(groups, g) {
			t.Errorf("the unit tests have no group %q", g)
		}
	}
	for _, c := range checks {
		if _, ok := forOf[c.alert]; !ok {
			t.Errorf("line %d: alert %s is not a rule", c.line, c.alert)
		}
	}
	for _, g := range groups {
		var in []unitCheck
		for _, c := range checks {
			if c.group == g {
				in = append(in, c)
			}
		}
		switch {
		case strings.HasPrefix(g, "quiet: "):
			for _, r := range rules {
				if !slices.ContainsFunc(in, func(c unitCheck) bool { return c.alert == r.alert && !c.firing && c.at > longest }) {
					t.Errorf("group %q: %s is not asserted quiet after the longest for (%v)", g, r.alert, longest)
				}
			}
			for _, c := range in {
				if c.firing {
					t.Errorf("group %q, line %d: %s fires in a quiet group", g, c.line, c.alert)
				}
			}
		case strings.HasPrefix(g, "one alert per cause: "):
			for _, r := range rules {
				if !slices.ContainsFunc(in, func(c unitCheck) bool { return c.alert == r.alert }) {
					t.Errorf("group %q: %s is not asserted", g, r.alert)
				}
			}
			if !slices.ContainsFunc(in, func(c unitCheck) bool { return c.firing }) {
				t.Errorf("group %q: no alert fires", g)
			}
		case strings.HasPrefix(g, "fires: "):
		default:
			t.Errorf("group %q: want a name that starts with \"quiet: \", \"one alert per cause: \" or \"fires: \"", g)
		}
	}
	for _, r := range rules {
		edge := slices.ContainsFunc(checks, func(fire unitCheck) bool {
			return fire.alert == r.alert && fire.firing && slices.ContainsFunc(checks, func(q unitCheck) bool {
				return q.group == fire.group && q.alert == r.alert && !q.firing && q.at == fire.at-time.Minute
			})
		})
		if !edge {
			t.Errorf("%s: no group asserts it quiet a minute before it fires (its for pinned to the evaluation)", r.alert)
		}
	}
}
