package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAdminCommand: `foldhost admin ACTION` drives the running daemon's
// admin actions through its HTTP API: pause and resume act (the status
// says so), an action the fold's state rules out exits 1 naming the 409,
// and with FOLDHOST_ADMIN_TOKEN set for the daemon the command needs the
// same token (and `foldhost export` through the daemon sends it too).
func TestAdminCommand(t *testing.T) {
	dir := t.TempDir()
	cfgText := fmt.Sprintf("[nats]\nembedded_listen = \"127.0.0.1:0\"\n[http]\naddr = %q\n[[fold]]\nname = \"routes\"\n", freeAddr(t))
	env := map[string]string{"FOLDHOST_ADMIN_TOKEN": "s3cret\n"}
	d := runInProcessEnv(t, dir, cfgText, env)
	cfg := dir + "/config.toml"
	waitFor(t, time.Minute, "the fold ready", func() (bool, string) {
		st := foldStatusOf(t, d.base, "routes")
		return st["ready"] == true, fmt.Sprint(st["state"])
	})
	if code, _, errOut := runCLI(t, nil, "admin", "pause", "--config", cfg); code != 1 || !strings.Contains(errOut, "admin token") {
		t.Errorf("admin without the token: exit %d: %s", code, errOut)
	}
	if code, out, errOut := runCLI(t, env, "admin", "pause", "--config", cfg); code != 0 || !strings.Contains(out, `"action":"pause"`) {
		t.Fatalf("admin pause: exit %d: %s %s", code, out, errOut)
	}
	waitFor(t, time.Minute, "the fold paused", func() (bool, string) {
		st := foldStatusOf(t, d.base, "routes")
		return st["state"] == "paused", fmt.Sprint(st["state"])
	})
	if code, _, errOut := runCLI(t, env, "admin", "resume", "--config", cfg); code != 0 {
		t.Fatalf("admin resume: exit %d: %s", code, errOut)
	}
	waitFor(t, time.Minute, "the fold following", func() (bool, string) {
		st := foldStatusOf(t, d.base, "routes")
		return st["state"] == "following", fmt.Sprint(st["state"])
	})
	if code, _, errOut := runCLI(t, env, "admin", "resume", "--config", cfg); code != 1 || !strings.Contains(errOut, "409") {
		t.Errorf("resume of a following fold: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, env, "admin", "rebuild", "--config", cfg); code != 1 || !strings.Contains(errOut, "raw entries only") {
		t.Errorf("rebuild of a raw-only fold: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "export", "--config", cfg); code != 1 || !strings.Contains(errOut, "admin token") {
		t.Errorf("export through the daemon without the token: exit %d: %s", code, errOut)
	}
	if code, out, errOut := runCLI(t, env, "export", "--config", cfg); code != 0 || !strings.Contains(out, "skipped") {
		t.Errorf("export through the daemon with the token: exit %d: %s %s", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, env, "admin", "explode", "--config", cfg); code != 2 {
		t.Errorf("an unknown action: exit %d: %s", code, errOut)
	}
}
