package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// The config is decoded into a generic TOML tree (toml.Decode into a map)
// and then read key by key through [table], instead of decoding into a
// struct: a struct decode stops at the first type mismatch, matches keys
// case-insensitively, and toml.MetaData.Undecoded names an unknown key
// inside [[fold]] without saying which fold. Reading the tree ourselves
// reports every problem at once, each with its exact key path
// (fold[1].batch_size) and, through locateKeys, its line.

// Problem is one thing wrong with a config.
type Problem struct {
	Key  string // key path, e.g. "fold[0].batch_size"; "" for the file as a whole
	Line int    // 1-based line in the file, 0 when unknown
	Env  string // the environment variable the value came from, if any
	Msg  string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		if p.Env != "" {
			fmt.Fprintf(&b, " (from $%s)", p.Env)
		}
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error lists every problem found in a config file.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	n := len(e.Problems)
	if n == 1 {
		fmt.Fprintf(&b, "config %s: %s", e.File, e.Problems[0])
		return b.String()
	}
	fmt.Fprintf(&b, "config %s: %d problems:", e.File, n)
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// problems collects Problems, attaching line numbers and environment
// sources by key path.
type problems struct {
	file    string
	lines   map[string]int    // key path -> line, from locateKeys
	fromEnv map[string]string // key path -> environment variable
	list    []Problem
}

func (ps *problems) add(key, format string, args ...any) {
	p := Problem{Key: key, Msg: fmt.Sprintf(format, args...)}
	if env, ok := ps.fromEnv[key]; ok {
		p.Env = env
	} else {
		p.Line = ps.line(key)
	}
	ps.list = append(ps.list, p)
}

// line finds the line of key, or of its nearest enclosing table.
func (ps *problems) line(key string) int {
	for k := key; k != ""; k = parentKey(k) {
		if l, ok := ps.lines[k]; ok {
			return l
		}
	}
	return 0
}

func parentKey(k string) string {
	if strings.HasSuffix(k, "]") {
		if i := strings.LastIndexByte(k, '['); i >= 0 {
			return k[:i]
		}
	}
	if i := strings.LastIndexByte(k, '.'); i >= 0 {
		return k[:i]
	}
	return ""
}

func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	// File order; problems without a line (environment, whole file) last.
	slices.SortStableFunc(ps.list, func(a, b Problem) int {
		la, lb := a.Line, b.Line
		if la == 0 {
			la = 1 << 30
		}
		if lb == 0 {
			lb = 1 << 30
		}
		return cmp.Compare(la, lb)
	})
	return &Error{File: ps.file, Problems: ps.list}
}

// document is a decoded TOML file.
type document struct {
	root     *table
	problems *problems
}

// decodeTOML parses data. A syntax error is returned alone (the parser
// stops at the first), as a *Error with its line.
func decodeTOML(data []byte, file string) (*document, error) {
	var m map[string]any
	if _, err := toml.Decode(string(data), &m); err != nil {
		p := Problem{Msg: err.Error()}
		var pe toml.ParseError
		if errors.As(err, &pe) {
			p = Problem{Line: pe.Position.Line, Msg: "syntax: " + pe.Message}
		}
		return nil, &Error{File: file, Problems: []Problem{p}}
	}
	ps := &problems{file: file, lines: locateKeys(string(data)), fromEnv: map[string]string{}}
	return &document{root: &table{m: m, ps: ps}, problems: ps}, nil
}

// table reads one TOML table, recording type errors and, in done, the keys
// nobody asked for.
type table struct {
	path  string
	m     map[string]any
	ps    *problems
	known []string
}

func (t *table) key(k string) string {
	if t.path == "" {
		return k
	}
	return t.path + "." + k
}

func (t *table) problem(k, format string, args ...any) { t.ps.add(t.key(k), format, args...) }

func (t *table) has(k string) bool {
	_, ok := t.m[k]
	return ok
}

func (t *table) get(k string) (any, bool) {
	t.known = append(t.known, k)
	v, ok := t.m[k]
	return v, ok
}

