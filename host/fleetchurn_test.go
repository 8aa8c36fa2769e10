package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// TestFleetJoinsAndLeavesUnderLoad: writes go on to four folds' buckets
// while a fourth node joins a fleet of three (a fresh data dir each time: it warms
// up from the folds' artifacts) and leaves (SIGTERM's path: it hands its
// units over), three times. Reads through a node that stays, each with
// min_revision its bucket's last acknowledged write, are answered at or
// above it (the cursor header) or told to retry (503): never below, never
// timed out. At the end every fold's owner and standby hold every key's
// last value. Mutation caught: the fleet's read routing off (n1 answers a
// fold it does not fold from its frozen copy: a 504 below min_revision).
func TestFleetJoinsAndLeavesUnderLoad(t *testing.T) {
	srv, nc := natstest.Start(t)
	const folds, keys = 4, 50
	var buckets []*natskv.Bucket
	for i := range folds {
		b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: fmt.Sprintf("f%d", i), History: 4}, natskv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		buckets = append(buckets, b)
	}
	arts, err := dirstore.New(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := func(name, data string) *hosttest.Running {
		var fo []host.FoldOptions
		for i := range folds {
			fo = append(fo, host.FoldOptions{Name: fmt.Sprintf("f%d", i), DataDir: filepath.Join(dir, data, fmt.Sprintf("f%d", i))})
		}
		return hosttest.StartHost(t, host.Options{
			NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: srv.ClientURL(), Name: name}},
			Admin:     host.AdminOptions{Node: name},
			Fleet:     host.FleetOptions{Name: "t", Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
			Artifacts: host.ArtifactOptions{Store: arts, Where: "test", Holder: name, LeaseTTL: time.Second},
			Folds:     fo,
		})
	}
	var last [folds]atomic.Uint64 // each bucket's last acknowledged write
	for i, b := range buckets {
		for k := range keys {
			last[i].Store(hosttest.Put(t, b, fmt.Sprintf("k%02d", k), "0"))
		}
	}
	hs := map[string]*hosttest.Running{"n1": start("n1", "n1"), "n2": start("n2", "n2"), "n3": start("n3", "n3")}
	owners := waitPlaced(t, hs)
	for i := range folds {
		name := fmt.Sprintf("f%d", i)
		f := hs[owners[name]].H.Fold(name)
		hosttest.WaitCursor(t, f, last[i].Load())
		if rep, err := f.Export(context.Background(), true); err != nil || rep.(round.Report).Outcome != round.Published {
			t.Fatalf("export of %s: %+v %v", name, rep, err)
		}
	}
	api := hosttest.LoopbackAPI(t, hs["n1"].H.Handler())
	t.Cleanup(api.Close)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writeErr, readErr error // each set by its goroutine, read once joined
	var failed atomic.Bool      // either was set
	var writes, answered, retried int
	wg.Go(func() { // the writer
		for i := 0; ctx.Err() == nil; i++ {
			b := i % folds
			rev, err := buckets[b].KV().Put(ctx, fmt.Sprintf("k%02d", i/folds%keys), []byte(strconv.Itoa(i)))
			if err != nil {
				if ctx.Err() == nil {
					writeErr = err
					failed.Store(true)
				}
				return
			}
			last[b].Store(rev)
			writes++
			time.Sleep(time.Millisecond) // a steady load, not a flood
		}
	})
	wg.Go(func() { // the reader, through n1
		client := &http.Client{Timeout: time.Minute}
		for i := 0; ctx.Err() == nil; i++ {
			b := i % folds
			min := last[b].Load()
			resp, err := client.Get(fmt.Sprintf("%s/v1/folds/f%d/raw/k%02d?min_revision=%d&wait=30s", api.URL, b, i%keys, min))
			if err != nil {
				readErr = err
				failed.Store(true)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch cur, _ := strconv.ParseUint(resp.Header.Get(httpapi.CursorHeader), 10, 64); {
			case resp.StatusCode == http.StatusServiceUnavailable:
				retried++
			case resp.StatusCode != http.StatusOK:
				readErr = fmt.Errorf("a read of f%d at min_revision %d: %d %.300s", b, min, resp.StatusCode, body)
				failed.Store(true)
				return
			case cur < min:
				readErr = fmt.Errorf("a read of f%d at min_revision %d answered at cursor %d", b, min, cur)
				failed.Store(true)
				return
			default:
				answered++
			}
		}
	})
	// The joiner's name is one the placement gives an owner's unit and
	// another: with any name it would take units by chance only.
	joiner, took := "", 0
	for c := 0; joiner == "" && c < 100; c++ {
		name, owns, units := fmt.Sprintf("j%d", c), 0, 0
		for i := range folds {
			p := protocol.Place(protocol.Unit{Fold: fmt.Sprintf("f%d", i)}, []string{"n1", "n2", "n3", name}, 1)
			if p.Owner == name {
				owns++
			}
			if p.Owner == name || p.Standbys[0] == name {
				units++
			}
		}
		if owns > 0 && units >= 2 {
			joiner, took = name, units
		}
	}
	if joiner == "" {
		t.Fatal("no joiner's name takes units")
	}
	for round := range 3 {
		name := joiner
		hs[name] = start(name, fmt.Sprintf("joiner%d", round)) // fresh: it warms up
		waitPlaced(t, hs)
		if err := hs[name].Stop(t); err != nil {
			t.Errorf("round %d: the joiner's leaving: %v", round, err)
		}
		delete(hs, name)
		waitPlaced(t, hs)
		if failed.Load() {
			break
		}
	}
	stop()
	wg.Wait()
	if writeErr != nil || readErr != nil {
		t.Fatalf("under load: the writer: %v; the reader: %v", writeErr, readErr)
	}
	t.Logf("the joiner took %d units each time; %d writes; reads through n1: %d answered at or above their min_revision, %d told to retry", took, writes, answered, retried)
	live := []string{"n1", "n2", "n3"}
	for i := range folds {
		name := fmt.Sprintf("f%d", i)
		truth := hosttest.TruthOf(t, buckets[i].KV())
		p := protocol.Place(protocol.Unit{Fold: name}, live, 1)
		for _, n := range append([]string{p.Owner}, p.Standbys...) {
			f := hs[n].H.Fold(name)
			hosttest.WaitCursor(t, f, last[i].Load())
			hosttest.SameEntries(t, n+"'s "+name, hosttest.FoldOf(t, f), truth)
		}
	}
	if answered == 0 || forwardedAnswers(t, api.URL) == 0 {
		t.Errorf("reads answered: %d, of them forwarded: %d; want some of each", answered, forwardedAnswers(t, api.URL))
	}
}

// forwardedAnswers is the count of reads the node at url forwarded and
// had answered (its metrics).
func forwardedAnswers(t *testing.T, url string) int {
	t.Helper()
	_, m := hosttest.HTTPGet(t, url+"/metrics")
	for _, line := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(line, `foldhost_fleet_reads_forwarded_total{outcome="answered"} `); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
