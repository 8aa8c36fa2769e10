package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// routerBuild returns the C build of the example-router plugin.
func routerBuild(t *testing.T) string {
	t.Helper()
	return builtPlugin(t, "example-router", "router-c")
}

// builtPlugin is plugins/<dir>/build/<name>.wasm, made by
// scripts/build-plugins (the test command runs it first).
func builtPlugin(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(testDir, "..", "..", "plugins", dir, "build", name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("missing %s: run scripts/build-plugins first (the test command does): %v", p, err)
	}
	abs, _ := filepath.Abs(p)
	return abs
}

// TestRunWithWASMPlugin: the daemon folds through the example-router plugin
// and serves the plugin's view and identity over HTTP.
func TestRunWithWASMPlugin(t *testing.T) {
	cfgText := fmt.Sprintf(`
[nats]
embedded_listen = "127.0.0.1:0"
[http]
addr = "127.0.0.1:0"
[[fold]]
name = "routes"
scope = ["route."]
plugin = %q
batch_window = "2ms"
`, routerBuild(t))
	d := runInProcess(t, t.TempDir(), cfgText)
	ctx := context.Background()
	natsURL, base := d.natsURL, d.base
	nc, err := natskv.Connect(natskv.ConnOptions{URL: natsURL})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"route.api": `{"upstreams":[{"addr":"10.0.0.1:80","weight":3},{"addr":"10.0.0.2:80"}]}`,
		"route.bad": `{"upstreams":`,
	} {
		if _, err := b.KV().Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "the plugin's view of route.api", func() (bool, string) {
		code, body, err := httpGet(base + "/v1/folds/routes/view/host/api")
		return err == nil && code == 200 && strings.Contains(body, `"value":"10.0.0.1:80=3,10.0.0.2:80=1"`), body
	})
	code, body, _ := httpGet(base + "/v1/folds/routes/view?prefix=upstream/10.0.0.2:80/")
	if code != 200 || !strings.Contains(body, `"count":1`) {
		t.Errorf("reverse index = %d %s", code, body)
	}
	// Both puts folded (the map's order is random: route.bad may come
	// second, after the view above is there).
	waitFor(t, 20*time.Second, "both puts folded", func() (bool, string) {
		_, body, err := httpGet(base + "/v1/folds/routes")
		return err == nil && strings.Contains(body, `"cursor":2,`), body
	})
	_, body, _ = httpGet(base + "/v1/folds/routes")
	var st struct {
		Plugin   map[string]any    `json:"plugin"`
		Counters map[string]uint64 `json:"counters"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Plugin["name"] != "example-router" || st.Plugin["abi"] != sdkABI || len(st.Plugin["sha256"].(string)) != 64 || st.Plugin["view_schema"] != 1.0 || st.Counters["rejected"] != 1 {
		t.Errorf("status = %s", body)
	}
	if code := d.stop(t); code != command.ExitOK {
		t.Fatalf("exit %d", code)
	}
}

func TestDemo(t *testing.T) {
	var out, errb syncbuf.Buffer
	c := &cli{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: noEnv}
	start := time.Now()
	code := c.main([]string{"demo", "--keys", "3000", "--delta", "120", "--plugin", routerBuild(t)})
	if code != command.ExitOK {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"wrote 3000 route keys",
		"folded 3000 updates",
		"resume from cursor 3000",
		"received 120 updates: the delta, not the bucket (3120)",
		"150 updates rejected as malformed", // one in 20 of the first 3000
		"exported the fold as an artifact at cursor 3120",
		"9. the new node folds the bucket through the plugin: resume from cursor 3120",
		"it received 120 updates: the delta since the artifact",
		"both folds hold identical raw entries and views",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
	t.Logf("demo took %v", time.Since(start).Round(time.Millisecond))
}

// TestDemoOutsideTheRepository: from a directory without the plugin builds
// the demo runs on the C build the binary carries.
func TestDemoOutsideTheRepository(t *testing.T) {
	t.Chdir(t.TempDir())
	var out, errb syncbuf.Buffer
	c := &cli{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: noEnv}
	if code := c.main([]string{"demo", "--keys", "1000", "--delta", "50"}); code != command.ExitOK {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if s := out.String(); !strings.Contains(s, "received 50 updates: the delta") || !strings.Contains(s, "both folds hold identical raw entries and views") {
		t.Errorf("demo output:\n%s", s)
	}
}

// TestDemoDir: `demo --dir DIR` makes DIR when it is missing (outside the
// repository it failed with "no such file or directory", writing its
// plugin there, though the demo's own hint suggests it), its closing hint reads the kept fold, and a second run in the same
// DIR is refused up front (it stopped halfway, on its second fold).
func TestDemoDir(t *testing.T) {
	t.Chdir(t.TempDir()) // outside the repository: the demo writes the C build it carries into DIR
	dir := filepath.Join(t.TempDir(), "new", "demo")
	code, out, errOut := runCLI(t, nil, "demo", "--dir", dir, "--keys", "500", "--delta", "20")
	if code != command.ExitOK || !strings.Contains(out, "both folds hold identical raw entries and views") {
		t.Fatalf("demo --dir of a missing directory: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	hint := "foldhost inspect --data " + filepath.Join(dir, "fold") + " view get host/h00042"
	if !strings.Contains(out, hint) {
		t.Fatalf("the demo's closing hint lacks %q:\n%s", hint, out)
	}
	if code, out, errOut := runCLI(t, nil, strings.Fields(strings.TrimPrefix(hint, "foldhost "))...); code != command.ExitOK || !strings.Contains(out, `"key": "host/h00042"`) {
		t.Errorf("the hint %q: exit %d: %s %s", hint, code, out, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "demo", "--dir", dir, "--keys", "500", "--delta", "20"); code != command.ExitUsage || !strings.Contains(errOut, "earlier demo") {
		t.Errorf("a second demo in the same --dir: exit %d: %s", code, errOut)
	}
}
