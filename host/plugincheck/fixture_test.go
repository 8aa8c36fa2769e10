package plugincheck

import (
	"strings"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
)

// fixtureText uses every kind of line, in the spellings a person writes
// (key order, _b64 forms, a JSON value, comments).
const fixtureText = `# a comment
{"fixture":"first"}
{"key":"a","value":"1"}
{"key_b64":"/wA=","value":{"n":1}}
{"batch":"two puts"}
# the view after it
{"value":"1","view":"a"}
{"view_b64":"/wA=","value":"{\"n\":1}"}
{"effect":"changed","update":1,"headers":[["H","v"]],"payload":"a"}
{"dead_letter":"x","update":2,"error":"guest-error: no"}
{"rejected":1}
{"query":"get","input":"a","answer":"1"}
{"query":"get","input_b64":"/w==","refused":"no such key"}
{"key":"a","op":"delete"}
{"key":"b","op":"purge"}
{"batch":"a delete","check":["views"],"views":"listed"}
{"view":"a","absent":true}
# before the next fixture
{"fixture":"second"}
{"key":"c","value":""}
`

// TestFixtureParse: every line kind reads into the fixture it says, in
// canonical lines (text where it is UTF-8, _b64 otherwise; a fixed key
// order), with revisions numbered across batches; the trailing updates of
// a fixture without a batch line fold as a batch that checks nothing.
func TestFixtureParse(t *testing.T) {
	f, err := parseFixtures("f.jsonl", []byte(fixtureText))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.fixtures) != 2 || f.fixtures[0].name != "first" || f.fixtures[0].updates != 4 {
		t.Fatalf("fixtures: %+v", f.fixtures)
	}
	b1, b2 := f.fixtures[0].batches[0], f.fixtures[0].batches[1]
	if b1.name != "two puts" || b1.line != 5 || b1.end != 14 || len(b1.updates) != 2 || b1.updates[1].Key != "\xff\x00" ||
		string(b1.updates[1].Value) != `{"n":1}` || b1.updates[1].Rev != 2 || b1.updates[1].Time != fixtureTime+2 {
		t.Fatalf("batch 1: %+v", b1)
	}
	want := []string{
		`{"view":"a","value":"1"}`, `{"view_b64":"/wA=","value":"{\"n\":1}"}`,
		`{"effect":"changed","update":1,"headers":[["H","v"]],"payload":"a"}`,
		`{"dead_letter":"x","update":2,"error":"guest-error: no"}`, `{"rejected":1}`,
		`{"query":"get","input":"a","answer":"1"}`, `{"query":"get","input_b64":"/w==","refused":"no such key"}`,
	}
	if got := b1.lines(b1.want); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("batch 1's lines:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !b2.listed || len(b2.checks) != 1 || b2.updates[0].Op != fold.OpDelete || b2.updates[1].Op != fold.OpPurge || b2.updates[1].Rev != 4 {
		t.Errorf("batch 2: %+v", b2)
	}
	if got := b2.lines(b2.want); len(got) != 1 || got[0] != `{"view":"a","absent":true}` {
		t.Errorf("batch 2's lines: %q", got)
	}
	second := f.fixtures[1]
	if len(second.batches) != 1 || second.batches[0].line != 0 || second.batches[0].updates[0].Rev != 1 {
		t.Errorf("the second fixture: %+v", second.batches)
	}
}

// TestFixtureParseErrors: what is no fixture is refused, naming the line
// and what is wrong with it.
func TestFixtureParseErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`{"batch":"x"}`, `:1: a batch line without updates before it`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"view\":\"a\",\"value\":\"1\"}", `:2: a view line must follow a batch line`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"b\",\"check\":[\"effects\"]}\n{\"view\":\"a\",\"value\":\"1\"}", `:3: a view line after a batch line whose "check" leaves them out`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"b\"}\n{\"view\":\"a\",\"absent\":true}", `"absent" is for listed views`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"b\"}\n{\"view\":\"a\",\"valeu\":\"1\"}", `unknown field ["valeu"]`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"b\"}\n{\"view\":\"a\",\"value\":\"1\"}\n{\"view\":\"a\",\"value\":\"2\"}", `view "a" is listed twice`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"b\",\"check\":[\"viewz\"]}", `"check": "viewz" is not one of views, effects, dead_letters, rejected`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"b\",\"views\":\"some\"}", `"views": "some"`},
		{`{"key":"a"}`, `:1: not a fixture line: no "value" or "value_b64"`},
		{`{"kye":"a","value":"1"}`, `:1: not a fixture line: no "key" or "key_b64"`},
		{`a=1`, `:1: not a JSON object`},
		{`{"view":"a","effect":"b"}`, `:1: a line of two kinds, view and effect`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"fixture\":\"late\"}", `:2: a fixture line after lines of an unnamed fixture`},
		{"{\"fixture\":\"empty\"}\n{\"fixture\":\"next\"}\n{\"key\":\"a\",\"value\":\"1\"}", `:1: fixture "empty" has no update`},
		{"# only a comment\n", `no fixture`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"b\"}\n{\"rejected\":-1}", `"rejected": want a whole number`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"b\"}\n{\"effect\":\"s\",\"headers\":[\"H\"]}", `"headers": want a list of [name, value] pairs`},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"b\"}\n{\"view\":\"a\",\"value_b64\":\"!\"}", `value_b64 is not base64`},
	} {
		_, err := parseFixtures("f.jsonl", []byte(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "f.jsonl") {
			t.Errorf("%q: %v, want an error with %q", c.text, err, c.want)
		}
	}
}

