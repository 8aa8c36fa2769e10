package plugincheck

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The fixture lines written back: each expectation as its line, and a
// file rewritten with what a run found (--update).

func (v viewLine) String() string {
	var o lineWriter
	o.bytes("view", v.key)
	if v.absent {
		o.raw("absent", "true")
	} else {
		o.bytes("value", v.value)
	}
	return o.end()
}

func (e effectLine) String() string {
	var o lineWriter
	o.str("effect", e.subject)
	if e.update != 0 {
		o.raw("update", fmt.Sprint(e.update))
	}
	if len(e.headers) > 0 {
		var hs []string
		for _, h := range e.headers {
			hs = append(hs, "["+jsonString(h[0])+","+jsonString(h[1])+"]")
		}
		o.raw("headers", "["+strings.Join(hs, ",")+"]")
	}
	o.bytes("payload", e.payload)
	return o.end()
}

func (d deadLine) String() string {
	var o lineWriter
	o.bytes("dead_letter", d.key)
	o.raw("update", fmt.Sprint(d.update))
	o.str("error", d.err)
	return o.end()
}

func rejectedLine(n int) string { return fmt.Sprintf(`{"rejected":%d}`, n) }

func (q queryLine) String() string {
	var o lineWriter
	o.str("query", q.name)
	if len(q.input) > 0 {
		o.bytes("input", q.input)
	}
	switch {
	case q.failed != "":
		o.str("failed", q.failed)
	case q.refused != nil:
		o.str("refused", *q.refused)
	default:
		o.bytes("answer", q.answer)
	}
	return o.end()
}

// lineWriter writes a JSON object's members in the order given.
type lineWriter struct{ b strings.Builder }

func (o *lineWriter) raw(k, v string) {
	if o.b.Len() == 0 {
		o.b.WriteByte('{')
	} else {
		o.b.WriteByte(',')
	}
	o.b.WriteString(jsonString(k) + ":" + v)
}

func (o *lineWriter) str(k, v string) { o.raw(k, jsonString(v)) }

// bytes writes b as text under k when it is UTF-8, else in base64 under
// k_b64.
func (o *lineWriter) bytes(k string, b []byte) {
	if utf8.Valid(b) {
		o.str(k, string(b))
	} else {
		o.str(k+"_b64", base64.StdEncoding.EncodeToString(b))
	}
}

func (o *lineWriter) end() string { return o.b.String() + "}" }

// jsonString is s as a JSON string, <, > and & as they are.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// rewrite is the file with each batch's expectation lines replaced by
// got's (its lines for the checked categories and the queries it lists,
// in that order; comment lines of the block are kept, first): --update.
func (f *fixtureFile) rewrite(got map[*batch]expect) []byte {
	var out []string
	next := 0 // the next line (0-based) to copy
	for _, fx := range f.fixtures {
		for _, b := range fx.batches {
			g, ok := got[b]
			if !ok || b.line == 0 {
				continue
			}
			out = append(out, f.lines[next:b.line]...)
			// The block's comments: those before its last expectation
			// line stay before the new lines, the rest after them (they
			// belong to what follows).
			block := f.lines[b.line : b.end-1]
			lastExp := -1
			for i, l := range block {
				if !isComment(l) {
					lastExp = i
				}
			}
			var after []string
			for i, l := range block {
				switch {
				case !isComment(l):
				case i < lastExp:
					out = append(out, l)
				default:
					after = append(after, l)
				}
			}
			out = append(out, b.lines(g)...)
			out = append(out, after...)
			next = b.end - 1
		}
	}
	out = append(out, f.lines[next:]...)
	s := strings.Join(out, "\n")
	if f.final {
		s += "\n"
	}
	return []byte(s)
}

// isComment reports whether a fixture line is a comment or empty.
func isComment(line string) bool {
	t := strings.TrimSpace(line)
	return t == "" || strings.HasPrefix(t, "#")
}

// lines are the expectation lines of e for b's checks: the categories in
// the order views, effects, dead letters, rejected, queries.
func (b *batch) lines(e expect) []string {
	var out []string
	for _, c := range b.categories(e) {
		out = append(out, c.lines...)
	}
	return out
}

// category is one kind of expectation's lines.
type category struct {
	name  string
	lines []string
}

// categories are e's lines by category, for what b checks.
func (b *batch) categories(e expect) []category {
	var cs []category
	add := func(name string, n int, line func(i int) string) {
		c := category{name: name}
		for i := range n {
			c.lines = append(c.lines, line(i))
		}
		cs = append(cs, c)
	}
	if b.checks1(checkViews) {
		add("views", len(e.views), func(i int) string { return e.views[i].String() })
	}
	if b.checks1(checkEffects) {
		add("effects", len(e.effects), func(i int) string { return e.effects[i].String() })
	}
	if b.checks1(checkDeadLetters) {
		add("dead letters", len(e.dead), func(i int) string { return e.dead[i].String() })
	}
	if b.checks1(checkRejected) {
		add("rejected updates", min(e.rejected, 1), func(int) string { return rejectedLine(e.rejected) })
	}
	add("query answers", len(e.queries), func(i int) string { return e.queries[i].String() })
	return cs
}
