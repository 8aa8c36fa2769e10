package effects_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/natskv"
)

// auditEffect is one effect: its id and "op|payload".
type auditEffect struct{ id, body string }

// routerHistoryEffects reads every message of the bucket's stream (none may
// have been removed) and returns the effects the example router emits
// folding them one update per batch: one per change of a host's entry, id
// "routes/<revision>/0".
func routerHistoryEffects(t *testing.T, js jetstream.JetStream, bucket string) (want []auditEffect, last uint64) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != 1 || info.State.Msgs != info.State.LastSeq {
		t.Fatalf("the bucket's stream lost history (%+v): the expected effects cannot be computed", info.State)
	}
	entries := map[string]string{}
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		h := strings.TrimPrefix(m.Subject, "$KV."+bucket+".route.")
		id := fmt.Sprintf("routes/%d/0", seq)
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			if _, ok := entries[h]; ok {
				want = append(want, auditEffect{id, "delete|" + h + "\n"})
			}
			delete(entries, h)
			continue
		}
		var v struct {
			Upstreams []struct {
				Addr   string `json:"addr"`
				Weight int    `json:"weight"`
			} `json:"upstreams"`
		}
		if err := json.Unmarshal(m.Data, &v); err != nil || len(v.Upstreams) != 1 {
			t.Fatalf("message %d: %q: %v", seq, m.Data, err)
		}
		e := fmt.Sprintf("%s=%d", v.Upstreams[0].Addr, v.Upstreams[0].Weight)
		if old, ok := entries[h]; !ok || old != e {
			want = append(want, auditEffect{id, "put|" + h + "\n" + e})
		}
		entries[h] = e
	}
	return want, info.State.LastSeq
}

// streamAudit reads the effects stream's route.changed messages in order.
func streamAudit(t *testing.T, s jetstream.Stream) []auditEffect {
	t.Helper()
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []auditEffect
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == "route.changed" {
			got = append(got, auditEffect{m.Header.Get("Foldhost-Effect-Id"), m.Header.Get("Route-Op") + "|" + string(m.Data)})
		}
	}
	return got
}

// auditDiff names duplicate and missing ids and the first difference.
func auditDiff(got, want []auditEffect) string {
	seen, dups := map[string]bool{}, 0
	for _, e := range got {
		if seen[e.id] {
			dups++
		}
		seen[e.id] = true
	}
	missing := 0
	for _, e := range want {
		if !seen[e.id] {
			missing++
		}
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("%d effects, want %d: %d duplicate ids, %d missing; first difference at %d: %q, want %q", len(got), len(want), dups, missing, i, got[i], want[i])
		}
	}
	if len(got) != len(want) || dups+missing > 0 {
		return fmt.Sprintf("%d effects, want %d: %d duplicate ids, %d missing", len(got), len(want), dups, missing)
	}
	return ""
}

// TestEffectsAudit: the router fold (one update per batch, so the effects
// of a history are known exactly) publishes to a stream whose duplicate
// window is 1 s, while a writer changes routes and the host is SIGKILLed
// 57 times: a third by the host itself right after the stream
// acknowledged a batch and before the outbox let go of it, a third right
// before it sends a batch it read from the outbox, a third at random
// moments; twice, the NATS server is down for three duplicate windows
// while a host runs. In the end the stream holds exactly the effects the
// plugin emits for the bucket's final history, each id once, in order.
// Mutations caught: a publisher that ignores what the fence covers
// (thousands of duplicates), one that deletes a chunk before publishing
// it (the before-publish kills lose it).
func TestEffectsAudit(t *testing.T) {
	kills := 57
	if raceEnabled {
		kills = 12 // the race detector watches the same code on every kill at a tenth of the speed (race_on_test.go)
	}
	effectsAudit(t, kills, 0)
}

// TestEffectsAuditBesideAReplica: the audit with a second replica of the
// fold beside the killed host, running throughout, folding up to 64
// updates a batch (open 200 ms) and publishing to the same stream: half the kills right
// before the killed host sends a batch, half at random. The stream holds
// each effect of the history once: the two outboxes hold the same effects
// under the same ids (they name their updates), and the fence lets each
// land once whoever sends it, whenever the other dies. Mutation caught:
// effects filed under their batch's revision (the replica's ids differ
// from the killed host's: effects land twice).
func TestEffectsAuditBesideAReplica(t *testing.T) {
	kills := 20
	if raceEnabled {
		kills = 6
	}
	effectsAudit(t, kills, 64)
}

