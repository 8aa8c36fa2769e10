package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/internal/command"
)

// routerFixtures are the example router's fixtures: its conformance
// tables (views, effects) and its queries, written by hand from SPEC.md.
func routerFixtures(t *testing.T) []string {
	t.Helper()
	fs, err := filepath.Glob(filepath.Join(repoRoot(t), "plugins", "example-router", "fixtures", "*.jsonl"))
	if err != nil || len(fs) != 3 {
		t.Fatalf("the router's fixtures: %v %v", fs, err)
	}
	return fs
}

// TestRouterFixtures: every build of the example router folds its
// fixtures (the conformance tables of views and effects, the queries) to
// exactly what they say, byte for byte, through 'foldhost plugin test',
// in the fixtures' own batches and in batches of one (replicas batch as
// they please). The tables were the host/wasm conformance tests' JSON.
func TestRouterFixtures(t *testing.T) {
	fixtures := routerFixtures(t)
	for _, lang := range []string{"c", "as", "rust", "go"} {
		t.Run(lang, func(t *testing.T) {
			build := builtPlugin(t, "example-router", "router-"+lang)
			for _, size := range []string{"0", "1"} {
				code, out, errOut := runCLI(t, nil, append([]string{"plugin", "test", "--batch-size", size, build}, fixtures...)...)
				if code != command.ExitOK || strings.Count(out, "\nPASS ") != 33+11+1 || strings.Contains(out, "FAIL") {
					t.Errorf("--batch-size %s: exit %d\n%s\n%s", size, code, out, errOut)
				}
			}
		})
	}
}

// probeFixture drives probe-c.wasm (plugins/testdata/c/probe.c: each key
// is a command) through every kind of expectation: views (a binary key
// too, the whole view and listed keys), an effect filed per batch and one
// naming its update, a rejection, a dead letter.
const probeFixture = `# probe-c.wasm: each key is a command (plugins/testdata/c/probe.c)
{"key":"w/a","value":"1"}
{"key_b64":"dy//","value":"bin"}
{"key":"emit/s.one","value":"p1"}
{"key":"reject-me","value":"x"}
{"batch":"views, an effect filed per batch, a rejection"}
{"view":"a","value":"1"}
{"view_b64":"/w==","value":"bin"}
{"effect":"s.one","payload":"p1"}
{"rejected":1}
{"key":"fail","value":"boom"}
{"key":"w/b","value":"2"}
{"batch":"an update the plugin fails: a dead letter"}
{"view":"a","value":"1"}
{"view":"b","value":"2"}
{"view_b64":"/w==","value":"bin"}
{"dead_letter":"fail","update":5,"error":"guest-error: boom"}
{"key":"w/c","value":"3"}
{"key":"emitfor/0/s.two","value":"p2"}
{"batch":"an effect naming the batch's first update","views":"listed"}
{"view":"c","value":"3"}
{"effect":"s.two","update":7,"payload":"p2"}
`

