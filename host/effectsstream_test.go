package host_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
)

// effectsOptions is a host on url with the C router's fold publishing its
// effects (route.changed) to stream.
func effectsOptions(t *testing.T, url, stream string, create *host.EffectsStreamConfig) host.Options {
	return host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"),
			DataDir: filepath.Join(t.TempDir(), "routes"), EffectsStream: stream, EffectsSubjects: []string{"route.changed"},
			CreateEffectsStream: create}}}
}

// runFix runs the nats CLI command a refusal names (its line starting
// with "nats ") against the server at url, through a shell, as a user
// would paste it.
func runFix(t *testing.T, url string, refusal error) {
	t.Helper()
	bin := os.Getenv("FOLDHOST_NATS_CLI")
	if bin == "" {
		t.Fatal("FOLDHOST_NATS_CLI is not set: the refusal's nats command runs through the nats CLI (scripts/test installs it into bin/)")
	}
	var cmd string
	for _, l := range strings.Split(refusal.Error(), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "nats stream ") {
			cmd = l
		}
	}
	if cmd == "" {
		t.Fatalf("the refusal names no nats command:\n%v", refusal)
	}
	c := exec.Command("sh", "-c", "'"+bin+"' --server '"+url+"' "+strings.TrimPrefix(cmd, "nats "))
	home := t.TempDir()
	c.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
}

// TestEffectsStreamRefusalListsEverything: a start refused for its effects
// stream names everything the stream lacks at once (not the first thing,
// then the next at the next start), with a nats CLI command that fixes
// all of it: running that command (the real CLI) makes the next start
// succeed. A stream of another retention, which no edit changes, is told
// to be replaced. Without the check, the publisher refused one
// requirement at a time, with no command.
func TestEffectsStreamRefusalListsEverything(t *testing.T) {
	url, _ := hosttest.NATSServer(t)
	js := hosttest.JS(t, url)

	// A missing stream: the add command.
	err := hosttest.StartErr(t, effectsOptions(t, url, "FX", nil))
	if err == nil || !strings.Contains(err.Error(), `effects_stream "FX" does not exist`) || !strings.Contains(err.Error(), "[fold.create_effects_stream]") ||
		!strings.Contains(err.Error(), "nats stream add FX --subjects route.changed --subjects foldhost.fence.routes --retention limits --allow-batch --defaults") {
		t.Fatalf("a missing stream: %v", err)
	}
	runFix(t, url, err)
	if err := hosttest.StartErr(t, effectsOptions(t, url, "FX", nil)); err != nil {
		t.Fatalf("after the printed nats stream add: %v", err)
	}

	// A stream that lacks three things: all three, and one edit. (Each
	// stream goes after its part: streams may not share subjects.)
	if err := js.DeleteStream(context.Background(), "FX"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "BAD", Subjects: []string{"other.>"}}); err != nil {
		t.Fatal(err)
	}
	err = hosttest.StartErr(t, effectsOptions(t, url, "BAD", nil))
	for _, want := range []string{
		`effects_stream "BAD" cannot take the fold's effects:`,
		"  - it does not allow atomic batch publishing",
		`  - it does not capture ["route.changed" "foldhost.fence.routes"] (it captures ["other.>"])`,
		"nats stream edit BAD --subjects 'other.>' --subjects route.changed --subjects foldhost.fence.routes --allow-batch --force",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("an unfit stream: %v\nwant %q", err, want)
		}
	}
	runFix(t, url, err)
	if err := hosttest.StartErr(t, effectsOptions(t, url, "BAD", nil)); err != nil {
		t.Fatalf("after the printed nats stream edit: %v", err)
	}

	// Interest retention: no edit changes it.
	if err := js.DeleteStream(context.Background(), "BAD"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "INT", Retention: jetstream.InterestPolicy,
		Subjects: []string{"route.changed", "foldhost.fence.>"}, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	err = hosttest.StartErr(t, effectsOptions(t, url, "INT", nil))
	if err == nil || !strings.Contains(err.Error(), "a stream's retention cannot change: make another one, and name it in effects_stream") ||
		!strings.Contains(err.Error(), "nats stream add INT_EFFECTS ") {
		t.Errorf("an interest stream: %v", err)
	}
}

// TestEffectsStreamCreated: with create_effects_stream, a missing effects
// stream is created at the start, fit for the effects (the subjects and
// the fence captured, atomic batches, limits retention, the replicas and
// storage asked), and the fold's effects land in it. Without the option
// the start is refused (TestEffectsStreamRefusalListsEverything): with
// the embedded server, whose streams live only while foldhost runs, that
// left no way in.
func TestEffectsStreamCreated(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	r := hosttest.StartHost(t, effectsOptions(t, url, "NEW", &host.EffectsStreamConfig{Memory: true}))
	s, err := hosttest.JS(t, url).Stream(context.Background(), "NEW")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowAtomicPublish || cfg.Retention != jetstream.LimitsPolicy || cfg.Replicas != 1 || cfg.Storage != jetstream.MemoryStorage ||
		!slices.Equal(cfg.Subjects, []string{"route.changed", "foldhost.fence.routes"}) {
		t.Fatalf("the created stream: %+v", cfg)
	}
	rev := hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80"}]}`)
	hosttest.WaitCursor(t, r.H.Fold("routes"), rev)
	hosttest.WaitFor(t, func() bool {
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 2 // the effect and its fence
	})
}