// TestFixtureRewrite: --update's rewrite replaces each checked batch's
// expectation lines with what was produced and keeps everything else:
// comments (those before a block's last expectation stay above the new
// lines, those after it below), updates, batch lines, query inputs;
// rewriting what was read gives the canonical file, and a second rewrite
// changes nothing.
func TestFixtureRewrite(t *testing.T) {
	f, err := parseFixtures("f.jsonl", []byte(fixtureText))
	if err != nil {
		t.Fatal(err)
	}
	b1, b2 := f.fixtures[0].batches[0], f.fixtures[0].batches[1]
	got := map[*batch]expect{
		b1: {views: []viewLine{{key: []byte("a"), value: []byte("2")}}, rejected: 0,
			queries: []queryLine{{name: "get", input: []byte("a"), answer: []byte("2")}, {name: "get", input: []byte{0xff}, failed: "trap"}}},
		b2: {views: []viewLine{{key: []byte("a"), value: []byte("x")}}},
	}
	out := string(f.rewrite(got))
	want := `# a comment
{"fixture":"first"}
{"key":"a","value":"1"}
{"key_b64":"/wA=","value":{"n":1}}
{"batch":"two puts"}
# the view after it
{"view":"a","value":"2"}
{"query":"get","input":"a","answer":"2"}
{"query":"get","input_b64":"/w==","failed":"trap"}
{"key":"a","op":"delete"}
{"key":"b","op":"purge"}
{"batch":"a delete","check":["views"],"views":"listed"}
{"view":"a","value":"x"}
# before the next fixture
{"fixture":"second"}
{"key":"c","value":""}
`
	if out != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", out, want)
	}
	again, err := parseFixtures("f.jsonl", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	wants := map[*batch]expect{}
	for _, fx := range again.fixtures {
		for _, b := range fx.batches {
			wants[b] = b.want
		}
	}
	if twice := string(again.rewrite(wants)); twice != out {
		t.Errorf("a second rewrite changed the file:\n%s", twice)
	}
}

// TestLineDiff: the lines only expected are marked -, those only produced
// +, in order; equal lists have no diff; a long diff is cut.
func TestLineDiff(t *testing.T) {
	if d := lineDiff([]string{"a", "b"}, []string{"a", "b"}); d != "" {
		t.Errorf("equal: %q", d)
	}
	if d := lineDiff([]string{"a", "b", "c"}, []string{"a", "x", "c", "d"}); d != "    - b\n    + x\n    + d\n" {
		t.Errorf("diff: %q", d)
	}
	var many []string
	for range 30 {
		many = append(many, "z")
	}
	if d := lineDiff(nil, many); !strings.Contains(d, "… 10 more") {
		t.Errorf("a long diff: %q", d)
	}
}

// FuzzFixtures: whatever the bytes, parsing does not panic, and a file
// that parses rewrites (its own expectations written back) to a file
// that parses to the same canonical lines, which rewrites to itself.
func FuzzFixtures(f *testing.F) {
	f.Add([]byte(fixtureText))
	f.Add([]byte("{\"key\":\"a\",\"value\":\"1\"}\n{\"batch\":\"\"}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ff, err := parseFixtures("f", data)
		if err != nil {
			return
		}
		own := func(ff *fixtureFile) (map[*batch]expect, []string) {
			m := map[*batch]expect{}
			var lines []string
			for _, fx := range ff.fixtures {
				for _, b := range fx.batches {
					if b.line > 0 {
						m[b] = b.want
						lines = append(lines, b.lines(b.want)...)
					}
				}
			}
			return m, lines
		}
		m, lines := own(ff)
		out := ff.rewrite(m)
		again, err := parseFixtures("f", out)
		if err != nil {
			t.Fatalf("a rewrite does not parse: %v\n%s", err, out)
		}
		m2, lines2 := own(again)
		if strings.Join(lines, "\n") != strings.Join(lines2, "\n") {
			t.Fatalf("the rewrite's lines differ:\n%q\n%q", lines, lines2)
		}
		if twice := again.rewrite(m2); string(twice) != string(out) {
			t.Fatalf("a second rewrite differs:\n%s\n%s", out, twice)
		}
	})
}
