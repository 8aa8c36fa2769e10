package host_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// multiAccountServer is a NATS server with two accounts: SVC (JetStream;
// foldhost's user "fh", and "mallory", who may publish anywhere, and
// "writer", who may not publish on the admin subjects) exports the admin
// subjects, OPS (user "alice") imports them with share: true, so the
// server stamps alice's identity on her requests (Nats-Request-Info).
// fhPermissions, if not "", are fh's permissions. It returns the server's
// host:port.
func multiAccountServer(t *testing.T, fhPermissions string) string {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `
listen: "127.0.0.1:-1"
jetstream: {store_dir: %q}
accounts: {
  SVC: {
    jetstream: enabled
    users: [
      {user: fh, password: fhpw%s}
      {user: mallory, password: mallorypw}
      {user: writer, password: writerpw, permissions: {publish: {deny: ["foldhost.admin.>"]}}}
    ]
    exports: [{service: "foldhost.admin.>"}]
  }
  OPS: {
    users: [{user: alice, password: alicepw}]
    imports: [{service: {account: SVC, subject: "foldhost.admin.>"}, share: true}]
  }
}
`, filepath.Join(dir, "js"), fhPermissions), 0o644); err != nil {
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

// adminCall sends one admin request as nc and returns the answer (for an
// error, its description) and its micro error code ("" for success).
func adminCall(t *testing.T, nc *nats.Conn, subject, body string, hdr nats.Header) (string, string) {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Data: []byte(body), Header: hdr}
	resp, err := nc.RequestMsg(msg, time.Minute)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	code := resp.Header.Get(micro.ErrorCodeHeader)
	if code != "" && len(resp.Data) == 0 {
		return resp.Header.Get(micro.ErrorHeader), code
	}
	return string(resp.Data), code
}

