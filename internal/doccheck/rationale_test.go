package doccheck

import (
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestRationaleCitationsNameHeadings: every citation of a rationale file
// in the repository's Go comments, its Markdown (but the root
// RATIONALE.md), scripts/ and config.toml.example names a "## " heading
// of the file it cites. A citation is the file's name (RATIONALE.md for
// the root one, or a path from the root such as host/fold/RATIONALE.md),
// then a comma or a space (and maybe an opening parenthesis), then a
// heading in double quotes. The quoted text is the heading, or its start up to one
// of its ':', ';' or ',' (a clause of it, as "Plugin effects" cites
// "Plugin effects: an outbox ..."). A citation may wrap: Go comments on
// consecutive lines, and a Markdown paragraph's or a "#" comment block's
// lines, are read joined by one space. The file's name followed by a
// ',' or ':' and unquoted words is taken for a heading cited without its
// quotes and fails too: it could not be checked. The name alone, with
// no heading, is not a citation.
func TestRationaleCitationsNameHeadings(t *testing.T) {
	root := filepath.Join("..", "..")
	headings := map[string][]string{} // rationale file -> its headings
	headingsOf := func(file string) ([]string, bool) {
		if h, ok := headings[file]; ok {
			return h, h != nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			headings[file] = nil
			return nil, false
		}
		headings[file] = sectionHeadings(string(b))
		return headings[file], true
	}

	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && skipDir(rel, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		var groups []textGroup
		switch {
		case rel == "RATIONALE.md":
			return nil
		case strings.HasSuffix(rel, ".go"):
			groups = goCommentGroups(t, rel, read(t, rel))
		case strings.HasSuffix(rel, ".md"):
			groups = lineGroups(read(t, rel), "")
		case strings.HasPrefix(rel, "scripts/"), rel == "config.toml.example":
			groups = lineGroups(read(t, rel), "#")
		default:
			return nil
		}
		for _, g := range groups {
			for _, c := range citations(rel, g) {
				n++
				where := fmt.Sprintf("%s:%d", rel, c.line)
				if c.unquoted != "" {
					t.Errorf("%s: %q cites a heading without quotes (write the heading in double quotes after %s and a comma)", where, c.file+c.unquoted, c.file)
					continue
				}
				hs, ok := headingsOf(c.file)
				if !ok {
					t.Errorf("%s: %s, %q: there is no %s", where, c.file, c.heading, c.file)
					continue
				}
				if !citesHeading(c.heading, hs) {
					hint := ""
					if h := sectionHolding(read(t, c.file), c.heading); h != "" {
						hint = fmt.Sprintf("; the text is in the section %q", h)
					}
					t.Errorf("%s: %s, %q names no \"## \" heading of %s, nor its start up to a ':', ';' or ','%s", where, c.file, c.heading, c.file, hint)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no citation of RATIONALE.md found: is the walk reading the repository?")
	}
}

// TestRationaleIndexListsEverySection: RATIONALE.md's index (the links
// above its first "## " heading) links every section exactly once, each
// by its GitHub anchor and with its heading as the link's text, and
// links nothing else.
func TestRationaleIndexListsEverySection(t *testing.T) {
	doc := read(t, "RATIONALE.md")
	hs := sectionHeadings(doc)
	if len(hs) == 0 {
		t.Fatal("RATIONALE.md has no \"## \" heading")
	}
	byAnchor := map[string]string{}
	for _, h := range hs {
		a := githubAnchor(h)
		if o, dup := byAnchor[a]; dup {
			t.Errorf("RATIONALE.md: the headings %q and %q share the anchor #%s", o, h, a)
		}
		byAnchor[a] = h
	}

	index, _, ok := strings.Cut(doc, "\n## ")
	if !ok {
		t.Fatal("RATIONALE.md has no \"## \" heading")
	}
	linked := map[string]int{}
	link := regexp.MustCompile(`\[(.*)\]\(#([^)\s]*)\)`)
	for i, line := range strings.Split(index, "\n") {
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			text, anchor := m[1], m[2]
			h, ok := byAnchor[anchor]
			switch {
			case !ok:
				t.Errorf("RATIONALE.md:%d: the index links #%s, the anchor of no heading", i+1, anchor)
			case text != h:
				t.Errorf("RATIONALE.md:%d: the index's link to #%s reads %q, its heading %q", i+1, anchor, text, h)
			}
			linked[anchor]++
		}
	}
	for _, h := range hs {
		switch a := githubAnchor(h); linked[a] {
		case 1:
		case 0:
			t.Errorf("RATIONALE.md: the index has no link to the section %q (#%s)", h, a)
		default:
			t.Errorf("RATIONALE.md: the index links the section %q (#%s) %d times", h, a, linked[a])
		}
	}
}

// skipDir: directories of no one's source (hidden ones, npm installs, and
// what .gitignore keeps out of the repository).
func skipDir(rel, name string) bool {
	if strings.HasPrefix(name, ".") || name == "node_modules" {
		return true
	}
	switch rel {
	case "bin", "tmp", "data":
		return true
	}
	m, _ := path.Match("plugins/*/build", rel)
	return m
}

// sectionHeadings returns the text of every "## " heading of a Markdown
// document, outside fenced code blocks.
func sectionHeadings(doc string) []string {
	var hs []string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if h, ok := strings.CutPrefix(line, "## "); ok && !fenced {
			hs = append(hs, strings.TrimSpace(h))
		}
	}
	return hs
}

// sectionHolding returns the heading of the section of doc whose text
// holds s, or "".
func sectionHolding(doc, s string) string {
	h := ""
	for _, line := range strings.Split(doc, "\n") {
		if t, ok := strings.CutPrefix(line, "## "); ok {
			h = strings.TrimSpace(t)
		} else if h != "" && strings.Contains(line, s) {
			return h
		}
	}
	return ""
}

// citesHeading: cited is one of hs, or the start of one ending where
// the heading has a ':', ';' or ','.
func citesHeading(cited string, hs []string) bool {
	for _, h := range hs {
		if h == cited {
			return true
		}
		if rest, ok := strings.CutPrefix(h, cited); ok && cited != "" && strings.ContainsRune(":;,", rune(rest[0])) {
			return true
		}
	}
	return false
}

// githubAnchor is the anchor GitHub gives a heading: lower case, every
// space a '-', and every character but letters, digits, '-' and '_'
// dropped.
func githubAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// textGroup is a run of consecutive lines of text joined by one space;
// starts holds the offset in text where each line begins, from line
// first on.
type textGroup struct {
	text   string
	first  int
	starts []int
}

func (g *textGroup) add(line string) {
	if g.text != "" {
		g.text += " "
	}
	g.starts = append(g.starts, len(g.text))
	g.text += line
}

// lineOf returns the file's line of offset off in g.text.
func (g *textGroup) lineOf(off int) int {
	i := 0
	for i+1 < len(g.starts) && g.starts[i+1] <= off {
		i++
	}
	return g.first + i
}

// lineGroups splits a file into runs of non-blank lines, each line
// trimmed and stripped of the comment marker (when it is not "").
func lineGroups(src, marker string) []textGroup {
	var gs []textGroup
	var g *textGroup
	for i, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if marker != "" {
			line = strings.TrimSpace(strings.TrimLeft(line, marker))
		}
		if line == "" {
			g = nil
			continue
		}
		if g == nil {
			gs = append(gs, textGroup{first: i + 1})
			g = &gs[len(gs)-1]
		}
		g.add(line)
	}
	return gs
}

// goCommentGroups returns a Go file's comments, a comment that starts on
// the line after the previous one ended joining its group.
func goCommentGroups(t *testing.T, name, src string) []textGroup {
	fset := token.NewFileSet()
	file := fset.AddFile(name, -1, len(src))
	var s scanner.Scanner
	s.Init(file, []byte(src), func(pos token.Position, msg string) {
		t.Errorf("%s: %s", pos, msg)
	}, scanner.ScanComments)
	var gs []textGroup
	last := -1
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return gs
		}
		if tok != token.COMMENT {
			continue
		}
		line := fset.Position(pos).Line
		if line != last+1 || len(gs) == 0 {
			gs = append(gs, textGroup{first: line})
		}
		g := &gs[len(gs)-1]
		body, block := strings.CutPrefix(lit, "/*")
		if block {
			body = strings.TrimSuffix(body, "*/")
		} else {
			body = strings.TrimPrefix(lit, "//")
		}
		for i, l := range strings.Split(body, "\n") {
			if l = strings.TrimSpace(l); block && i > 0 {
				l = strings.TrimSpace(strings.TrimPrefix(l, "*"))
			}
			g.add(l)
		}
		last = line + strings.Count(lit, "\n")
	}
}

