package plugincheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/internal/kvwrite"
	"github.com/foldhost/foldhost/protocol"
)

// The fixture format of `foldhost plugin test` (docs/plugins.md,
// "Fixtures"; RATIONALE.md, "Plugin fixtures"): JSON lines, one thing per
// line, so that a changed expectation is a one-line diff.
//
//	{"fixture":"NAME"}                  starts a fixture (optional for a file of one)
//	{"key":"K","value":"V"}             an update, as `foldhost kv put` reads it
//	{"key":"K","op":"delete"}           (key_b64, value_b64; a JSON value: its text)
//	{"batch":"NAME"}                    ends a batch; what follows is expected after it
//	{"view":"K","value":"V"}            (view_b64, value_b64; listed views: "absent":true)
//	{"effect":"SUBJECT","update":N,"headers":[["H","V"]],"payload":"P"}
//	{"dead_letter":"K","update":N,"error":"guest-error: MESSAGE"}
//	{"rejected":N}
//	{"query":"NAME","input":"I","answer":"A"}  (or "refused":"MESSAGE", "failed":"KIND")
//
// A batch line may say what it checks ("check": a list of views, effects,
// dead_letters, rejected; default all of them) and that only the listed
// views are checked ("views":"listed"). Lines starting with # and empty
// lines are comments.

// The categories a batch line's "check" selects.
const (
	checkViews       = "views"
	checkEffects     = "effects"
	checkDeadLetters = "dead_letters"
	checkRejected    = "rejected"
)

var allChecks = []string{checkViews, checkEffects, checkDeadLetters, checkRejected}

// fixtureTime is the message time of a fixture's update of revision 1
// (Unix nanoseconds, 2023-11-14T22:13:20Z); each later one is a
// nanosecond later.
const fixtureTime = 1_700_000_000_000_000_000

// A fixtureFile is a parsed fixture file, its lines kept for --update.
type fixtureFile struct {
	path     string
	lines    []string // without their line ends
	final    bool     // the last line ends in a newline
	fixtures []*fixture
}

// A fixture is one fold's history: batches of updates folded into an
// empty store, and what to expect after each.
type fixture struct {
	file    *fixtureFile
	name    string // "" for a file's one unnamed fixture
	line    int    // its fixture line, 1-based; 0 without one
	batches []*batch
	updates int
}

// label names the fixture in output: its file, and its name if it has one.
func (fx *fixture) label() string {
	if fx.name == "" {
		return fx.file.path
	}
	return fx.file.path + ": " + fx.name
}

// A batch is a fixture's updates up to a batch line, and what its
// expectation lines say.
type batch struct {
	name    string
	line    int // its batch line; 0: updates after the last one (nothing checked)
	end     int // the line after its expectation block (1-based)
	updates []fold.Update
	checks  []string
	listed  bool // views: only the listed keys are checked
	want    expect
}

func (b *batch) checks1(c string) bool { return slices.Contains(b.checks, c) }

// expect is what a batch expects, or what it produced.
type expect struct {
	views    []viewLine
	effects  []effectLine
	dead     []deadLine
	rejected int
	queries  []queryLine
}

type viewLine struct {
	key, value []byte
	absent     bool
}

type effectLine struct {
	subject string
	update  uint64
	headers [][2]string
	payload []byte
}

type deadLine struct {
	key    []byte
	update uint64
	err    string
}

type queryLine struct {
	name          string
	input, answer []byte
	refused       *string
	failed        string
}

// The lines of what a batch expects, canonical: the same bytes whatever
// the spelling of the line they were read from (text or _b64, key order,
// spaces), and what --update writes.

// MaxFixtureBytes bounds a fixture file.
const MaxFixtureBytes = 256 << 20

// readFixtures reads and parses the fixture file at path: a regular file
// of at most MaxFixtureBytes.
func readFixtures(path string) (*fixtureFile, error) {
	b, err := files.ReadRegular(path, MaxFixtureBytes)
	if err != nil {
		return nil, fmt.Errorf("fixture %s: %w", path, err)
	}
	return parseFixtures(path, b)
}

// maxFixtureUpdates bounds a fixture's updates (its revisions are its
// updates' ordinals).
const maxFixtureUpdates = 1 << 30