// effectsAudit runs the audit with kills kills of the host, and beside it,
// when replicaBatch > 0, a replica of the fold in this process folding up
// to replicaBatch updates a batch.
func effectsAudit(t *testing.T, kills, replicaBatch int) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	const window = time.Second
	dir, port := t.TempDir(), hosttest.FreePort(t)
	var srv *embeddednats.Server
	startServer := func() {
		var err error
		if srv, err = embeddednats.Start(embeddednats.Options{Dir: dir, Port: port, StartTimeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	startServer()
	t.Cleanup(func() { srv.Shutdown() })
	url := srv.ClientURL()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes", History: 64}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := hosttest.EffectsStream("EV", "route.changed")
	cfg.Duplicates = window
	ev, err := js.CreateStream(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// sync: a delete or commit is durable when it returns, so a publisher
	// that deletes out of order cannot hide behind pebble's write buffer
	// dying with the process.
	plugin, data := hosttest.BuiltPlugin(t, "example-router", "router-c"), filepath.Join(t.TempDir(), "routes")
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: plugin, DataDir: data, EffectsStream: "EV", BatchSize: 1, Sync: true}}}

	// The fold starts on the empty bucket and folds a first key, so every
	// later start resumes from a cursor (each revision delivered, none
	// collapsed by a first state-sync).
	r := hosttest.StartHost(t, o)
	hosttest.WaitState(t, r.H.Fold("routes"), "following")
	hosttest.WaitCursor(t, r.H.Fold("routes"), hosttest.Put(t, b, "route.seed", `{"upstreams":[{"addr":"10.9.0.1:80","weight":1}]}`))
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	// A replica starts from a copy of that store: replicas must fold the
	// same history (docs/effects.md, "Replicas": one that hydrated the
	// bucket's state instead would file the collapsed change under ids of
	// its own, and could cover the other's unpublished effects).
	replicaData := filepath.Join(t.TempDir(), "replica")
	if replicaBatch > 0 {
		if err := os.CopyFS(replicaData, os.DirFS(data)); err != nil {
			t.Fatal(err)
		}
	}

	// The writer: until stopped, a route change every 20 ms, retried
	// through the outages (what reached the stream is read back at the end).
	stop, written := make(chan struct{}), make(chan int)
	go func() {
		wr := rand.New(rand.NewPCG(uint64(seed), 2))
		n := 0
		defer func() { written <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			h := fmt.Sprintf("route.h%03d", wr.IntN(150))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var err error
			if wr.IntN(5) == 0 {
				err = b.KV().Delete(ctx, h)
			} else {
				_, err = b.KV().Put(ctx, h, fmt.Appendf(nil, `{"upstreams":[{"addr":"10.0.0.%d:80","weight":%d}]}`, wr.IntN(3), 1+wr.IntN(2)))
			}
			cancel()
			if err == nil {
				n++
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-written
		}
	}()

	// The replica publishes throughout; the killed host's batches are
	// acknowledged only when it wins the fence, so beside a replica it is
	// killed before its publishes and at random, never after an ack.
	var replica *hosttest.Running
	if replicaBatch > 0 {
		ro := o
		ro.Folds = []host.FoldOptions{o.Folds[0]}
		// A batch stays open 200 ms: the writer's 20 ms pace fills it.
		ro.Folds[0].DataDir, ro.Folds[0].BatchSize, ro.Folds[0].BatchWindow = replicaData, replicaBatch, 200*time.Millisecond
		replica = hosttest.StartHost(t, ro)
		defer func() {
			if err := replica.Stop(t); err != nil {
				t.Error(err)
			}
		}()
	}
	selfKills, publicationKills := 0, 0
	for i := 0; i < kills; i++ {
		mode := "run"
		switch {
		case replicaBatch > 0 && i%2 == 0:
			mode = fmt.Sprintf("before-publish-%d", 1+rng.IntN(3))
		case replicaBatch > 0:
		case i%3 == 0:
			mode = fmt.Sprintf("after-ack-%d", 1+rng.IntN(3))
		case i%3 == 1:
			mode = fmt.Sprintf("before-publish-%d", 1+rng.IntN(3))
		}
		if mode != "run" {
			publicationKills++
		}
		cmd, out, stderr := hosttest.StartChild(t, killEffectsEnv+"="+mode, killEffectsURL+"="+url, killEffectsDir+"="+data, killEffectsPlugin+"="+plugin)
		started, acked, scanned := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() { // ends when the pipe closes
			defer close(scanned)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				switch sc.Text() {
				case "started":
					close(started)
				case "killing":
					close(acked)
				}
			}
		}()
		exited := make(chan error, 1)
		var waitOnce sync.Once
		wait := func() error {
			waitOnce.Do(func() { <-scanned; exited <- cmd.Wait() })
			return <-exited
		}
		select {
		case <-started:
		case <-scanned:
		case <-time.After(2 * time.Minute): // against a hang
			t.Errorf("kill %d: the child did not start", i)
		}
		if i == 14 || i == 42 { // an outage longer than the duplicate window
			srv.Shutdown()
			time.Sleep(3 * window)
			startServer()
		}
		if mode == "run" {
			select {
			case <-scanned:
			case <-time.After(time.Duration(50+rng.IntN(450)) * time.Millisecond):
			}
		} else {
			select {
			case <-acked:
				selfKills++
			case <-scanned:
			case <-time.After(2 * time.Minute): // against a hang
				t.Errorf("kill %d (%s): no batch acknowledged", i, mode)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err = wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
			t.Fatalf("kill %d (%s): the child ended with %v, not killed: %s", i, mode, err, stderr.String())
		}
		if t.Failed() {
			t.Fatalf("child stderr: %s", stderr.String())
		}
	}
	close(stop)
	n := <-written
	if selfKills < publicationKills {
		t.Fatalf("only %d of %d kills came between an outbox read and its publish or an ack and its delete", selfKills, publicationKills)
	}

	want, last := routerHistoryEffects(t, js, "routes")
	r = hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	hosttest.WaitCursor(t, f, last)
	hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(f) == 0 })
	if replica != nil {
		rf := replica.H.Fold("routes")
		hosttest.WaitCursor(t, rf, last)
		hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(rf) == 0 })
		t.Logf("the replica: %d batches; effects %+v", rf.Status().Counters.Batches, rf.Status().Effects)
		if b := rf.Status().Counters.Batches; b*2 > uint64(len(want)) {
			t.Fatalf("the replica folded %d updates in %d batches: it batched about as the killed host did, the audit proves nothing of batching", len(want), b)
		}
	}
	got := streamAudit(t, ev)
	t.Logf("%d writes, %d kills (%d at a publication step), %d effects; status %+v", n, kills, selfKills, len(got), f.Status().Effects)
	if d := auditDiff(got, want); d != "" {
		t.Fatal(d)
	}
	// At least 200 effects for the 57 kills, in proportion for fewer (the
	// writer's pace is fixed; with compiled plugins cached, a kill's
	// restart is quick).
	if least := 200 * kills / 57; len(want) < least {
		t.Fatalf("only %d effects (want %d or more): the audit hardly tested anything", len(want), least)
	}
}

