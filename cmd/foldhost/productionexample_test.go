package main

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/config"
)

// The files of deploy/production and the guide, docs/production.md, as
// TestProductionExample reads them: what an operator copies, parsed the
// way the operator's tools would (a shell's words, systemd's KEY=VALUE,
// an environment file), so that the test runs what the guide says.

// productionExample is deploy/production's files and the guide.
type productionExample struct {
	nodes                      []string // node1.toml, node2.toml, node3.toml
	natsConf, unit, env, guide string
}

func readProductionExample(t *testing.T) productionExample {
	t.Helper()
	repo := filepath.Join(testDir, "..", "..")
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(repo, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ex := productionExample{natsConf: read("deploy/production/nats-server.conf"), unit: read("deploy/production/foldhost.service"),
		env: read("deploy/production/foldhost.env"), guide: read("docs/production.md")}
	for i := 1; i <= 3; i++ {
		ex.nodes = append(ex.nodes, read(fmt.Sprintf("deploy/production/node%d.toml", i)))
	}
	// The nodes' files are one config: they differ only in the node's name.
	for i, text := range ex.nodes[1:] {
		name := fmt.Sprintf("node%d", i+2)
		if want := strings.ReplaceAll(ex.nodes[0], "node1", name); text != want {
			t.Errorf("%s.toml differs from node1.toml beyond the node's name (node1 -> %s):\n%s", name, name, lineDiff(want, text))
		}
	}
	return ex
}

// lineDiff lists the lines of got that differ from want's, by number.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "line %d: want %q, got %q\n", i+1, a, c)
		}
	}
	return b.String()
}

// replaceIn replaces each old text of pairs by its new one in text, and
// fails unless each old text is there: the example cannot drift from what
// the test substitutes.
func replaceIn(t *testing.T, file, text string, pairs ...string) string {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(text, pairs[i]) {
			t.Fatalf("%s has no %q (the test substitutes it)", file, pairs[i])
		}
		text = strings.ReplaceAll(text, pairs[i], pairs[i+1])
	}
	return text
}

// tomlString is the value of the first line `key = "value"` of text.
func tomlString(t *testing.T, file, text, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + ` = "([^"]*)"`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s has no line %s = \"…\"", file, key)
	}
	return m[1]
}

// exampleEnv reads foldhost.env (KEY=VALUE lines, # comments) and gives
// each of its variables the test's value; a variable the test has no
// value for, or one the file lacks, fails.
func exampleEnv(t *testing.T, text string, values map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, _, ok := strings.Cut(line, "=")
		v, known := values[k]
		if !ok || !known {
			t.Fatalf("foldhost.env: %q is not a variable the test gives a value (it knows %v)", line, slices.Sorted(maps.Keys(values)))
		}
		env[k] = v
	}
	for k := range values {
		if _, ok := env[k]; !ok {
			t.Fatalf("foldhost.env does not set %s", k)
		}
	}
	return env
}

// guideNATSCommands are the nats commands of docs/production.md's shell
// block that makes the effects stream, as argument lists (single quotes
// as a shell reads them, a trailing # comment dropped).
func guideNATSCommands(t *testing.T, guide string) [][]string {
	t.Helper()
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(guide, -1)
	for _, b := range blocks {
		if !strings.Contains(b[1], "nats stream add ") {
			continue
		}
		var cmds [][]string
		for _, line := range strings.Split(b[1], "\n") {
			if !strings.HasPrefix(line, "nats ") {
				continue
			}
			args := shellWords(t, line)
			cmds = append(cmds, args[1:])
		}
		return cmds
	}
	t.Fatal("docs/production.md has no ```sh block with a `nats stream add` command")
	return nil
}

// shellWords splits line as a POSIX shell would with only single quotes
// (and a # comment) in it; anything else a shell would interpret fails.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == ' ' || c == '\t':
			if in {
				words, in = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '#' && !in:
			i = len(line)
		case strings.ContainsRune("\"\\$`;&|<>(){}*?", rune(c)):
			t.Fatalf("the guide's command %q has %q, which this test's shell reading does not take", line, c)
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quoted {
		t.Fatalf("the guide's command %q: unclosed quote", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// checkUnitFile reads foldhost.service's [Service] keys the guide relies
// on: systemd does not check it here (there is none), the test only
// parses it. cfgText is node1.toml as written, cfg the config a node runs.
func checkUnitFile(t *testing.T, unit, cfgText string, cfg *config.Config) {
	t.Helper()
	keys := map[string]string{}
	section := ""
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Errorf("foldhost.service: %q is not KEY=VALUE", line)
			}
			keys[k] = v
		}
	}
	want := func(k, v string) {
		if keys[k] != v {
			t.Errorf("foldhost.service: %s=%q, want %q", k, keys[k], v)
		}
	}
	want("Type", "simple") // foldhost does not notify systemd
	want("Restart", "on-failure")
	want("KillSignal", "SIGTERM")
	want("RestartPreventExitStatus", "2") // a config error is not retried
	want("ExecReload", "/bin/kill -HUP $MAINPID")
	argv := strings.Fields(keys["ExecStart"])
	i := slices.Index(argv, "--config")
	if len(argv) < 2 || argv[1] != "run" || i < 0 || i+1 >= len(argv) {
		t.Errorf("foldhost.service: ExecStart=%q, want foldhost run --config FILE", keys["ExecStart"])
	} else if file := argv[i+1]; !strings.Contains(cfgText, "as "+file) {
		t.Errorf("foldhost.service runs --config %s; node1.toml does not say it is installed as that", file)
	}
	if f := keys["EnvironmentFile"]; filepath.Base(strings.TrimPrefix(f, "-")) != "foldhost.env" {
		t.Errorf("foldhost.service: EnvironmentFile=%q, want the example's foldhost.env", f)
	}
	if u := keys["User"]; u == "" || u == "root" {
		t.Errorf("foldhost.service: User=%q, want a dedicated user", u)
	}
	if d := keys["StateDirectory"]; "/var/lib/"+d != tomlString(t, "node1.toml", cfgText, "data_dir") {
		t.Errorf("foldhost.service: StateDirectory=%q is not node1.toml's data_dir", d)
	}
	if n, err := strconv.Atoi(keys["LimitNOFILE"]); err != nil || n < 4096 {
		t.Errorf("foldhost.service: LimitNOFILE=%q, want a number of at least 4096", keys["LimitNOFILE"])
	}
	// foldhost ends its own shutdown at shutdown_grace (the hand-over
	// included): systemd must wait longer, or it kills a hand-over midway.
	stop, err := time.ParseDuration(keys["TimeoutStopSec"])
	if err != nil || stop <= cfg.ShutdownGrace {
		t.Errorf("foldhost.service: TimeoutStopSec=%q, want more than shutdown_grace (%v)", keys["TimeoutStopSec"], cfg.ShutdownGrace)
	}
	// The hand-over (at most twice node_ttl) must fit in shutdown_grace,
	// with room left to flush the folds.
	if handOver := 2 * cfg.Fleet.NodeTTL; handOver >= cfg.ShutdownGrace {
		t.Errorf("node1.toml: shutdown_grace %v leaves nothing after the hand-over (twice node_ttl: %v)", cfg.ShutdownGrace, handOver)
	}
}