// parseFixtures parses data, the fixture file at path. An error names the
// line.
func parseFixtures(path string, data []byte) (*fixtureFile, error) {
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	f := &fixtureFile{path: path, final: strings.HasSuffix(text, "\n")}
	if text != "" {
		f.lines = strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	}
	var fx *fixture
	var open *batch // updates not yet ended by a batch line
	var last *batch // the batch whose expectation block the lines are in
	bad := func(n int, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", path, n, fmt.Sprintf(format, args...))
	}
	closeBlock := func(n int) {
		if last != nil {
			last.end = n
			last = nil
		}
	}
	for i, line := range f.lines {
		n := i + 1
		if isComment(line) {
			continue
		}
		kind, fields, err := classify([]byte(line))
		if err != nil {
			return nil, bad(n, "%v", err)
		}
		switch kind {
		case "fixture":
			if fx != nil && fx.line == 0 {
				return nil, bad(n, "a fixture line after lines of an unnamed fixture: start the file with a fixture line")
			}
			closeBlock(n)
			if err := endFixture(fx, open); err != nil {
				return nil, err
			}
			open = nil
			fx = &fixture{file: f, line: n}
			if err := fields.text("fixture", &fx.name); err != nil {
				return nil, bad(n, "%v", err)
			}
			if err := fields.done(); err != nil {
				return nil, bad(n, "%v", err)
			}
			f.fixtures = append(f.fixtures, fx)
		case "update":
			closeBlock(n)
			if fx == nil {
				fx = &fixture{file: f}
				f.fixtures = append(f.fixtures, fx)
			}
			w, skip, err := kvwrite.Parse([]byte(line))
			if err != nil || skip {
				return nil, bad(n, "not a fixture line: %v (an update is a JSON object with key or key_b64, as 'foldhost kv put' reads it)", err)
			}
			if fx.updates >= maxFixtureUpdates {
				return nil, bad(n, "more than %d updates", maxFixtureUpdates)
			}
			if open == nil {
				open = &batch{}
			}
			fx.updates++
			u := fold.Update{Key: w.Key, Value: w.Value, Op: fold.OpPut, Rev: protocol.Revision(fx.updates), Time: fixtureTime + int64(fx.updates)}
			switch w.Op {
			case "delete":
				u.Op, u.Value = fold.OpDelete, nil
			case "purge":
				u.Op, u.Value = fold.OpPurge, nil
			}
			open.updates = append(open.updates, u)
		case "batch":
			if open == nil {
				return nil, bad(n, "a batch line without updates before it (since the fixture's start or the last batch line)")
			}
			closeBlock(n)
			b := open
			open = nil
			b.line = n
			if err := parseBatchLine(fields, b); err != nil {
				return nil, bad(n, "%v", err)
			}
			fx.batches = append(fx.batches, b)
			last = b
		default:
			if last == nil {
				return nil, bad(n, "a %s line must follow a batch line (it says what is expected after that batch)", kind)
			}
			if err := parseExpectation(kind, fields, last); err != nil {
				return nil, bad(n, "%v", err)
			}
		}
	}
	closeBlock(len(f.lines) + 1)
	if err := endFixture(fx, open); err != nil {
		return nil, err
	}
	if len(f.fixtures) == 0 {
		return nil, fmt.Errorf("%s: no fixture (no update line)", path)
	}
	return f, nil
}

// endFixture ends fx: updates after its last batch line fold as a last
// batch that checks nothing.
func endFixture(fx *fixture, open *batch) error {
	if fx == nil {
		return nil
	}
	if open != nil {
		open.end = -1
		fx.batches = append(fx.batches, open)
	}
	if fx.updates == 0 {
		return fmt.Errorf("%s:%d: fixture %q has no update", fx.file.path, fx.line, fx.name)
	}
	return nil
}

// kinds are the fixture line kinds with the fields that name them; any
// other JSON object is an update.
var kinds = []struct{ kind, field, b64 string }{
	{"fixture", "fixture", ""},
	{"batch", "batch", ""},
	{"view", "view", "view_b64"},
	{"effect", "effect", ""},
	{"dead_letter", "dead_letter", "dead_letter_b64"},
	{"rejected", "rejected", ""},
	{"query", "query", ""},
}

// classify tells line's kind.
func classify(line []byte) (string, *fieldSet, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return "", nil, fmt.Errorf("not a JSON object: %w", err)
	}
	kind := ""
	for _, k := range kinds {
		_, a := m[k.field]
		_, b := m[k.b64]
		if (a || b) && kind != "" {
			return "", nil, fmt.Errorf("a line of two kinds, %s and %s", kind, k.kind)
		}
		if a || b {
			kind = k.kind
		}
	}
	if kind == "" {
		kind = "update"
	}
	return kind, &fieldSet{m: m, used: map[string]bool{}}, nil
}

func parseBatchLine(f *fieldSet, b *batch) error {
	var views string
	err := errors.Join(f.text("batch", &b.name), f.text("views", &views))
	b.checks = slices.Clone(allChecks)
	if raw, ok := f.take("check"); ok {
		b.checks = nil
		if e := json.Unmarshal(raw, &b.checks); e != nil {
			err = errors.Join(err, fmt.Errorf(`"check": want a list of %s`, strings.Join(allChecks, ", ")))
		}
		for _, c := range b.checks {
			if !slices.Contains(allChecks, c) {
				err = errors.Join(err, fmt.Errorf(`"check": %q is not one of %s`, c, strings.Join(allChecks, ", ")))
			}
		}
	}
	switch views {
	case "", "all":
	case "listed":
		b.listed = true
	default:
		err = errors.Join(err, fmt.Errorf(`"views": %q: want "all" (the whole view is listed) or "listed" (only the listed keys are checked)`, views))
	}
	return errors.Join(err, f.done())
}

