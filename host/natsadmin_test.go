package host_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// multiAccountServer is a NATS server with two accounts: SVC (JetStream;
// foldhost's user "fh") exports the admin subjects, OPS (user "alice")
// imports them with share: true, so the server stamps alice's identity on
// her requests (Nats-Request-Info). It returns the server's host:port.
func multiAccountServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `
listen: "127.0.0.1:-1"
jetstream: {store_dir: %q}
accounts: {
  SVC: {
    jetstream: enabled
    users: [{user: fh, password: fhpw}]
    exports: [{service: "foldhost.admin.>"}]
  }
  OPS: {
    users: [{user: alice, password: alicepw}]
    imports: [{service: {account: SVC, subject: "foldhost.admin.>"}, share: true}]
  }
}
`, filepath.Join(dir, "js")), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(time.Minute) {
		t.Fatal("the NATS server did not start")
	}
	return srv.Addr().String()
}

// adminCall sends one admin request as nc and returns the answer and its
// micro error code ("" for success).
func adminCall(t *testing.T, nc *nats.Conn, subject, body string, hdr nats.Header) (string, string) {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Data: []byte(body), Header: hdr}
	resp, err := nc.RequestMsg(msg, time.Minute)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	return string(resp.Data), resp.Header.Get(micro.ErrorCodeHeader)
}

// TestAdminOverNATS: the admin service answers on <subject>.<node>.<action>
// and is discoverable as the "foldhost" micro service. A mutating action
// from another account, imported with share: true, is served and audited
// with the identity the server stamped; one with no identity (a client of
// foldhost's own account) is refused (403) unless allow_anonymous; reads
// need none. Mutations caught: the identity check removed (the anonymous
// pause acts); the audit taken from the request body.
func TestAdminOverNATS(t *testing.T) {
	addr := multiAccountServer(t)
	var logs syncbuf.Buffer
	dir := t.TempDir()
	r := startHost(t, host.Options{
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: "nats://fh:fhpw@" + addr}},
		Admin:  host.AdminOptions{NATS: true, Node: "n1"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Folds:  []host.FoldOptions{{Name: "routes", Plugin: builtPlugin(t, "testdata", "keyview1"), DataDir: filepath.Join(dir, "a")}},
	})
	f := r.h.Fold("routes")
	waitFor(t, func() bool { return f.Status().Ready })

	own, err := nats.Connect("nats://fh:fhpw@" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	alice, err := nats.Connect("nats://alice:alicepw@"+addr, nats.Name("alice-cli"))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()

	// Discovery, as `nats micro info foldhost` does it.
	subj, err := micro.ControlSubject(micro.InfoVerb, "foldhost", "")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := adminCall(t, own, subj, "", nil)
	if !strings.Contains(info, `"foldhost.admin.n1.pause"`) || !strings.Contains(info, `"node":"n1"`) {
		t.Errorf("service info: %s", info)
	}

	// Reads need no identity.
	if body, code := adminCall(t, own, "foldhost.admin.n1.status", `{"fold":"routes"}`, nil); code != "" || !strings.Contains(body, `"state":"following"`) {
		t.Errorf("status: %s %s", code, body)
	}
	if _, code := adminCall(t, own, "foldhost.admin.n1.status", `{"fold":"nope"}`, nil); code != "404" {
		t.Errorf("status of an unknown fold: %q", code)
	}
	// No identity: refused, and nothing happens.
	if _, code := adminCall(t, own, "foldhost.admin.n1.pause", `{"fold":"routes"}`, nil); code != "403" {
		t.Errorf("an anonymous pause: code %q, want 403", code)
	}
	if st := f.Status(); st.State != httpapi.StateFollowing {
		t.Fatalf("an anonymous pause acted: %s", st.State)
	}
	// Alice, through the import: served, audited as the server saw her
	// (the body's claims are not read).
	if body, code := adminCall(t, alice, "foldhost.admin.n1.pause", `{"fold":"routes","user":"mallory"}`, nil); code != "" {
		t.Fatalf("alice's pause: %s %s", code, body)
	}
	waitState(t, f, httpapi.StatePaused)
	if l := logs.String(); !strings.Contains(l, `msg="admin action" action=pause fold=routes via=nats account=OPS user=alice client=alice-cli`) {
		t.Errorf("audit line missing:\n%s", grepLines(l, "admin action"))
	}
	if _, code := adminCall(t, alice, "foldhost.admin.n1.resume", `{"fold":"routes"}`, nil); code != "" {
		t.Fatalf("alice's resume: %s", code)
	}
	waitState(t, f, httpapi.StateFollowing)
	if _, code := adminCall(t, alice, "foldhost.admin.n1.resume", `{"fold":"routes"}`, nil); code != "409" {
		t.Errorf("resume of a following fold: %q, want 409", code)
	}
	var folds struct {
		Node  string
		Folds []httpapi.Status
	}
	body, _ := adminCall(t, alice, "foldhost.admin.n1.folds", "", nil)
	if err := json.Unmarshal([]byte(body), &folds); err != nil || folds.Node != "n1" || len(folds.Folds) != 1 {
		t.Errorf("folds: %s (%v)", body, err)
	}
}

// TestAdminOverNATSAnonymous: on the embedded, auth-less server no request
// carries an identity: mutating actions are refused until allow_anonymous.
func TestAdminOverNATSAnonymous(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprint("allow_anonymous=", allow), func(t *testing.T) {
			url, _ := natsServer(t)
			r := startHost(t, host.Options{
				NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
				Admin: host.AdminOptions{NATS: true, Node: "n1", AllowAnonymous: allow},
				Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(t.TempDir(), "a")}},
			})
			f := r.h.Fold("routes")
			waitFor(t, func() bool { return f.Status().Ready })
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_, code := adminCall(t, nc, "foldhost.admin.n1.pause", `{"fold":"routes"}`, nil)
			if allow && code != "" || !allow && code != "403" {
				t.Fatalf("pause: code %q", code)
			}
			if allow {
				waitState(t, f, httpapi.StatePaused)
			}
		})
	}
}
