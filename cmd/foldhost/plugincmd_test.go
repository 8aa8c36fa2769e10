package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/pluginobj"
)

// TestPluginPushAndList: with the embedded server, a daemon whose fold
// loads its module from the object store waits for the first push;
// `foldhost plugin push` refuses a file that is no plugin (nothing pushed)
// and uploads one that is; the fold starts with it, and `foldhost plugins`
// lists what the node runs.
func TestPluginPushAndList(t *testing.T) {
	dir := t.TempDir()
	cfgText := fmt.Sprintf(`[nats]
embedded_listen = %q
[http]
addr = %q
[admin]
node = "n1"
[[fold]]
name = "routes"
plugin = "nats-object://plugins/router"
`, freeAddr(t), freeAddr(t))
	d := startInProcess(t, dir, cfgText, nil)
	cfg := dir + "/config.toml"
	waitFor(t, time.Minute, "the daemon waiting for a module", func() (bool, string) {
		s := d.errb.String()
		return strings.Contains(s, "waiting for the plugin module to be pushed"), s
	})
	if code, out, errOut := runCLI(t, nil, "plugin", "push", builtPlugin(t, "testdata", "noexport"), "--config", cfg); code != 1 || !strings.Contains(errOut, "nothing pushed") {
		t.Fatalf("push of a module that is no plugin: exit %d: %s %s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, nil, "plugin", "push", builtPlugin(t, "testdata", "keyview1"), "--config", cfg)
	if code != 0 {
		t.Fatalf("plugin push: exit %d: %s", code, errOut)
	}
	var pushed struct{ Object, SHA256, Name string }
	if err := json.Unmarshal([]byte(out), &pushed); err != nil || pushed.Object != "nats-object://plugins/router" || len(pushed.SHA256) != 64 {
		t.Fatalf("plugin push printed %s (%v)", out, err)
	}
	d.waitAddrs(t, true)
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
	if code, _, errOut := runCLI(t, nil, "plugin", "push", builtPlugin(t, "testdata", "keyview1"), "--to", "nats-object://x", "--config", cfg); code != 2 {
		t.Errorf("push to a malformed reference: exit %d: %s", code, errOut)
	}
}