// TestEffectsAcrossStreamLeaderChanges: on a 3-node cluster (R3 bucket, R3
// effects stream), two replicas of the router fold (one update per batch)
// publish to one stream while a writer changes routes and the effects
// stream's leader is made to step down three times. The stream ends with
// exactly the effects the plugin emits for the bucket's history, each id
// once, in order: a batch whose ack a leader change lost, or that the
// other replica's batch overtook (error 10164 on a replicated stream),
// is resolved through the fence.
func TestEffectsAcrossStreamLeaderChanges(t *testing.T) {
	t.Parallel() // it waits on elections: the wait overlaps the other waiting tests (scripts/test runs four at once)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 3))
	c := hosttest.StartCluster(t, 3)
	client := hosttest.Conn(t, c.URLs())
	js, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	kv := hosttest.Retry(t, "create the R3 bucket", func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "routes", History: 64, Replicas: 3})
	})
	cfg := hosttest.EffectsStream("EV", "route.changed")
	cfg.Replicas = 3
	ev := hosttest.Retry(t, "create the R3 effects stream", func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, cfg)
	})
	plugin, base := hosttest.BuiltPlugin(t, "example-router", "router-c"), t.TempDir()
	var folds []*host.Fold
	for _, node := range []string{"a", "b"} {
		r := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: c.URLs(), Name: node}},
			Folds: []host.FoldOptions{{Name: "routes", Plugin: plugin, DataDir: filepath.Join(base, node), EffectsStream: "EV", BatchSize: 1}}})
		folds = append(folds, r.H.Fold("routes"))
		hosttest.WaitState(t, folds[len(folds)-1], "following")
	}
	var last uint64
	for i := range 400 {
		h := fmt.Sprintf("route.h%03d", rng.IntN(60))
		if rng.IntN(5) == 0 {
			hosttest.Retry(t, "delete", func(ctx context.Context) (struct{}, error) { return struct{}{}, kv.Delete(ctx, h) })
		} else {
			v := fmt.Appendf(nil, `{"upstreams":[{"addr":"10.0.0.%d:80","weight":%d}]}`, rng.IntN(3), 1+rng.IntN(2))
			last = hosttest.Retry(t, "put", func(ctx context.Context) (uint64, error) { return kv.Put(ctx, h, v) })
		}
		if i%100 == 50 {
			hosttest.Retry(t, "step the effects stream's leader down", func(ctx context.Context) (struct{}, error) {
				m, err := client.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN.EV", nil)
				if err != nil {
					return struct{}{}, err
				}
				var r struct {
					Success bool `json:"success"`
					Error   *struct {
						Description string `json:"description"`
					} `json:"error"`
				}
				if err := json.Unmarshal(m.Data, &r); err != nil || !r.Success {
					return struct{}{}, fmt.Errorf("stepdown: %s (%v)", m.Data, err)
				}
				return struct{}{}, nil
			})
		}
	}
	want, head := routerHistoryEffects(t, js, "routes")
	for _, f := range folds {
		hosttest.WaitCursor(t, f, max(last, head))
		hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(f) == 0 })
		st := f.Status().Effects
		t.Logf("replica: %+v", st)
		if st.LastError != "" {
			t.Errorf("the outbox is empty, the status still says %q", st.LastError)
		}
	}
	if d := auditDiff(streamAudit(t, ev), want); d != "" {
		t.Fatal(d)
	}
}