func (t *table) str(k string, dst *string) {
	if v, ok := t.get(k); ok {
		if s, ok := v.(string); ok {
			*dst = s
		} else {
			t.problem(k, "want a string, got %s", tomlType(v))
		}
	}
}

func (t *table) boolean(k string, dst *bool) {
	if v, ok := t.get(k); ok {
		if b, ok := v.(bool); ok {
			*dst = b
		} else {
			t.problem(k, "want true or false, got %s", tomlType(v))
		}
	}
}

// integer reports whether k is present and an integer.
func (t *table) integer(k string, dst *int64) bool {
	v, ok := t.get(k)
	if !ok {
		return false
	}
	i, ok := v.(int64)
	if !ok {
		t.problem(k, "want an integer, got %s", tomlType(v))
		return false
	}
	*dst = i
	return true
}

// duration reads a Go duration string ("10ms", "5s", "1h30m"). A bare
// integer is refused: TOML decoders read it as nanoseconds, which is never
// what "batch_window = 10" means.
// It reports whether k is present and a valid duration.
func (t *table) duration(k string, dst *time.Duration) bool {
	v, ok := t.get(k)
	if !ok {
		return false
	}
	s, ok := v.(string)
	if !ok {
		t.problem(k, "want a duration string such as \"10ms\", \"5s\" or \"1h\", got %s", tomlType(v))
		return false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.problem(k, "%q is not a duration: use a string such as \"10ms\", \"5s\" or \"1h\"", s)
		return false
	}
	*dst = d
	return true
}

func (t *table) strings(k string, dst *[]string) {
	v, ok := t.get(k)
	if !ok {
		return
	}
	arr, ok := v.([]any)
	if !ok {
		t.problem(k, "want an array of strings, got %s", tomlType(v))
		return
	}
	out := make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			t.problem(k, "element %d: want a string, got %s", i, tomlType(e))
			continue
		}
		out = append(out, s)
	}
	*dst = out
}

// sub returns the sub-table k (empty when absent).
func (t *table) sub(k string) *table {
	s := &table{path: t.key(k), m: map[string]any{}, ps: t.ps}
	v, ok := t.get(k)
	if !ok {
		return s
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.problem(k, "want a table ([%s]), got %s", t.key(k), tomlType(v))
		return s
	}
	s.m = m
	return s
}

// array returns the tables of the array of tables k ([[k]]).
func (t *table) array(k string) []*table {
	v, ok := t.get(k)
	if !ok {
		return nil
	}
	var ms []map[string]any
	switch v := v.(type) {
	case []map[string]any:
		ms = v
	case []any:
		for i, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				t.problem(k, "element %d: want a table, got %s", i, tomlType(e))
				continue
			}
			ms = append(ms, m)
		}
	case map[string]any:
		t.problem(k, "want an array of tables: write [[%s]], not [%s]", t.key(k), t.key(k))
		return nil
	default:
		t.problem(k, "want an array of tables ([[%s]]), got %s", t.key(k), tomlType(v))
		return nil
	}
	out := make([]*table, len(ms))
	for i, m := range ms {
		out[i] = &table{path: t.key(k) + "[" + strconv.Itoa(i) + "]", m: m, ps: t.ps}
	}
	return out
}