// parseExpectation adds the expectation line of kind (its fields f) to b.
func parseExpectation(kind string, f *fieldSet, b *batch) error {
	if kind != "query" && !b.checks1(map[string]string{"view": checkViews, "effect": checkEffects, "dead_letter": checkDeadLetters, "rejected": checkRejected}[kind]) {
		return fmt.Errorf("a %s line after a batch line whose \"check\" leaves them out", kind)
	}
	var err error
	switch kind {
	case "view":
		var v viewLine
		var key, value []byte
		err = errors.Join(f.bytes("view", &key), f.bytes("value", &value), f.boolean("absent", &v.absent))
		v.key, v.value = key, value
		switch {
		case key == nil:
		case v.absent && !b.listed:
			err = errors.Join(err, errors.New(`"absent" is for listed views ("views":"listed" on the batch line): the whole view is listed otherwise`))
		case v.absent && value != nil:
			err = errors.Join(err, errors.New(`a view is either "absent" or has a value`))
		case !v.absent && value == nil:
			err = errors.Join(err, errors.New(`no "value" or "value_b64"`))
		}
		if slices.ContainsFunc(b.want.views, func(w viewLine) bool { return bytes.Equal(w.key, key) }) {
			err = errors.Join(err, fmt.Errorf("view %q is listed twice", key))
		}
		b.want.views = append(b.want.views, v)
	case "effect":
		var e effectLine
		err = errors.Join(f.text("effect", &e.subject), f.uint("update", &e.update), f.bytes("payload", &e.payload))
		if raw, ok := f.take("headers"); ok {
			if e2 := json.Unmarshal(raw, &e.headers); e2 != nil {
				err = errors.Join(err, errors.New(`"headers": want a list of [name, value] pairs`))
			}
		}
		if e.payload == nil {
			e.payload = []byte{}
		}
		b.want.effects = append(b.want.effects, e)
	case "dead_letter":
		var d deadLine
		err = errors.Join(f.bytes("dead_letter", &d.key), f.uint("update", &d.update), f.text("error", &d.err))
		b.want.dead = append(b.want.dead, d)
	case "rejected":
		var n uint64
		err = f.uint("rejected", &n)
		b.want.rejected = int(min(n, 1<<31))
	case "query":
		var q queryLine
		var refused string
		_, hasRefused := f.m["refused"]
		err = errors.Join(f.text("query", &q.name), f.bytes("input", &q.input), f.bytes("answer", &q.answer),
			f.text("refused", &refused), f.text("failed", &q.failed))
		if hasRefused {
			q.refused = &refused
		}
		if q.input == nil {
			q.input = []byte{}
		}
		b.want.queries = append(b.want.queries, q)
	}
	return errors.Join(err, f.done())
}

// fieldSet reads a line's fields, and refuses the ones not read.
type fieldSet struct {
	m    map[string]json.RawMessage
	used map[string]bool
}

func (f *fieldSet) take(name string) (json.RawMessage, bool) {
	raw, ok := f.m[name]
	f.used[name] = true
	return raw, ok
}

func (f *fieldSet) text(name string, dst *string) error {
	if raw, ok := f.take(name); ok && json.Unmarshal(raw, dst) != nil {
		return fmt.Errorf("%q: want a string", name)
	}
	return nil
}

func (f *fieldSet) uint(name string, dst *uint64) error {
	if raw, ok := f.take(name); ok && json.Unmarshal(raw, dst) != nil {
		return fmt.Errorf("%q: want a whole number", name)
	}
	return nil
}

func (f *fieldSet) boolean(name string, dst *bool) error {
	if raw, ok := f.take(name); ok && json.Unmarshal(raw, dst) != nil {
		return fmt.Errorf("%q: want true or false", name)
	}
	return nil
}

// bytes reads name, as text or as name_b64 (nil when neither is there).
func (f *fieldSet) bytes(name string, dst *[]byte) error {
	var text, b64 *string
	for _, p := range []struct {
		k string
		v **string
	}{{name, &text}, {name + "_b64", &b64}} {
		var s string
		if raw, ok := f.take(p.k); ok {
			if json.Unmarshal(raw, &s) != nil {
				return fmt.Errorf("%q: want a string", p.k)
			}
			*p.v = &s
		}
	}
	b, err := kvwrite.TextOrB64(name, text, b64)
	*dst = b
	return err
}

// done refuses the fields no reader took.
func (f *fieldSet) done() error {
	var extra []string
	for k := range f.m {
		if !f.used[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	slices.Sort(extra)
	return fmt.Errorf("unknown field %q", extra)
}
