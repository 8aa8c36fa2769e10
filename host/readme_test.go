package host_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/internal/hosttest"
)

// readmeCommand is one command of an example block of README.md or a
// page of docs/, with the file and section it is in and the answer the
// comment lines right under it give ("" when none).
type readmeCommand struct {
	file    string
	section string
	line    int
	args    []string
	want    string
}

// shellWords splits a command line as sh does for the quoting the docs'
// examples use: words apart by blanks, '…' and "…" quoting.
func shellWords(t testing.TB, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("unclosed quote in %q", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// docPages are README.md and the pages of docs/, relative to the
// repository's root.
func docPages(t testing.TB) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(hosttest.RepoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(hosttest.RepoRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

// readmeQueryExamples returns the commands of every code block of
// README.md and docs/*.md that runs a query (a curl of …/query/, a nats
// req of ….query.).
func readmeQueryExamples(t testing.TB) []readmeCommand {
	t.Helper()
	var out []readmeCommand
	for _, page := range docPages(t) {
		out = append(out, queryExamplesOf(t, page)...)
	}
	return out
}

// queryExamplesOf returns the commands of page's code blocks that run a
// query.
func queryExamplesOf(t testing.TB, page string) []readmeCommand {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(hosttest.RepoRoot, filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	var out []readmeCommand
	section := ""
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			section = strings.TrimLeft(lines[i], "# ")
		}
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
		}
		block := lines[start:i]
		if !strings.Contains(strings.Join(block, "\n"), "/query/") && !strings.Contains(strings.Join(block, "\n"), ".query.") {
			continue
		}
		var cmds []readmeCommand
		afterCommand := false
		for j, l := range block {
			switch {
			case strings.TrimSpace(l) == "":
				afterCommand = false
			case strings.HasPrefix(l, "# "):
				if afterCommand {
					c := &cmds[len(cmds)-1]
					if c.want != "" {
						c.want += "\n"
					}
					c.want += strings.TrimPrefix(l, "# ")
				}
			default:
				cmds = append(cmds, readmeCommand{file: page, section: section, line: start + j + 1, args: shellWords(t, l)})
				afterCommand = true
			}
		}
		out = append(out, cmds...)
	}
	return out
}

// TestREADMEQueryExamples: the query examples of README.md and of the
// pages of docs/, run against a live host (the C router's fold "routes",
// the admin service of node n1, as the docs say their examples assume):
// the routes their blocks write are put first (a route written by several
// blocks once), then every curl and nats req runs and answers exactly the
// body the comment under it gives (a command with none must succeed), and
// a put's comment, when it has one, is what foldhost kv put prints for it
// (its revision included); each nats req also runs as written through the
// nats CLI ($FOLDHOST_NATS_CLI), which must print the same body. The
// README's tour, the HTTP API's section and the one on NATS must each
// have examples; a command the test cannot run fails it, so the docs
// cannot drift from what the host answers. Mutations caught: an answer
// changed in a page; the NATS endpoint's subject renamed in the code; an
// example's --raw dropped (the CLI then prints more than the body); a
// put's revision in the tour changed.
func TestREADMEQueryExamples(t *testing.T) {
	cmds := readmeQueryExamples(t)
	r, b, url := queryHost(t)
	f := r.H.Fold("routes")
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	c := hosttest.Conn(t, url)
	var rev uint64
	runs := map[string]int{}
	revs := map[[2]string]uint64{} // a route's key and value: its revision
	for _, cmd := range cmds {
		if isRoutePut(cmd.args) {
			kv := [2]string{cmd.args[len(cmd.args)-2], cmd.args[len(cmd.args)-1]}
			if revs[kv] == 0 {
				revs[kv] = hosttest.Put(t, b, kv[0], kv[1])
				rev = max(rev, revs[kv])
			}
		}
	}
	if rev == 0 {
		t.Fatal("the docs' query examples write no route")
	}
	hosttest.WaitCursor(t, f, rev)
	for _, cmd := range cmds {
		where := fmt.Sprintf("%s:%d (%s): %s", cmd.file, cmd.line, cmd.section, strings.Join(cmd.args, " "))
		var got queryReply
		switch cmd.args[0] {
		case "./foldhost":
			if !isRoutePut(cmd.args) {
				t.Errorf("%s: not a put the test runs", where)
			} else if cmd.want != "" {
				checkPutAnswer(t, where, cmd, revs)
			}
			runs[cmd.file+": "+cmd.section+" "+cmd.args[0]]++
			continue
		case "curl":
			method, body, target := "GET", "", ""
			for i := 1; i < len(cmd.args); i++ {
				switch a := cmd.args[i]; {
				case a == "-X" && i+1 < len(cmd.args):
					i++
					method = cmd.args[i]
				case (a == "--data" || a == "-d") && i+1 < len(cmd.args):
					i++
					body = cmd.args[i]
				case a == "-s":
				case strings.HasPrefix(a, "http://127.0.0.1:8080/") && target == "":
					target = web.URL + strings.TrimPrefix(a, "http://127.0.0.1:8080")
				default:
					t.Fatalf("%s: the test cannot run %q", where, a)
				}
			}
			got = doQuery(t, method, target, body)
		case "nats":
			hdr := map[string]string{}
			var rest []string
			for i := 2; i < len(cmd.args); i++ {
				switch a := cmd.args[i]; {
				case a == "--raw":
				case a == "-H" && i+1 < len(cmd.args):
					i++
					k, v, ok := strings.Cut(cmd.args[i], ":")
					if !ok {
						t.Fatalf("%s: header %q is not K:V", where, cmd.args[i])
					}
					hdr[k] = v
				case strings.HasPrefix(a, "-"):
					t.Fatalf("%s: the test cannot run %q", where, a)
				default:
					rest = append(rest, a)
				}
			}
			if cmd.args[1] != "req" || len(rest) != 2 {
				t.Fatalf("%s: want nats req [--raw] [-H K:V]... SUBJECT PAYLOAD", where)
			}
			got = natsQuery(t, c, rest[0], rest[1], hdr)
			// The command itself, run by the nats CLI: its flags mean
			// what the Go client's request above does, and it shows the
			// answer alone.
			if out := runNATSCLI(t, url, cmd.args[1:]); strings.TrimSpace(out) != strings.TrimSpace(got.body) {
				t.Errorf("%s: the nats CLI printed\n%s\nthe request answers\n%s", where, out, got.body)
			}
		default:
			t.Fatalf("%s: the test cannot run %s", where, cmd.args[0])
		}
		runs[cmd.file+": "+cmd.section+" "+cmd.args[0]]++
		switch {
		case cmd.want == "" && got.code != 200:
			t.Errorf("%s: %d %s, want success", where, got.code, got.body)
		case cmd.want != "" && !elided(cmd.want, strings.TrimSpace(got.body)):
			t.Errorf("%s:\n got %s\nwant %s", where, strings.TrimSpace(got.body), cmd.want)
		}
	}
	for _, want := range []string{
		"README.md: 2. Write, then read your writes curl",
		"docs/api.md: Queries over HTTP curl",
		"docs/api.md: Queries over NATS nats",
		"docs/plugins.md: Plugin queries curl",
	} {
		if runs[want] == 0 {
			t.Errorf("no query example under %q: ran %v", want, runs)
		}
	}
}

// checkPutAnswer: the comment under a route put (cmd.want) is the JSON
// foldhost kv put prints for it, the bucket "routes", the key it put and
// the revision the test's put of it got.
func checkPutAnswer(t *testing.T, where string, cmd readmeCommand, revs map[[2]string]uint64) {
	t.Helper()
	var got struct {
		Bucket   string `json:"bucket"`
		Key      string `json:"key"`
		Revision uint64 `json:"revision"`
	}
	dec := json.NewDecoder(strings.NewReader(cmd.want))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Errorf("%s: its answer is not what foldhost kv put prints: %v\n%s", where, err, cmd.want)
		return
	}
	key, value := cmd.args[len(cmd.args)-2], cmd.args[len(cmd.args)-1]
	if want := revs[[2]string{key, value}]; got.Bucket != "routes" || got.Key != key || got.Revision != want {
		t.Errorf("%s: the answer says bucket %q, key %q, revision %d; the put wrote %q at revision %d of routes", where, got.Bucket, got.Key, got.Revision, key, want)
	}
}

// isRoutePut: args are ./foldhost kv --config config.toml --fold routes put KEY VALUE.
func isRoutePut(args []string) bool {
	return len(args) == 9 && strings.Join(args[:7], " ") == "./foldhost kv --config config.toml --fold routes put"
}

// elided reports whether got is want, each "…" of want standing for any
// text.
func elided(want, got string) bool {
	parts := strings.Split(want, "…")
	if !strings.HasPrefix(got, parts[0]) {
		return false
	}
	got = got[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(got, p)
		}
		k := strings.Index(got, p)
		if k < 0 {
			return false
		}
		got = got[k+len(p):]
	}
	return got == ""
}

// natsCLIInstall is how to get the nats CLI the docs' examples use
// (scripts/test does it).
const natsCLIInstall = `(from the repository root) GOBIN="$PWD/bin" go install github.com/nats-io/natscli/nats@v0.5.0 && export FOLDHOST_NATS_CLI="$PWD/bin/nats"`

// runNATSCLI runs the nats CLI ($FOLDHOST_NATS_CLI) with args against the
// server at url, with a scratch home (no user context applies), and
// returns what it printed, stdout and stderr together, as a terminal
// shows it.
func runNATSCLI(t testing.TB, url string, args []string) string {
	t.Helper()
	bin := os.Getenv("FOLDHOST_NATS_CLI")
	if bin == "" {
		t.Fatalf("FOLDHOST_NATS_CLI is not set: the docs' nats examples run through the nats CLI; install it: %s", natsCLIInstall)
	}
	cmd := exec.Command(bin, append([]string{"--server", url}, args...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", bin, strings.Join(args, " "), err, out)
	}
	return string(out)
}