type citation struct {
	line     int
	file     string // the rationale file, from the repository's root
	heading  string // the quoted text
	unquoted string // set for a heading cited without quotes: what follows the name
}

var (
	citeName = regexp.MustCompile(`((?:[\w.-]+/)*)RATIONALE\.md(?:\]\([^)\s]*\))?`)
	quoted   = regexp.MustCompile(`^(?:,\s*|\s+)\(?"([^"]*)"`)
	unquoted = regexp.MustCompile(`^[,:]\s+[^\s"(][^.;)]*`)
)

// citations returns the citations of a rationale file in g, a group of
// the file rel. A name with a path is from the repository's root, or from
// rel's directory when it starts with "./" or "../".
func citations(rel string, g textGroup) []citation {
	var cs []citation
	for _, m := range citeName.FindAllStringSubmatchIndex(g.text, -1) {
		file := g.text[m[2]:m[3]] + "RATIONALE.md"
		if strings.HasPrefix(file, "./") || strings.HasPrefix(file, "../") {
			file = path.Join(path.Dir(rel), file)
		}
		c := citation{line: g.lineOf(m[0]), file: file}
		rest := g.text[m[1]:]
		if q := quoted.FindStringSubmatch(rest); q != nil {
			c.heading = q[1]
		} else if u := unquoted.FindString(rest); u != "" {
			c.unquoted = u
		} else {
			continue
		}
		cs = append(cs, c)
	}
	return cs
}