// TestPluginTestChecksEachKind: plugin test passes a fixture that says
// what the module folds; a changed expectation of each kind fails it
// (exit 1) with a diff of that kind's lines and a FAIL line; --update
// rewrites the expectations back; in batches of one, the effect that
// names the first update of its batch names another update, and fails.
func TestPluginTestChecksEachKind(t *testing.T) {
	probe := builtPlugin(t, "testdata", "probe-c")
	file := filepath.Join(t.TempDir(), "probe.jsonl")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(probeFixture)
	if code, out, errOut := runCLI(t, nil, "plugin", "test", probe, file); code != command.ExitOK || !strings.Contains(out, "PASS "+file+": 3 batches, 8 updates\n") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, c := range []struct{ from, to, diff string }{
		{`{"view":"b","value":"2"}`, `{"view":"b","value":"3"}`, "views differ (- expected, + produced):\n    - {\"view\":\"b\",\"value\":\"3\"}\n    + {\"view\":\"b\",\"value\":\"2\"}\n"},
		{`{"effect":"s.one","payload":"p1"}`, `{"effect":"s.one","payload":"p0"}`, `+ {"effect":"s.one","payload":"p1"}`},
		{`{"rejected":1}`, `{"rejected":2}`, "rejected updates differ"},
		{`"error":"guest-error: boom"`, `"error":"guest-error: bang"`, "update 5 failed: wasm plugin"},
		{`{"view":"c","value":"3"}`, `{"view":"c","absent":true}`, `+ {"view":"c","value":"3"}`},
	} {
		write(strings.Replace(probeFixture, c.from, c.to, 1))
		code, out, errOut := runCLI(t, nil, "plugin", "test", probe, file)
		if code != command.ExitFailure || !strings.Contains(out, c.diff) || !strings.Contains(out, "FAIL "+file+": 1 of 3 batches differ") ||
			!strings.Contains(errOut, "1 of 1 fixtures failed") {
			t.Errorf("%s changed to %s: exit %d, want a diff with %q\n%s\n%s", c.from, c.to, code, c.diff, out, errOut)
		}
		if code, out, _ := runCLI(t, nil, "plugin", "test", "--update", probe, file); code != command.ExitOK || !strings.Contains(out, "UPDATED "+file+": 1 of 3 batches rewritten") {
			t.Errorf("--update: exit %d\n%s", code, out)
		}
		if b, _ := os.ReadFile(file); string(b) != probeFixture {
			t.Errorf("--update after %s wrote:\n%s", c.to, b)
		}
	}
	code, out, _ := runCLI(t, nil, "plugin", "test", "--batch-size", "1", probe, file)
	if code != command.ExitFailure || !strings.Contains(out, "    - {\"effect\":\"s.two\",\"update\":7,\"payload\":\"p2\"}\n    + {\"effect\":\"s.two\",\"update\":8,\"payload\":\"p2\"}\n") {
		t.Errorf("--batch-size 1: exit %d, want the named effect to differ:\n%s", code, out)
	}

	// What cannot run is said so: a fixture that does not parse, by line;
	// a module that does not load; no fixture.
	write("{\"key\":\"a\",\"value\":\"1\"}\n{\"view\":\"a\",\"value\":\"1\"}\n")
	if code, _, errOut := runCLI(t, nil, "plugin", "test", probe, file); code != command.ExitFailure || !strings.Contains(errOut, file+":2: a view line must follow a batch line") {
		t.Errorf("a bad fixture: exit %d: %s", code, errOut)
	}
	write(probeFixture)
	if code, out, _ := runCLI(t, nil, "plugin", "test", builtPlugin(t, "testdata", "noexport"), file); code != command.ExitFailure || !strings.Contains(out, "FAIL load") {
		t.Errorf("a module that does not load: exit %d: %s", code, out)
	}
	if code, _, errOut := runCLI(t, nil, "plugin", "test", probe, "/dev/zero"); code != command.ExitFailure || !strings.Contains(errOut, "fixture /dev/zero: ") ||
		!strings.Contains(errOut, "not a regular file") {
		t.Errorf("a device as fixture: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "plugin", "test", probe); code != command.ExitUsage || !strings.Contains(errOut, "want: plugin test FILE FIXTURE...") {
		t.Errorf("no fixture: exit %d: %s", code, errOut)
	}
}

// TestPluginCall: plugin call answers a query of a module over the updates
// of a fixture (or an empty store), with the input from a flag, a file or
// stdin; a refusal, an unknown query and a file of several fixtures exit 1
// saying so.
func TestPluginCall(t *testing.T) {
	router := builtPlugin(t, "example-router", "router-c")
	queries := filepath.Join(repoRoot(t), "plugins", "example-router", "fixtures", "queries.jsonl")
	code, out, errOut := runCLI(t, nil, "plugin", "call", router, "hosts_of_upstream", "--input", "10.0.0.2:80", "--fixture", queries)
	if code != command.ExitOK || out != `{"upstream":"10.0.0.2:80","hosts":["a"]}` {
		t.Errorf("call over the fixture: exit %d: %q %s", code, out, errOut)
	}
	code, out, errOut = runCLIStdin(t, "2", "plugin", "call", router, "top_upstreams", "--input-file", "-", "--fixture", queries)
	if code != command.ExitOK || out != `[{"addr":"10.0.0.1:80","hosts":1},{"addr":"10.0.0.2:80","hosts":1}]` {
		t.Errorf("the input from stdin: exit %d: %q %s", code, out, errOut)
	}
	// An input over the module's bound (plugin_max_query_input_kb, 1 MiB
	// by default) is refused before it runs.
	if code, _, errOut := runCLIStdin(t, strings.Repeat("x", 1<<20+1), "plugin", "call", router, "hosts_of_upstream", "--input-file", "-"); code != command.ExitFailure ||
		!strings.Contains(errOut, "query input of 1048577 bytes, over the limit of 1048576 (plugin_max_query_input_kb)") {
		t.Errorf("an input over the bound: exit %d: %s", code, errOut)
	}
	if code, out, errOut := runCLI(t, nil, "plugin", "call", router, "top_upstreams"); code != command.ExitOK || out != "[]" {
		t.Errorf("an empty store: exit %d: %q %s", code, out, errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"top_upstreams", "--input", "0"}, "query top_upstreams refused: wasm plugin"},
		{[]string{"nope"}, "no such query"},
		{[]string{"top_upstreams", "--fixture", routerFixtures(t)[0]}, "holds 11 fixtures: give a file of one"},
	} {
		code, _, errOut := runCLI(t, nil, append([]string{"plugin", "call", router}, c.args...)...)
		if code != command.ExitFailure || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want %q: %s", c.args, code, c.want, errOut)
		}
	}
	if code, _, errOut := runCLI(t, nil, "plugin", "call", router, "q", "--input", "x", "--input-file", "f"); code != command.ExitUsage {
		t.Errorf("--input and --input-file: exit %d: %s", code, errOut)
	}
}
