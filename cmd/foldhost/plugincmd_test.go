package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
)

// TestPluginPushAndList: with the embedded server, a daemon whose fold
// loads its module from the object store serves its HTTP API while the
// fold waits for the first push (waiting, /readyz 503 naming it, /healthz
// 200); `foldhost plugin push` refuses a file that is no plugin (nothing
// pushed) and uploads one that is; the fold starts with it, and `foldhost
// plugins` lists what the node runs.
func TestPluginPushAndList(t *testing.T) {
	dir := t.TempDir()
	natsAddr := freeAddr(t)
	cfgText := fmt.Sprintf(`[nats]
embedded_listen = %q
[http]
addr = %q
[admin]
node = "n1"
[[fold]]
name = "routes"
plugin = "nats-object://plugins/router"
plugin_max_mb = 1
`, natsAddr, freeAddr(t))
	d := startInProcess(t, dir, cfgText, nil)
	cfg := dir + "/config.toml"
	waitFor(t, time.Minute, "the daemon waiting for a module", func() (bool, string) {
		s := d.errb.String()
		return strings.Contains(s, "the plugin module has not been pushed: the fold waits for it"), s
	})
	d.waitAddrs(t, true) // the HTTP API listens meanwhile
	if st := foldStatusOf(t, d.base, "routes"); st["state"] != "waiting" {
		t.Errorf("the fold before the push: %v", st["state"])
	}
	if code, body, err := httpGet(d.base + "/readyz"); err != nil || code != 503 || !strings.Contains(body, "fold routes: waiting for its plugin module") {
		t.Errorf("readyz before the push: %d %q %v", code, body, err)
	}
	if code, _, err := httpGet(d.base + "/healthz"); err != nil || code != 200 {
		t.Errorf("healthz before the push: %d %v", code, err)
	}
	if code, out, errOut := runCLI(t, nil, "plugin", "push", builtPlugin(t, "testdata", "noexport"), "--config", cfg); code != 1 || !strings.Contains(errOut, "nothing pushed") {
		t.Fatalf("push of a module that is no plugin: exit %d: %s %s", code, out, errOut)
	}
	// Over the fold's plugin_max_mb: every node would refuse it.
	big := dir + "/big.wasm"
	pad := make([]byte, 2<<20)
	mod := append(readTestFile(t, builtPlugin(t, "testdata", "keyview1")), 0) // a custom section: id 0,
	mod = binary.AppendUvarint(mod, uint64(len(pad)+2))                       // its size (LEB128),
	mod = append(append(mod, 1, 'x'), pad...)                                 // a name and the padding
	if err := os.WriteFile(big, mod, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, nil, "plugin", "push", big, "--config", cfg); code != 1 {
		t.Fatalf("push of a module over the fold's plugin_max_mb: exit %d: %s", code, errOut)
	}
	code, out, errOut := runCLI(t, nil, "plugin", "push", builtPlugin(t, "testdata", "keyview1"), "--config", cfg)
	if code != 0 {
		t.Fatalf("plugin push: exit %d: %s", code, errOut)
	}
	var pushed struct{ Object, SHA256, Name string }
	if err := json.Unmarshal([]byte(out), &pushed); err != nil || pushed.Object != "nats-object://plugins/router" || len(pushed.SHA256) != 64 {
		t.Fatalf("plugin push printed %s (%v)", out, err)
	}
	waitFor(t, time.Minute, "the fold following", func() (bool, string) {
		st := foldStatusOf(t, d.base, "routes")
		return st["state"] == "following", fmt.Sprint(st["state"])
	})
	var recs []pluginobj.Record
	waitFor(t, time.Minute, "the node's record", func() (bool, string) {
		code, out, errOut := runCLI(t, nil, "plugins", "--config", cfg, "--json")
		if code != 0 {
			return false, errOut
		}
		recs = nil
		if err := json.Unmarshal([]byte(out), &recs); err != nil {
			return false, out
		}
		return len(recs) == 1 && recs[0].Module == pushed.SHA256, out
	})
	if r := recs[0]; r.Fold != "routes" || r.Node != "n1" || r.Name != pushed.Name {
		t.Errorf("record %+v", r)
	}
	code, out, errOut = runCLI(t, nil, "plugins", "--config", cfg)
	if code != 0 || !strings.Contains(out, "routes") || !strings.Contains(out, "n1") || !strings.Contains(out, pushed.SHA256[:12]) {
		t.Errorf("plugins: exit %d: %s %s", code, out, errOut)
	}
	// A record anyone could write, with a terminal escape in it.
	nc, err := natskv.Connect(natskv.ConnOptions{URL: "nats://" + natsAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), pluginobj.DefaultRecordBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "routes.evil", []byte(`{"fold":"routes","node":"e\u001b[2Jvil","module":"x"}`)); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI(t, nil, "plugins", "--config", cfg)
	if code != 0 || strings.Contains(out, "\x1b") || !strings.Contains(out, `"e\x1b[2Jvil"`) {
		t.Errorf("plugins printed a record's escape unescaped: %q", out)
	}
	if code, _, errOut := runCLI(t, nil, "plugin", "push", builtPlugin(t, "testdata", "keyview1"), "--to", "nats-object://x", "--config", cfg); code != 2 {
		t.Errorf("push to a malformed reference: exit %d: %s", code, errOut)
	}
}

func readTestFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
