package effects_test

import (
	"bufio"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/testhook"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// TestEffectsARestoreKilledAfterItsLastCommitKeepsItsPoint: a replica
// whose cursor expired restores from the other replica's artifact (whose
// node holds unpublished effects), in a child process SIGKILLed right
// after the restore's last commit. Restarted, it resumes from the
// artifact's cursor still held at the artifact's last effect, and the
// effect of a write past that cursor is its own: kept, not dropped. Then
// the other publishes its effects, and the stream holds every effect of
// the history once. Mutation caught: the hold's point recorded when the
// restore ends instead of at its start (the restart finds the hold
// syncing, drops the write's effect, and points at its catch-up).
func TestEffectsARestoreKilledAfterItsLastCommitKeepsItsPoint(t *testing.T) {
	srv, conn := natstest.Start(t)
	url := srv.ClientURL()
	b, _, s := effectsBucketAndStream(t, conn, 1)
	var block atomic.Bool // the other replica publishes nothing
	testhook.Set(t, &testhook.EffectsStep, func(ctx context.Context, step string) {
		if step == "before-publish" && block.Load() {
			<-ctx.Done()
		}
	})
	artifacts := filepath.Join(t.TempDir(), "artifacts")
	store, err := dirstore.New(artifacts)
	if err != nil {
		t.Fatal(err)
	}
	plugin := hosttest.BuiltPlugin(t, "example-router", "router-c")
	// The child's fold (killEffectsEnv): the same options.
	opts := func(dir string) host.Options {
		fo := host.FoldOptions{Name: "routes", Plugin: plugin, DataDir: dir, Repair: protocol.RepairRestore, EffectsStream: "EV", BatchSize: 1, Sync: true}
		return host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo},
			Artifacts: host.ArtifactOptions{Store: store, Where: "test", Holder: "t"}}
	}
	p := foldBesideThenStop(t, b, s, opts, 4)
	m, set, behindDir, otherDir, other, last := p.m, p.set, p.behindDir, p.otherDir, p.other, p.last
	block.Store(true)
	// Every revision up to behind's cursor and the next is superseded:
	// its cursor expires.
	for i := range 4 {
		set(fmt.Sprintf("h%d", i), "10.0.0.2:80")
	}
	last = set("h0", "10.0.0.3:80")
	hosttest.WaitCursor(t, other.H.Fold("routes"), last)
	if _, err := other.H.Fold("routes").Export(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if err := other.Stop(t); err != nil {
		t.Fatal(err)
	}
	block.Store(false)
	artifactAt := last
	past := set("h5", "10.0.0.5:80") // past the artifact's cursor

	cmd, out, stderr := hosttest.StartChild(t, killEffectsEnv+"=restore-done-1", killEffectsURL+"="+url, killEffectsDir+"="+behindDir,
		killEffectsPlugin+"="+plugin, killEffectsArtifacts+"="+artifacts)
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() { // ends when the child is gone
		lines = append(lines, sc.Text())
	}
	werr := cmd.Wait()
	if !strings.Contains(strings.Join(lines, "\n"), "killing") {
		t.Fatalf("the child was not killed after its restore (%v; out %q): %s", werr, lines, stderr.String())
	}

	behind := hosttest.StartHost(t, opts(behindDir))
	f := behind.H.Fold("routes")
	hosttest.WaitCursor(t, f, past)
	st := f.Status()
	if st.Repairs.Last != nil {
		t.Errorf("the restarted replica repaired again (%+v): the killed restore's last commit should stand", *st.Repairs.Last)
	}
	if want := fmt.Sprintf("until the fence covers %d/", artifactAt); !strings.Contains(st.Effects.Held, want) {
		t.Errorf("after the kill the hold is %q, want %q (the artifact's last effect)", st.Effects.Held, want)
	}
	if st.Effects.DroppedJoining != 0 || hosttest.OutboxLen(f) == 0 {
		t.Errorf("after the kill %d effects were dropped, outbox %d: want the write past the artifact's cursor kept",
			st.Effects.DroppedJoining, hosttest.OutboxLen(f))
	}
	other = hosttest.StartHost(t, opts(otherDir))
	set("h6", "10.0.0.6:80")
	waitEffects(t, s, other.H.Fold("routes"), len(m.want))
	hosttest.WaitFor(t, func() bool { return f.Status().Effects.Held == "" && hosttest.OutboxLen(f) == 0 })
	if d := diffEffects(streamEffects(t, s), m.want); d != "" {
		t.Fatalf("a restore killed after its last commit: %s", d)
	}
}