// done reports every key of t that no reader asked for.
func (t *table) done() {
	var unknown []string
	for k := range t.m {
		if !slices.Contains(t.known, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		if s := suggest(k, t.known); s != "" {
			t.problem(k, "unknown key (did you mean %q?)", s)
		} else {
			t.problem(k, "unknown key")
		}
	}
}

// suggest returns the known key closest to k, if it is close.
func suggest(k string, known []string) string {
	best, bestD := "", 3
	for _, c := range known {
		if strings.EqualFold(c, k) {
			return c
		}
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time:
		return "a date/time"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	}
	return fmt.Sprintf("%T", v)
}

// locateKeys maps key paths ("nats.url", "fold[1].batch_size",
// "fold[1].create_bucket") to the line that defines them. The TOML library
// keeps key positions private, so this is a line scanner for the shapes a
// config file has (tables, arrays of tables, key = value, multi-line strings
// and arrays). A key it cannot place is reported without a line, never with
// a wrong one for the common shapes.
func locateKeys(text string) map[string]int {
	out := map[string]int{}
	arrays := map[string]int{} // plain array-of-tables name -> elements seen
	cur := ""
	mlDelim := "" // inside a multi-line string closed by this delimiter
	depth := 0    // inside a multi-line array
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if mlDelim != "" {
			if strings.Contains(line, mlDelim) {
				mlDelim = ""
			}
			continue
		}
		if depth > 0 {
			depth += bracketDelta(line)
			continue
		}
		s := strings.TrimSpace(line)
		if s == "" || s[0] == '#' {
			continue
		}
		if strings.HasPrefix(s, "[[") {
			end := strings.Index(s, "]]")
			if end < 0 {
				continue
			}
			parts := splitKey(s[2:end])
			arrays[strings.Join(parts, ".")]++
			cur = indexedPath(parts, arrays)
			out[cur] = n
			continue
		}
		if s[0] == '[' {
			end := strings.IndexByte(s, ']')
			if end < 0 {
				continue
			}
			cur = indexedPath(splitKey(s[1:end]), arrays)
			out[cur] = n
			continue
		}
		eq := indexOutsideQuotes(s, '=')
		if eq < 0 {
			continue
		}
		path := cur
		for _, p := range splitKey(s[:eq]) {
			if path == "" {
				path = p
			} else {
				path += "." + p
			}
			if _, seen := out[path]; !seen {
				out[path] = n
			}
		}
		val := strings.TrimSpace(s[eq+1:])
		switch {
		case strings.HasPrefix(val, `"""`) || strings.HasPrefix(val, `'''`):
			if !strings.Contains(val[3:], val[:3]) {
				mlDelim = val[:3]
			}
		case strings.HasPrefix(val, "["):
			depth = max(0, bracketDelta(val))
		}
	}
	return out
}

// indexedPath joins a header's key parts, indexing each part that names an
// array of tables by its latest element.
func indexedPath(parts []string, arrays map[string]int) string {
	segs := make([]string, len(parts))
	for j, p := range parts {
		if c, ok := arrays[strings.Join(parts[:j+1], ".")]; ok {
			p += "[" + strconv.Itoa(c-1) + "]"
		}
		segs[j] = p
	}
	return strings.Join(segs, ".")
}

// splitKey splits a dotted key, unquoting quoted parts.
func splitKey(k string) []string {
	var parts []string
	for {
		i := indexOutsideQuotes(k, '.')
		p := k
		if i >= 0 {
			p = k[:i]
		}
		p = strings.TrimSpace(p)
		if len(p) >= 2 && (p[0] == '"' || p[0] == '\'') && p[len(p)-1] == p[0] {
			p = p[1 : len(p)-1]
		}
		parts = append(parts, p)
		if i < 0 {
			return parts
		}
		k = k[i+1:]
	}
}

// indexOutsideQuotes finds c outside quoted strings and before a comment.
func indexOutsideQuotes(s string, c byte) int {
	at := -1
	scanCode(s, func(i int) bool {
		if s[i] == c {
			at = i
			return false
		}
		return true
	})
	return at
}

// bracketDelta counts '[' minus ']' outside strings and comments.
func bracketDelta(s string) int {
	d := 0
	scanCode(s, func(i int) bool {
		switch s[i] {
		case '[':
			d++
		case ']':
			d--
		}
		return true
	})
	return d
}

// scanCode calls fn with the index of every byte of s that is outside a
// quoted string (the quotes themselves excluded) and before a comment,
// until fn returns false.
func scanCode(s string, fn func(i int) bool) {
	var q byte
	for i := 0; i < len(s); i++ {
		switch {
		case q != 0:
			if s[i] == '\\' && q == '"' {
				i++
			} else if s[i] == q {
				q = 0
			}
		case s[i] == '"' || s[i] == '\'':
			q = s[i]
		case s[i] == '#':
			return
		default:
			if !fn(i) {
				return
			}
		}
	}
}
