package wasm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// The conformance suite: one table of batches (plugins/example-router/
// conformance.json) run through every language's build of the example
// plugin, each through the real fold loop into a real store. Every build
// must produce exactly the table's view, byte for byte, and count the same
// rejections.

type confCase struct {
	Name    string `json:"name"`
	Batches [][]struct {
		Op    string `json:"op"`
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"batches"`
	WantViews    map[string]string `json:"want_views"`
	WantRejected int               `json:"want_rejected"`
}

func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// routerBuilds returns every build of the example plugin. The C,
// AssemblyScript and Rust builds come from scripts/build-plugins, which the
// test command runs first; a missing build fails the suite.
func routerBuilds(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "plugins", "example-router", "build")
	builds := map[string]string{"go": goRouterWasm(t)}
	for _, lang := range []string{"c", "as", "rust"} {
		p := filepath.Join(dir, "router-"+lang+".wasm")
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("missing %s: run scripts/build-plugins first (the test command does): %v", p, err)
		}
		builds[lang] = p
	}
	return builds
}

func TestConformanceExampleRouter(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "plugins", "example-router", "conformance.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []confCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("only %d conformance cases", len(cases))
	}
	r := newRuntime(t, Options{})
	builds := routerBuilds(t)
	langs := make([]string, 0, len(builds))
	for l := range builds {
		langs = append(langs, l)
	}
	sort.Strings(langs)
	for _, lang := range langs {
		m, err := r.LoadFile(context.Background(), builds[lang])
		if err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		p := r.NewPlugin(m)
		defer p.Close(context.Background())
		for _, c := range cases {
			t.Run(lang+"/"+c.Name, func(t *testing.T) {
				got, rejected := runCase(t, p, c)
				if rejected != c.WantRejected {
					t.Errorf("rejected %d, want %d", rejected, c.WantRejected)
				}
				if d := viewDiff(got, c.WantViews); d != "" {
					t.Errorf("view differs from the table:\n%s", d)
				}
			})
		}
	}
}

// runCase runs one table case through p on a fresh instance.
func runCase(t *testing.T, p *Plugin, c confCase) (map[string]string, int) {
	st, _, err := fold.Open(t.TempDir(), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	defer p.closeInstance(context.Background())
	var rejected int
	rev := protocol.Revision(0)
	for _, b := range c.Batches {
		var batch []fold.Update
		for _, u := range b {
			rev++
			op := map[string]fold.Op{"put": fold.OpPut, "delete": fold.OpDelete, "purge": fold.OpPurge}[u.Op]
			batch = append(batch, fold.Update{Key: u.Key, Value: []byte(u.Value), Rev: rev, Op: op, Time: int64(rev)})
		}
		// One loop run per table batch: the feed closes after it, so the
		// loop flushes exactly this batch.
		loop := fold.NewLoop(st, p, fold.LoopConfig{MaxBatch: len(batch) + 1, OnApplied: func(a fold.Applied) { rejected += a.Rejected }})
		if _, err := loop.Run(context.Background(), newFeed(batch)); err != nil {
			t.Fatalf("batch ending at revision %d: %v", rev, err)
		}
	}
	if st.Cursor().Rev != rev {
		t.Fatalf("cursor %v after %d updates", st.Cursor(), rev)
	}
	return views(t, st), rejected
}

func viewDiff(got, want map[string]string) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("  missing %q = %q", k, v))
		} else if g != v {
			d = append(d, fmt.Sprintf("  %q = %q, want %q", k, g, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("  extra %q = %q", k, v))
		}
	}
	sort.Strings(d)
	out := ""
	for _, l := range d {
		out += l + "\n"
	}
	return out
}

// The effects table (plugins/example-router/conformance-effects.json):
// every build must emit exactly the table's effects, in order, byte for
// byte (subject, headers, payload).

type confEffect struct {
	Subject string      `json:"subject"`
	Headers [][2]string `json:"headers"`
	Payload string      `json:"payload"`
}

type confEffectCase struct {
	Name    string `json:"name"`
	Batches [][]struct {
		Op    string `json:"op"`
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"batches"`
	WantEffects []confEffect `json:"want_effects"`
}

// effectTap records the effects of every output the loop gets (copied:
// the output aliases the plugin's buffers).
type effectTap struct {
	p   fold.Plugin
	got []confEffect
}

func (t *effectTap) Apply(ctx context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	out, err := t.p.Apply(ctx, batch, r)
	if err == nil {
		for _, e := range out.Effects {
			c := confEffect{Subject: e.Subject, Payload: string(e.Payload), Headers: [][2]string{}}
			for _, h := range e.Headers {
				c.Headers = append(c.Headers, [2]string{h.Name, h.Value})
			}
			t.got = append(t.got, c)
		}
	}
	return out, err
}

func TestConformanceExampleRouterEffects(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "plugins", "example-router", "conformance-effects.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []confEffectCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("only %d effect cases", len(cases))
	}
	r := newRuntime(t, Options{})
	builds := routerBuilds(t)
	langs := make([]string, 0, len(builds))
	for l := range builds {
		langs = append(langs, l)
	}
	sort.Strings(langs)
	for _, lang := range langs {
		m, err := r.LoadFile(context.Background(), builds[lang])
		if err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		p := r.NewPlugin(m)
		defer p.Close(context.Background())
		for _, c := range cases {
			t.Run(lang+"/"+c.Name, func(t *testing.T) {
				tap := &effectTap{p: p}
				var batches [][]fold.Update
				rev := protocol.Revision(0)
				for _, b := range c.Batches {
					var batch []fold.Update
					for _, u := range b {
						rev++
						op := map[string]fold.Op{"put": fold.OpPut, "delete": fold.OpDelete, "purge": fold.OpPurge}[u.Op]
						batch = append(batch, fold.Update{Key: u.Key, Value: []byte(u.Value), Rev: rev, Op: op, Time: int64(rev)})
					}
					batches = append(batches, batch)
				}
				runBatches(t, p, tap, batches)
				want := c.WantEffects
				if want == nil {
					want = []confEffect{}
				}
				for i := range want {
					if want[i].Headers == nil {
						want[i].Headers = [][2]string{}
					}
				}
				got := tap.got
				if got == nil {
					got = []confEffect{}
				}
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				if string(g) != string(w) {
					t.Errorf("effects differ from the table:\n got  %s\n want %s", g, w)
				}
			})
		}
	}
}

// runBatches folds each batch through its own loop run (the feed closes
// after it, so the loop flushes exactly that batch) into a fresh store,
// calling p through via, on a fresh instance.
func runBatches(t *testing.T, p *Plugin, via fold.Plugin, batches [][]fold.Update) *fold.Store {
	t.Helper()
	st, _, err := fold.Open(t.TempDir(), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	defer p.closeInstance(context.Background())
	for _, batch := range batches {
		loop := fold.NewLoop(st, via, fold.LoopConfig{MaxBatch: len(batch) + 1})
		if _, err := loop.Run(context.Background(), newFeed(batch)); err != nil {
			t.Fatalf("batch %v: %v", batch, err)
		}
	}
	return st
}
