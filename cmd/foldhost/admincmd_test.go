package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
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

// TestAdminOnAWildcardListener: with [http] addr on 0.0.0.0, a POST from
// this machine (to 127.0.0.1, a loopback connection) is refused without the
// admin token, as the start-up warning says, and served with it. Mutations
// caught: the listener's address not consulted (the token-less POST acts);
// the server's Addr not set to it (the refusal names an unknown listener).
func TestAdminOnAWildcardListener(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		t.Run("token="+token, func(t *testing.T) {
			dir := t.TempDir()
			_, port, _ := net.SplitHostPort(freeAddr(t))
			cfgText := fmt.Sprintf("[nats]\nembedded_listen = \"127.0.0.1:0\"\n[http]\naddr = \"0.0.0.0:%s\"\n[[fold]]\nname = \"routes\"\n", port)
			env := map[string]string{}
			if token != "" {
				env["FOLDHOST_ADMIN_TOKEN"] = token
			}
			d := runInProcessEnv(t, dir, cfgText, env)
			if !strings.Contains(d.errb.String(), "the HTTP API listens beyond loopback") {
				t.Errorf("no start-up warning:\n%s", d.errb.String())
			}
			local := "http://127.0.0.1:" + port
			waitFor(t, time.Minute, "the fold ready", func() (bool, string) {
				st := foldStatusOf(t, local, "routes")
				return st["ready"] == true, fmt.Sprint(st["state"])
			})
			post := func(auth string) (int, string) {
				req, _ := http.NewRequest(http.MethodPost, local+"/v1/folds/routes/pause", nil)
				if auth != "" {
					req.Header.Set("Authorization", "Bearer "+auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			want := "beyond loopback" // the refusal says why
			if token != "" {
				want = "needs the admin token"
			}
			if code, body := post(""); code != http.StatusForbidden || !strings.Contains(body, want) {
				t.Errorf("a token-less POST from 127.0.0.1 to a 0.0.0.0 listener: %d %s", code, body)
			}
			if st := foldStatusOf(t, local, "routes"); st["state"] != "following" {
				t.Fatalf("the refused pause acted: %v", st["state"])
			}
			if token == "" {
				return
			}
			if code, body := post(token); code != http.StatusOK {
				t.Errorf("a POST with the token: %d %s", code, body)
			}
		})
	}
}
