package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// fleetGet reads url, returning the status, the body and the fleet's
// headers (node, epoch, partition).
func fleetGet(t *testing.T, url string) (int, string, [3]string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode, string(b), [3]string{resp.Header.Get(host.NodeHeader), resp.Header.Get(host.EpochHeader), resp.Header.Get(host.PartitionHeader)}
}

// TestFleetReadsFindTheirOwner: a read of a fold on a node of the fleet
// that does not fold it is answered by the fold's owner, as the owner
// answers it: a value read with min_revision right after its write (read
// your writes through any node), a range page larger than a NATS message
// (its chunks put together byte for byte as the owner's own answer), the
// partition, the owner's epoch and the answering node in headers. A
// standby answers from its own copy. While the owner leaves, a read
// through the third node is never below its min_revision: an answer, or a
// 503 to retry. Mutations caught: the fleet's routing off (the elsewhere
// node answers from its stopped copy: below min_revision, a 504), chunks
// not put together (a page cut at 256 KiB).
func TestFleetReadsFindTheirOwner(t *testing.T) {
	srv, nc := natstest.Start(t)
	var buckets []*natskv.Bucket
	for i := range 4 {
		b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: fmt.Sprintf("f%d", i), History: 4}, natskv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		buckets = append(buckets, b)
	}
	dir := t.TempDir()
	hs := map[string]*hosttest.Running{}
	apis := map[string]string{}
	nodes := []string{"n1", "n2", "n3"}
	for _, n := range nodes {
		hs[n] = fleetHost(t, srv.ClientURL(), dir, n)
		api := hosttest.LoopbackAPI(t, hs[n].H.Handler())
		t.Cleanup(api.Close)
		apis[n] = api.URL
	}
	owners := waitPlaced(t, hs)
	p := protocol.Place(protocol.Unit{Fold: "f0"}, nodes, 1)
	owner, standby := p.Owner, p.Standbys[0]
	other := nodes[slices.IndexFunc(nodes, func(n string) bool { return n != owner && n != standby })]
	if owners["f0"] != owner {
		t.Fatalf("f0 placed on %s, owned by %s", owner, owners["f0"])
	}
	_, epoch := hs[owner].H.Fold("f0").Role()

	// 300 values of 1 KiB: a page of them is past a chunk (256 KiB).
	val := strings.Repeat("v", 1024)
	var last uint64
	for i := range 300 {
		last = hosttest.Put(t, buckets[0], fmt.Sprintf("k%03d", i), fmt.Sprintf("%s%03d", val, i))
	}
	code, body, hdr := fleetGet(t, fmt.Sprintf("%s/v1/folds/f0/raw/k299?min_revision=%d&wait=1m", apis[other], last))
	if code != http.StatusOK || !strings.Contains(body, val+"299") {
		t.Fatalf("read your write through %s (neither owner nor standby): %d %.200s", other, code, body)
	}
	if want := [3]string{owner, fmt.Sprint(uint64(epoch)), "0"}; hdr != want {
		t.Fatalf("headers (node, epoch, partition) %q, want %q", hdr, want)
	}
	hosttest.WaitCursor(t, hs[standby].H.Fold("f0"), last)
	if code, body, hdr := fleetGet(t, apis[standby]+"/v1/folds/f0/raw/k001"); code != http.StatusOK || !strings.Contains(body, val+"001") || hdr[0] != standby {
		t.Fatalf("a read on the standby: %d %q %.200s", code, hdr, body)
	}
	page := "/v1/folds/f0/raw?prefix=k&limit=1000"
	_, own, _ := fleetGet(t, apis[owner]+page)
	code, fwd, _ := fleetGet(t, apis[other]+page)
	if code != http.StatusOK || len(own) < 300<<10 || fwd != own {
		t.Fatalf("a range page through %s: %d, %d bytes; the owner's own: %d bytes", other, code, len(fwd), len(own))
	}
	var parsed struct{ Count int }
	if err := json.Unmarshal([]byte(fwd), &parsed); err != nil || parsed.Count != 300 {
		t.Fatalf("the forwarded page: %v, count %d", err, parsed.Count)
	}
	if code, _, _ := fleetGet(t, apis[other]+"/v1/folds/nope/raw/k"); code != http.StatusNotFound {
		t.Fatalf("an unknown fold through the fleet: %d", code)
	}
	metrics := func(n string) string { _, m := hosttest.HTTPGet(t, apis[n]+"/metrics"); return m }
	if m := metrics(other); !strings.Contains(m, `foldhost_fleet_reads_forwarded_total{outcome="answered"} 2`) {
		t.Errorf("the forwarding node's metrics:\n%s", hosttest.GrepLines(m, "foldhost_fleet_"))
	}
	if m := metrics(owner); !strings.Contains(m, "foldhost_fleet_reads_answered_for_others_total 2") || !strings.Contains(m, `foldhost_fleet_units{role="owner"}`) {
		t.Errorf("the owner's metrics:\n%s", hosttest.GrepLines(m, "foldhost_fleet_"))
	}

	// The owner leaves (hands over) while reads go through the third node.
	stopped := make(chan error, 1)
	go func() { stopped <- hs[owner].Stop(t) }()
	answered, retried := 0, 0
	deadline := time.Now().Add(2 * time.Minute)
	for done := false; !done; {
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("the leaving owner: %v", err)
			}
			done = true
		default:
		}
		code, body, _ := fleetGet(t, fmt.Sprintf("%s/v1/folds/f0/raw/k299?min_revision=%d&wait=10s", apis[other], last))
		switch code {
		case http.StatusOK:
			if !strings.Contains(body, val+"299") {
				t.Fatalf("a read during the move: %.200s", body)
			}
			answered++
		case http.StatusServiceUnavailable:
			retried++
		default:
			t.Fatalf("a read during the move: %d %.300s", code, body)
		}
		if time.Now().After(deadline) {
			t.Fatal("the owner did not leave within 2m")
		}
	}
	delete(hs, owner)
	after := waitPlaced(t, hs)
	code, body, hdr = fleetGet(t, fmt.Sprintf("%s/v1/folds/f0/raw/k299?min_revision=%d", apis[other], last))
	if code != http.StatusOK || !strings.Contains(body, val+"299") || hdr[0] != other {
		t.Fatalf("after the move, on %s (which folds f0 now: its owner is %s): %d %q %.200s", other, after["f0"], code, hdr, body)
	}
	t.Logf("during the move: %d answered, %d told to retry", answered, retried)
}