// TestAdminOverNATS: the admin service answers on <subject>.<node>.<action>
// and is discoverable as the "foldhost" micro service. A mutating action
// from another account, imported with share: true, is served and audited
// with the identity the server stamped (a header alice wrote herself is
// replaced by the server's); one with no identity, or with a header a
// client of foldhost's own account wrote naming that account, is refused
// (403, logged with the reason) unless allow_anonymous; reads need none. A
// user of foldhost's account denied publish on the admin subjects
// (docs/api.md's advice) cannot reach them at all. Mutations caught: the identity
// check removed (the anonymous pause acts); the audit taken from the
// request body; the header trusted whatever account it names (mallory's
// pause, claiming SVC, acts).
func TestAdminOverNATS(t *testing.T) {
	addr := multiAccountServer(t, "")
	var logs syncbuf.Buffer
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: "nats://fh:fhpw@" + addr}},
		Admin:  host.AdminOptions{NATS: true, Node: "n1"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Folds:  []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "testdata", "keyview1"), DataDir: filepath.Join(dir, "a")}},
	})
	f := r.H.Fold("routes")
	hosttest.WaitFor(t, func() bool { return f.Status().Ready })

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
	if msg, code := adminCall(t, own, "foldhost.admin.n1.status", `{"fold":"route"}`, nil); code != "404" ||
		!strings.Contains(msg, `no fold "route" on this node: its folds are "routes" (did you mean "routes"?)`) {
		t.Errorf("status of an unknown fold: %q %s", code, msg)
	}
	// No identity: refused, and nothing happens.
	if _, code := adminCall(t, own, "foldhost.admin.n1.pause", `{"fold":"routes"}`, nil); code != "403" {
		t.Errorf("an anonymous pause: code %q, want 403", code)
	}
	// Mallory, in foldhost's own account, writes the header herself: the
	// server leaves a header within one account alone.
	mallory, err := nats.Connect("nats://mallory:mallorypw@" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mallory.Close()
	forged := nats.Header{"Nats-Request-Info": []string{`{"acc":"SVC","user":"fh","name":"foldhost"}`}}
	if body, code := adminCall(t, mallory, "foldhost.admin.n1.pause", `{"fold":"routes"}`, forged); code != "403" || !strings.Contains(body, "names the host's own account") {
		t.Errorf("a pause with a header naming foldhost's own account: code %q %s, want 403", code, body)
	}
	if st := f.Status(); st.State != httpapi.StateFollowing {
		t.Fatalf("an anonymous or forged pause acted: %s", st.State)
	}
	if l := logs.String(); !strings.Contains(l, `msg="admin action refused: no caller identity the NATS server vouches for" action=pause fold=routes via=nats subject=foldhost.admin.n1.pause reason="the Nats-Request-Info header names the host's own account \"SVC\"`) ||
		!strings.Contains(l, `claimed_account=SVC claimed_user=fh`) {
		t.Errorf("the refusal's log line does not say why:\n%s", hosttest.GrepLines(l, "refused"))
	}
	// docs/api.md's advice for foldhost's own account: deny its other
	// users publish on the admin subjects. The server refuses the publish.
	denied := make(chan error, 1)
	writer, err := nats.Connect("nats://writer:writerpw@"+addr, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case denied <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if err := writer.PublishMsg(&nats.Msg{Subject: "foldhost.admin.n1.pause", Reply: "_INBOX.x", Data: []byte(`{"fold":"routes"}`), Header: forged}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-denied:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("the denied user's publish: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the server did not refuse the denied user's publish")
	}
	// Alice, through the import: served, audited as the server saw her
	// (the body's claims are not read, and the header she wrote herself
	// is replaced by the server's).
	aliceForged := nats.Header{"Nats-Request-Info": []string{`{"acc":"ROOT","user":"root"}`}}
	if body, code := adminCall(t, alice, "foldhost.admin.n1.pause", `{"fold":"routes","user":"mallory"}`, aliceForged); code != "" {
		t.Fatalf("alice's pause: %s %s", code, body)
	}
	hosttest.WaitState(t, f, httpapi.StatePaused)
	if l := logs.String(); !strings.Contains(l, `msg="admin action" action=pause fold=routes via=nats admitted_by=server_identity account=OPS user=alice client=alice-cli`) {
		t.Errorf("audit line missing:\n%s", hosttest.GrepLines(l, "admin action"))
	}
	if l := logs.String(); !strings.Contains(l, `msg="admin service on NATS" subject=foldhost.admin.n1.> account=SVC`) {
		t.Errorf("the service's start line does not name its account:\n%s", hosttest.GrepLines(l, "admin service"))
	}
	if _, code := adminCall(t, alice, "foldhost.admin.n1.resume", `{"fold":"routes"}`, nil); code != "" {
		t.Fatalf("alice's resume: %s", code)
	}
	hosttest.WaitState(t, f, httpapi.StateFollowing)
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
// carries an identity the server vouches for, a Nats-Request-Info header
// the client wrote included: mutating actions are refused until
// allow_anonymous, and then audited as anonymous, never with the claimed
// identity. Mutations caught: a forged header trusted (mallory's pause
// acts without allow_anonymous, or is audited as account=OPS user=mallory).
func TestAdminOverNATSAnonymous(t *testing.T) {
	forged := nats.Header{"Nats-Request-Info": []string{`{"acc":"OPS","user":"mallory","name":"cli"}`}}
	for _, allow := range []bool{false, true} {
		for _, hdr := range []nats.Header{nil, forged} {
			t.Run(fmt.Sprint("allow_anonymous=", allow, ",forged=", hdr != nil), func(t *testing.T) {
				url, _ := hosttest.NATSServer(t)
				var logs syncbuf.Buffer
				r := hosttest.StartHost(t, host.Options{
					NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
					Admin:  host.AdminOptions{NATS: true, Node: "n1", AllowAnonymous: allow},
					Logger: slog.New(slog.NewTextHandler(&logs, nil)),
					Folds:  []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(t.TempDir(), "a")}},
				})
				f := r.H.Fold("routes")
				hosttest.WaitFor(t, func() bool { return f.Status().Ready })
				nc, err := nats.Connect(url)
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				body, code := adminCall(t, nc, "foldhost.admin.n1.pause", `{"fold":"routes"}`, hdr)
				if allow && code != "" || !allow && code != "403" {
					t.Fatalf("pause: code %q %s", code, body)
				}
				l := logs.String()
				if strings.Contains(l, " account=OPS") || strings.Contains(l, " user=mallory") {
					t.Errorf("the claimed identity was taken for the caller's:\n%s", hosttest.GrepLines(l, "admin action"))
				}
				why := "no caller identity"
				if hdr != nil {
					why = "the host's NATS account is the global one"
				}
				if !allow {
					if !strings.Contains(body, why) || !strings.Contains(l, `msg="admin action refused: no caller identity the NATS server vouches for"`) {
						t.Errorf("the refusal does not say why (%q): %s\n%s", why, body, hosttest.GrepLines(l, "admin action"))
					}
					if st := f.Status(); st.State != httpapi.StateFollowing {
						t.Fatalf("a refused pause acted: %s", st.State)
					}
					return
				}
				hosttest.WaitState(t, f, httpapi.StatePaused)
				if !strings.Contains(l, `msg="admin action" action=pause fold=routes via=nats admitted_by=allow_anonymous untrusted=`) {
					t.Errorf("the audit does not say how the caller was admitted:\n%s", hosttest.GrepLines(l, "admin action"))
				}
				if hdr != nil && !strings.Contains(l, "claimed_account=OPS claimed_user=mallory") {
					t.Errorf("the audit does not keep the claim apart:\n%s", hosttest.GrepLines(l, "admin action"))
				}
			})
		}
	}
}

// TestAdminOverNATSUnknownAccount: a host whose user may not ask the server
// for its own account ($SYS.REQ.USER.INFO denied) cannot tell the server's
// header from a client's: even alice's request through the import is
// refused, saying why, and the start warns. Mutation caught: an unknown
// account taken as "another account" (alice's pause acts).
func TestAdminOverNATSUnknownAccount(t *testing.T) {
	addr := multiAccountServer(t, `, permissions: {publish: {deny: ["$SYS.REQ.USER.INFO"]}}`)
	var logs syncbuf.Buffer
	r := hosttest.StartHost(t, host.Options{
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: "nats://fh:fhpw@" + addr}, RequestTimeout: time.Second},
		Admin:  host.AdminOptions{NATS: true, Node: "n1"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Folds:  []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(t.TempDir(), "a")}},
	})
	f := r.H.Fold("routes")
	hosttest.WaitFor(t, func() bool { return f.Status().Ready })
	if l := logs.String(); !strings.Contains(l, "could not learn the host's NATS account; no caller identity is trusted") {
		t.Errorf("no warning at start:\n%s", hosttest.GrepLines(l, "admin service"))
	}
	alice, err := nats.Connect("nats://alice:alicepw@" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	if body, code := adminCall(t, alice, "foldhost.admin.n1.pause", `{"fold":"routes"}`, nil); code != "403" || !strings.Contains(body, "could not learn its own NATS account") {
		t.Errorf("alice's pause with the host's account unknown: code %q %s, want 403", code, body)
	}
}