// TestEffectsSmallerBatchesForAServerThatWantsThem: a server whose
// max_batch_size is 10 refuses the publisher's batches of up to 999
// effects (plus the fence); the publisher halves its batches until the
// server takes them, and every effect lands once, in order. Mutation
// caught: no halving (the outbox never drains).
func TestEffectsSmallerBatchesForAServerThatWantsThem(t *testing.T) {
	srv, err := embeddednats.Start(embeddednats.Options{Dir: t.TempDir(), MaxBatchSize: 10, StartTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	client := hosttest.Conn(t, url)
	b, _, ev := effectsBucketAndStream(t, client, 64)
	// Written before the fold starts: one batch of 100 updates, 100 effects.
	var last uint64
	for i := range 100 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%03d", i), `{"upstreams":[{"addr":"10.0.0.1:80","weight":1}]}`)
	}
	r := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "routes"),
			EffectsStream: "EV", BatchSize: 1000}}})
	f := r.H.Fold("routes")
	hosttest.WaitCursor(t, f, last)
	hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(f) == 0 })
	got := streamAudit(t, ev)
	if len(got) != 100 {
		t.Fatalf("%d effects in the stream, want 100", len(got))
	}
	for i, e := range got {
		if want := fmt.Sprintf("put|h%03d\n10.0.0.1:80=1", i); e.body != want {
			t.Fatalf("effect %d: %q, want %q", i, e.body, want)
		}
	}
	if st := f.Status().Effects; st.PublishedByThisNode != 100 || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}
}
