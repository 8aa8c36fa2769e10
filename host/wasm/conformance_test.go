package wasm

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// The example router's conformance tables (its views, effects and query
// answers, written by hand from SPEC.md) are fixtures of 'foldhost plugin
// test' now (plugins/example-router/fixtures/), which cmd/foldhost's
// TestRouterFixtures runs through every build. What stays here is the
// differential query test: every build against the C build, on random
// folds and inputs.

func repoRoot(t testing.TB) string {
	t.Helper()
	return filepath.Join(testDir, "..", "..")
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

// TestConformanceRouterQueries: every build of the example router answers
// both queries (SPEC.md, "Queries") byte for byte as the C build does,
// its failures with the same message: each build folds the same seeded
// updates into a store of its own, and each is queried over its own store
// and over the C build's (the same folded data for all four).
func TestConformanceRouterQueries(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	// Upstreams with skewed host counts (ties likely), one of them over
	// two range pages (1024 keys), addrs sharing prefixes, and hosts that
	// need JSON escapes.
	addrs := []string{"10.0.0.2:80", "10.0.0.2:800", "10.0.0.20:80", "u", "u1", "x\x7fy", "é:443", "a\"b"}
	var batch []fold.Update
	rev := protocol.Revision(0)
	put := func(host string, ups ...string) {
		rev++
		v := `{"upstreams":[`
		for i, a := range ups {
			if i > 0 {
				v += ","
			}
			v += fmt.Sprintf(`{"addr":%q,"weight":%d}`, a, 1+rng.Intn(5))
		}
		batch = append(batch, fold.Update{Key: "route." + host, Value: []byte(v + "]}"), Rev: rev, Op: fold.OpPut})
	}
	for i := range 1100 {
		put(fmt.Sprintf("big%05d", i), "u")
	}
	for i := range 300 {
		n := 1 + rng.Intn(3)
		var ups []string
		for range n {
			ups = append(ups, addrs[rng.Intn(len(addrs)-1)]) // never a"b: %q escapes it, the spec refuses escapes
		}
		put(fmt.Sprintf("h%03d", i), ups...)
	}
	// Four upstreams tied at 7 hosts, the fewest, sorting after every
	// other addr: the ranking is full when the later ones come, and
	// top_upstreams with every n from 1 to 16 cuts inside the tie
	// somewhere (ties go in addr order).
	for i := range 28 {
		put(fmt.Sprintf("tie%02d", i), fmt.Sprintf("ü-tie-%c", 'a'+i%4))
	}
	put(`q"uo\te`, "10.0.0.2:80")
	put("ctl\x01\x1f", "10.0.0.2:80", "u1")
	put("ünï/cödé", "10.0.0.20:80")
	for i := range 40 { // deletes move counts around
		rev++
		batch = append(batch, fold.Update{Key: fmt.Sprintf("route.h%03d", rng.Intn(300)), Rev: rev, Op: fold.OpDelete})
		_ = i
	}
	inputs := []struct{ name, in string }{
		{"top_upstreams", ""}, {"top_upstreams", "1"}, {"top_upstreams", "3"}, {"top_upstreams", "1000"},
		{"top_upstreams", "0010"}, {"top_upstreams", "2"}, {"top_upstreams", "4"}, {"top_upstreams", "5"},
		{"top_upstreams", "6"}, {"top_upstreams", "7"}, {"top_upstreams", "8"}, {"top_upstreams", "9"},
		{"top_upstreams", "11"}, {"top_upstreams", "12"}, {"top_upstreams", "13"}, {"top_upstreams", "14"},
		{"top_upstreams", "15"}, {"top_upstreams", "16"}, {"top_upstreams", "0"}, {"top_upstreams", "1001"}, {"top_upstreams", "12345"},
		{"top_upstreams", "-1"}, {"top_upstreams", " 5"},
		{"hosts_of_upstream", "u"}, {"hosts_of_upstream", "10.0.0.2:80"}, {"hosts_of_upstream", "10.0.0.2:800"},
		{"hosts_of_upstream", "10.0.0.20:80"}, {"hosts_of_upstream", "u1"}, {"hosts_of_upstream", "x\x7fy"},
		{"hosts_of_upstream", "é:443"}, {"hosts_of_upstream", "nobody"}, {"hosts_of_upstream", `a"b\c`},
		{"hosts_of_upstream", ""}, {"hosts_of_upstream", "a/b"}, {"hosts_of_upstream", "a,b"},
		{"hosts_of_upstream", "a=b"}, {"hosts_of_upstream", "tab\t"}, {"hosts_of_upstream", strings.Repeat("a", 256)},
		{"hosts_of_upstream", strings.Repeat("a", 255)},
	}

	r := newRuntime(t, Options{})
	builds := routerBuilds(t)
	langs := []string{"c", "as", "go", "rust"} // c first: the reference
	if len(builds) != len(langs) {
		t.Fatalf("builds %v, want %v", builds, langs)
	}
	plugins := map[string]*Plugin{}
	snaps := map[string]*fold.Snapshot{}
	for _, lang := range langs {
		p, st := pluginAndStore(t, r, builds[lang])
		if qs, _ := p.Queries(); len(qs) != 2 {
			t.Fatalf("%s declares queries %+v, want the spec's two", lang, qs)
		}
		commitBatch(t, p, st, batch...)
		plugins[lang], snaps[lang] = p, snapshotOf(t, st)
	}
	answer := func(lang string, sn *fold.Snapshot, name, in string) string {
		a, err := plugins[lang].Query(context.Background(), name, []byte(in), sn)
		var pe *PluginError
		switch {
		case err == nil:
			return "ok " + string(a.Body)
		case errors.As(err, &pe) && pe.Kind == KindGuest:
			var ge *abi.GuestError
			if !errors.As(err, &ge) {
				t.Fatalf("%s %s(%q): %v", lang, name, in, err)
			}
			return "fail " + ge.Message
		}
		t.Fatalf("%s %s(%q): %v", lang, name, in, err)
		return ""
	}
	oks := 0
	for _, c := range inputs {
		want := answer("c", snaps["c"], c.name, c.in)
		if strings.HasPrefix(want, "ok ") {
			oks++
		}
		for _, lang := range langs[1:] {
			for _, on := range []string{"c", lang} {
				if got := answer(lang, snaps[on], c.name, c.in); got != want {
					t.Errorf("%s %s(%q) over the %s build's fold:\n got  %.300q\n want %.300q", lang, c.name, c.in, on, got, want)
				}
			}
		}
	}
	if oks < 15 {
		t.Fatalf("only %d of %d inputs answered ok", oks, len(inputs))
	}
	// The reference itself, on the parts the spec pins down.
	if got := answer("c", snaps["c"], "top_upstreams", "1"); got != `ok [{"addr":"u","hosts":1100}]` && !strings.HasPrefix(got, `ok [{"addr":"u","hosts":11`) {
		t.Errorf("top_upstreams(1) = %s", got)
	}
	if got := answer("c", snaps["c"], "hosts_of_upstream", `a"b\c`); got != `ok {"upstream":"a\"b\\c","hosts":[]}` {
		t.Errorf(`hosts_of_upstream(a"b\c) = %s`, got)
	}
}
