package doccheck

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// docPages are the pages whose links TestDocLinksResolve checks: README.md,
// CHANGELOG.md and every page of docs/, as paths from the repository's
// root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "CHANGELOG.md"}
	more, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 {
		t.Fatal("docs/ has no pages")
	}
	for _, p := range more {
		pages = append(pages, "docs/"+filepath.Base(p))
	}
	return pages
}

// TestDocLinksResolve: every relative link of README.md, CHANGELOG.md and
// docs/*.md names a file of the repository, and a link with a #fragment
// to a Markdown page (the page itself when the link is only the fragment)
// names one of its headings' anchors, as GitHub makes them (anchorsOf).
// Links in code spans and code blocks are not links; absolute URLs are not
// checked. Mutations caught: a heading renamed with a link to it left
// behind; a page moved; an anchor kept from before a section moved to
// another page.
func TestDocLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsIn := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		anchors[page] = anchorsOf(read(t, page))
		return anchors[page]
	}
	n := 0
	for _, page := range docPages(t) {
		for _, l := range linksOf(read(t, page)) {
			if regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(l.target) {
				continue // https:, mailto:
			}
			n++
			where := fmt.Sprintf("%s:%d: link %q", page, l.line, l.target)
			file, frag, _ := strings.Cut(l.target, "#")
			target := page
			if file != "" {
				target = path.Clean(path.Join(path.Dir(page), file))
				if strings.HasPrefix(target, "../") {
					t.Errorf("%s: leaves the repository", where)
					continue
				}
				if _, err := os.Stat(filepath.Join("..", "..", filepath.FromSlash(target))); err != nil {
					t.Errorf("%s: no file %s", where, target)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if !anchorsIn(target)[frag] {
				t.Errorf("%s: %s has no heading with the anchor #%s", where, target, frag)
			}
		}
	}
	if n == 0 {
		t.Fatal("no relative link found: the link pattern is broken")
	}
}

// docLink is a link of a Markdown page: its target and its line.
type docLink struct {
	target string
	line   int
}

var (
	linkRE     = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	headingRE  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	mdLinkRE   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// linksOf returns the inline links ([text](target)) of a Markdown page,
// outside code blocks and code spans.
func linksOf(doc string) []docLink {
	var out []docLink
	for i, line := range proseLines(doc) {
		if line == "" {
			continue
		}
		line = codeSpanRE.ReplaceAllString(line, "")
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			out = append(out, docLink{target: m[1], line: i + 1})
		}
	}
	return out
}

// proseLines returns the page's lines with those of fenced code blocks
// (and their fences) blanked, so line numbers stay the page's.
func proseLines(doc string) []string {
	lines := strings.Split(doc, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return lines
}

// anchorsOf returns the anchors GitHub gives the headings of a Markdown
// page: the heading's text (links replaced by their text, code spans by
// their content), lowercased, every character but a letter, a digit, a
// space, '-' or '_' dropped, spaces turned into '-'; a repeated anchor
// gets -1, -2, ... appended.
func anchorsOf(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(doc) {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := anchor(m[1])
		if k := seen[a]; k > 0 {
			out[fmt.Sprintf("%s-%d", a, k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// anchor is GitHub's anchor of one heading's text.
func anchor(heading string) string {
	h := mdLinkRE.ReplaceAllString(heading, "$1")
	h = strings.NewReplacer("`", "", "*", "").Replace(h)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestAnchor: the anchors of headings this repository's pages have, as
// GitHub renders them.
func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Watching a host: `foldhost top`":        "watching-a-host-foldhost-top",
		"The protocol kernels (`protocol/`)":     "the-protocol-kernels-protocol",
		"`[fold.create_bucket]`":                 "foldcreate_bucket",
		"A fold's status":                        "a-folds-status",
		"2. Write, then read your writes":        "2-write-then-read-your-writes",
		"Resume beyond the stream head (`x.Y`)":  "resume-beyond-the-stream-head-xy",
		"Plugin effects: an outbox, a publisher": "plugin-effects-an-outbox-a-publisher",
		"[Linked](x.md) heading":                 "linked-heading",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestREADMESetUpCommands: README.md's set-up section gives exactly the
// two commands a fresh machine needs, `go run ./cmd/foldhost demo` and
// `bash scripts/test`, each alone in a sh block, and .ci/run runs exactly
// the latter, so CI tests what the README tells a newcomer to run.
func TestREADMESetUpCommands(t *testing.T) {
	readme := read(t, "README.md")
	_, setup, ok := strings.Cut(readme, "\n## Set-up on a fresh machine\n")
	if !ok {
		t.Fatal(`README.md has no "## Set-up on a fresh machine" section`)
	}
	if i := strings.Index(setup, "\n## "); i >= 0 {
		setup = setup[:i]
	}
	var cmds []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(setup, -1) {
		cmds = append(cmds, strings.TrimSpace(block[1]))
	}
	if want := []string{"go run ./cmd/foldhost demo", "bash scripts/test"}; fmt.Sprint(cmds) != fmt.Sprint(want) {
		t.Errorf("README.md's set-up commands are %q, want %q", cmds, want)
	}
	if ci := read(t, ".ci/run"); !regexp.MustCompile(`(?m)^exec bash scripts/test$`).MatchString(ci) {
		t.Errorf(".ci/run does not run exactly `bash scripts/test`:\n%s", ci)
	}
}
