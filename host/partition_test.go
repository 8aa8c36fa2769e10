package host_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/foldrun"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/protocol"
)

// TestPartitionedFoldOnOneNode: a fold of 4 partitions runs as 4 units
// (routes.0 to routes.3), each folding exactly its partition's keys (all
// of them, none of another's), each cursor at the head although the
// head's update is of one partition only; a key's raw value is read by the
// fold's name from the unit of its partition (X-Foldhost-Partition says
// which), the units read the bucket's stream once (one consumer), the
// partitions endpoint lists the 4, ranges and ndjson streams
// by the fold's name merge the units' pages, and the fold's status by
// its name (not merged yet) is refused with the units' names. A restart resumes
// every unit; a restart with another count of partitions is refused, its
// stores untouched, whichever way the count changed; an offline command
// given the fold's name is told to name one of its units; each unit
// repairs by a listing of its partition, and a unit reset (its old store
// kept beside the units) leaves a fold that starts. Mutations caught: a
// unit's shared read handing it every partition's updates (every unit
// holds every key; the Watcher's own partition filter is
// TestPartitionedWatchHandsOnItsKeysAndSettlesTheRest's); raw
// reads not routed by partition (a key of another unit is not found); the
// layout check off (1 partition over 4's directories starts a new fold);
// the partition missing from a store's origin, or --adopt overriding it
// (8 partitions over 4's stores start); the units reading the stream on
// their own (4 consumers, not 1); the fold's name looked up among
// units only (a bare "no fold named"); a listing that takes a settle
// mark for an entry (every repair fails); a reset's kept store taken for
// a foreign entry (the start after it refused).
func TestPartitionedFoldOnOneNode(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	opts := func(n int) host.Options {
		return host.Options{
			NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
			Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(dir, "routes"), Partitions: n}},
		}
	}
	const n, keys = 4, 400
	want := map[string]string{}
	var last uint64
	for i := range keys {
		k, v := fmt.Sprintf("route.h%d", i), fmt.Sprintf("v%d", i)
		last, want[k] = hosttest.Put(t, b, k, v), v
	}
	r := hosttest.StartHost(t, opts(n))
	if len(r.H.Folds()) != n {
		t.Fatalf("%d folds run, want %d units", len(r.H.Folds()), n)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "routes", "partitions")); err != nil || string(b) != "4\n" {
		t.Fatalf("the fresh fold's record of its count: %q, %v", b, err)
	}
	all := map[string]string{}
	for p := range n {
		f := r.H.Fold(host.UnitName("routes", p))
		if f == nil {
			t.Fatalf("no unit %s", host.UnitName("routes", p))
		}
		hosttest.WaitCursor(t, f, last)
		held := hosttest.RawOf(t, f)
		for k, v := range held {
			if q := protocol.PartitionOf("routes", k, n); q != p {
				t.Errorf("unit %d holds key %q of partition %d", p, k, q)
			}
			all[k] = v
		}
		t.Logf("unit %s: %d keys, cursor %d", f.Name(), len(held), f.Status().Cursor)
	}
	if len(all) != len(want) {
		t.Fatalf("the units hold %d keys together, the bucket %d", len(all), len(want))
	}
	// The 4 units read the bucket's stream once (natskv.Demux): one
	// consumer on it.
	js := hosttest.JS(t, url)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		info, err := js.Stream(t.Context(), "KV_routes")
		if err != nil {
			t.Fatal(err)
		}
		if c := info.CachedInfo().State.Consumers; c == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the bucket's stream has %d consumers after 1m, want 1 (the units' shared read)", c)
		}
	}
	srv := hosttest.LoopbackAPI(t, r.H.Handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range keys {
		k := fmt.Sprintf("route.h%d", i)
		resp, err := client.Get(srv.URL + "/v1/folds/routes/raw/" + k)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(host.PartitionHeader) != fmt.Sprint(protocol.PartitionOf("routes", k, n)) {
			t.Fatalf("GET raw %s: %d, partition header %q, want 200 and %d", k, resp.StatusCode, resp.Header.Get(host.PartitionHeader), protocol.PartitionOf("routes", k, n))
		}
	}
	if code, body := hosttest.HTTPGet(t, srv.URL+"/v1/folds/routes/partitions"); code != http.StatusOK || strings.Count(body, `"partition":`) != n || !strings.Contains(body, `"partition":3`) {
		t.Errorf("partitions: %d %s", code, body)
	}
	// A range by the fold's name: the units' pages merged in key order,
	// each unit's from its first snapshot (a write between pages shows
	// in none).
	paged, _ := mergedRawPages(t, srv.URL, 37, func() {
		hosttest.Put(t, b, "route.h1", "changed between pages")
		hosttest.Put(t, b, "route.zz", "new between pages")
	})
	var wantPaged []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		wantPaged = append(wantPaged, k+"="+want[k])
	}
	if !slices.Equal(paged, wantPaged) {
		t.Errorf("the merged pages hold %d entries, want the %d of the first snapshots in key order:\n got %q\nwant %q", len(paged), len(wantPaged), paged, wantPaged)
	}
	// With a budget of 12 entries a page over the 4 units, each unit is
	// asked for 3 of the 37: a page ends at the first unit's cut, and the
	// pages still hold every entry once, in key order.
	restore := host.SetMergedRangeBudget(12)
	want["route.h1"], want["route.zz"] = "changed between pages", "new between pages"
	hosttest.WaitFor(t, func() bool {
		return r.H.Fold(host.UnitName("routes", protocol.PartitionOf("routes", "route.zz", n))).Status().Cursor >= last+2
	})
	budgeted, pages := mergedRawPages(t, srv.URL, 37, nil)
	restore()
	if full := (len(want) + 36) / 37; pages <= full {
		t.Errorf("on a budget the merged range took %d pages, as many as %d full ones: the units were asked for the whole limit", pages, full)
	}
	wantPaged = wantPaged[:0]
	for _, k := range slices.Sorted(maps.Keys(want)) {
		wantPaged = append(wantPaged, k+"="+want[k])
	}
	if !slices.Equal(budgeted, wantPaged) {
		t.Errorf("the merged pages on a budget hold %d entries, want %d in key order:\n got %q\nwant %q", len(budgeted), len(wantPaged), budgeted, wantPaged)
	}
	// Merged reads pin their units' pages apart: 40 one-page merged
	// reads (160 pins) do not let go of a unit's own paging snapshot.
	var first struct {
		Next string `json:"next"`
	}
	if code, body := hosttest.HTTPGet(t, srv.URL+"/v1/folds/routes.1/raw?prefix=route.&limit=5"); code != 200 || json.Unmarshal([]byte(body), &first) != nil || first.Next == "" {
		t.Fatalf("a unit's first page: %d %s", code, body)
	}
	for range 40 {
		if code, body := hosttest.HTTPGet(t, srv.URL+"/v1/folds/routes/raw?prefix=route.&limit=1000"); code != 200 || strings.Contains(body, `"truncated":true`) {
			t.Fatalf("a one-page merged read: %d %.200s", code, body)
		}
	}
	if code, body := hosttest.HTTPGet(t, srv.URL+"/v1/folds/routes.1/raw?prefix=route.&limit=5&next="+first.Next); code != 200 || strings.Contains(body, "snapshot_expired") {
		t.Errorf("the unit's second page after 40 merged reads: %d %.300s, want it from its first page's snapshot", code, body)
	}
	// An ndjson stream by the fold's name: the merged pages back to back
	// (on a budget of 12 entries a page: many pages), every entry once in
	// key order, then the end line with each unit's cursor.
	restore = host.SetMergedRangeBudget(12)
	code, body := hosttest.HTTPGet(t, srv.URL+"/v1/folds/routes/raw?prefix=route.&format=ndjson")
	restore()
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	var streamed []string
	for _, l := range lines[:len(lines)-1] {
		var it struct{ Key, Value string }
		if err := json.Unmarshal([]byte(l), &it); err != nil {
			t.Fatalf("an ndjson line: %q: %v", l, err)
		}
		streamed = append(streamed, it.Key+"="+it.Value)
	}
	var end struct {
		End     bool
		Count   int
		Cursors []uint64
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &end); code != 200 || err != nil || !end.End || end.Count != len(wantPaged) || len(end.Cursors) != n || !slices.Equal(streamed, wantPaged) {
		t.Errorf("an ndjson stream by the fold's name: %d, %d items (end line %q), want the %d entries in key order", code, len(streamed), lines[len(lines)-1], len(wantPaged))
	}
	if code, body := hosttest.HTTPGet(t, srv.URL+"/v1/folds/routes"); code != http.StatusNotImplemented || !strings.Contains(body, "routes.P") {
		t.Errorf("the status of the partitioned fold by its name: %d %s, want 501 naming its units", code, body)
	}
	if code, body := hosttest.HTTPGet(t, srv.URL+"/v1/folds/routes/raw?prefix=route.&format=ndjson&limit=3"); code != http.StatusBadRequest {
		t.Errorf("an ndjson stream with a limit by the fold's name: %d %s, want the unit's 400", code, body)
	}
	if code, _ := hosttest.HTTPGet(t, srv.URL+"/v1/folds/routes.2/raw?prefix=route."); code != http.StatusOK {
		t.Errorf("a range of one unit: %d, want 200", code)
	}
	// A live update lands in its unit only; the others' cursors pass it.
	last = hosttest.Put(t, b, "route.h0", "live")
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last)
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}

	r = hosttest.StartHost(t, opts(n))
	last = hosttest.Put(t, b, "route.h1", "after restart")
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last)
	}
	srv2 := hosttest.LoopbackAPI(t, r.H.Handler())
	if code, body := hosttest.HTTPGet(t, srv2.URL+"/v1/folds/routes/raw/route.h1"); code != http.StatusOK || !strings.Contains(body, "after restart") {
		t.Errorf("after a restart: %d %s", code, body)
	}
	srv2.Close()
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}

	for _, m := range []int{1, 2, 8} {
		err := hosttest.StartErr(t, opts(m))
		if err == nil || !strings.Contains(err.Error(), "partition") || !strings.Contains(err.Error(), "fixed for a fold's life") {
			t.Errorf("a restart with %d partitions over a fold of %d: %v, want a refusal naming the partitions", m, n, err)
		}
	}
	// Without the data dir's record of its count, each unit's store
	// still says which partition of how many it holds.
	if err := os.Remove(filepath.Join(dir, "routes", "partitions")); err != nil {
		t.Fatal(err)
	}
	if err := hosttest.StartErr(t, opts(8)); !errors.Is(err, foldrun.ErrOriginMismatch) || !strings.Contains(err.Error(), "partition 0/4") {
		t.Errorf("8 partitions over 4's stores, the count's record gone: %v, want an origin mismatch naming partition 0/4", err)
	}
	adopt := opts(8)
	adopt.Folds[0].Adopt = true
	if err := hosttest.StartErr(t, adopt); !errors.Is(err, foldrun.ErrOriginMismatch) {
		t.Errorf("8 partitions over 4's stores with --adopt: %v, want the origin mismatch all the same", err)
	}
	for p := 4; p < 8; p++ {
		_ = os.RemoveAll(filepath.Join(dir, "routes", fmt.Sprintf("partition-%d", p))) // made empty by that start
	}
	if err := os.WriteFile(filepath.Join(dir, "routes", "partitions"), []byte("4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = hosttest.StartHost(t, opts(n))
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last) // untouched by the refused starts
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	// An offline command names a unit: the fold's name says which.
	if _, err := host.ResetStopped(t.Context(), opts(n), "routes", nil); err == nil || !strings.Contains(err.Error(), "routes.0 to routes.3") {
		t.Errorf("reset of the partitioned fold by its name: %v, want a refusal naming its units", err)
	}
	// Each unit repairs by a listing of its partition (the listing's
	// watch passes the other partitions' updates as settle marks), and
	// a unit reset keeps its old store beside the units; the fold starts
	// after both, every unit at the head with its own keys.
	mode := protocol.RepairNone
	for p := range n {
		if _, err := host.RepairStopped(t.Context(), opts(n), host.UnitName("routes", p), &mode, nil); err != nil {
			t.Fatalf("repair of unit %d: %v", p, err)
		}
	}
	res, err := host.ResetStopped(t.Context(), opts(n), "routes.1", nil)
	if err != nil || !strings.Contains(res.Kept, "partition-1.replaced-") {
		t.Fatalf("reset of unit 1: %+v, %v", res, err)
	}
	r = hosttest.StartHost(t, opts(n))
	for p, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last)
		for k := range hosttest.RawOf(t, f) {
			if q := protocol.PartitionOf("routes", k, n); q != p {
				t.Errorf("after the repairs and the reset, unit %d holds key %q of partition %d", p, k, q)
			}
		}
	}
}

// TestPartitionArtifactsStayInTheirPartition: each unit of a partitioned
// fold exports under its own key (KEY.P), its artifact records its
// partition, and it bootstraps only a store of the same partition: unit 0
// bootstrapped from unit 1's artifact is refused (an origin mismatch
// naming both partitions), nothing installed; unit 1 from its own holds
// exactly its keys. A restoring repair of unit 0 whose key holds unit
// 1's artifact (planted there) is refused the same way, unit 0's keys
// kept. Mutation caught: origins compared without their partitions
// (unit 0 installs unit 1's keys, by bootstrap and by restore).
func TestPartitionArtifactsStayInTheirPartition(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	root := t.TempDir()
	store, err := dirstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	opts := func(dir string) host.Options {
		return host.Options{
			NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
			Artifacts: host.ArtifactOptions{Store: store, Where: "test", Holder: "t"},
			Logger:    hosttest.Quiet,
			Folds:     []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(dir, "routes"), Partitions: 2}},
		}
	}
	var last uint64
	for i := range 100 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), "v")
	}
	src := t.TempDir()
	r := hosttest.StartHost(t, opts(src))
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last)
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	for _, unit := range []string{"routes.0", "routes.1"} {
		res, err := host.ExportStopped(t.Context(), opts(src), unit, true)
		if err != nil || res.Key != unit {
			t.Fatalf("export of %s: %+v, %v (want its own key %s)", unit, res, err, unit)
		}
	}

	// Unit 1's artifact, newer than unit 0's store, planted under unit
	// 0's key: a restoring repair of unit 0 refuses it, and unit 0's
	// store keeps its own keys.
	for i := range 20 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.n%d", i), "v")
	}
	ahead := t.TempDir()
	r = hosttest.StartHost(t, opts(ahead))
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last)
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := host.ExportStopped(t.Context(), opts(ahead), "routes.1", true); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".manifest.json", ".payloads"} {
		if err := os.Rename(filepath.Join(root, "routes.0"+ext), filepath.Join(root, "routes.0.own"+ext)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.CopyFS(filepath.Join(root, "routes.0.payloads"), os.DirFS(filepath.Join(root, "routes.1.payloads"))); err != nil {
		t.Fatal(err)
	}
	if m, err := os.ReadFile(filepath.Join(root, "routes.1.manifest.json")); err != nil || os.WriteFile(filepath.Join(root, "routes.0.manifest.json"), m, 0o644) != nil {
		t.Fatal(err)
	}
	restore := protocol.RepairRestore
	_, err = host.RepairStopped(t.Context(), opts(src), "routes.0", &restore, nil)
	if err == nil || !strings.Contains(err.Error(), "partition") {
		t.Errorf("unit 0 restored from unit 1's artifact: %v, want a refusal naming the partitions", err)
	}
	t.Logf("the restore's refusal: %v", err)
	for _, ext := range []string{".manifest.json", ".payloads"} {
		if err := os.RemoveAll(filepath.Join(root, "routes.0"+ext)); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(root, "routes.0.own"+ext), filepath.Join(root, "routes.0"+ext)); err != nil {
			t.Fatal(err)
		}
	}
	r = hosttest.StartHost(t, opts(src))
	hosttest.WaitCursor(t, r.H.Fold("routes.0"), last)
	for k := range hosttest.RawOf(t, r.H.Fold("routes.0")) {
		if q := protocol.PartitionOf("routes", k, 2); q != 0 {
			t.Errorf("after the refused restore, unit 0 holds key %q of partition %d", k, q)
		}
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}

	dst := t.TempDir()
	_, err = host.Bootstrap(t.Context(), opts(dst), "routes.0", host.BootstrapOptions{Key: "routes.1"})
	if !errors.Is(err, foldrun.ErrOriginMismatch) || !strings.Contains(err.Error(), "partition 1/2, not 0/2") {
		t.Fatalf("unit 0 bootstrapped from unit 1's artifact: %v, want an origin mismatch naming the partitions", err)
	}
	if _, err := host.Bootstrap(t.Context(), opts(dst), "routes.1", host.BootstrapOptions{}); err != nil {
		t.Fatalf("unit 1 from its own artifact: %v", err)
	}
	r = hosttest.StartHost(t, opts(dst))
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last)
	}
	for p, f := range r.H.Folds() {
		for k := range hosttest.RawOf(t, f) {
			if q := protocol.PartitionOf("routes", k, 2); q != p {
				t.Errorf("unit %d holds key %q of partition %d", p, k, q)
			}
		}
	}
}

// TestPartitionedViewReads: a view key read by a partitioned fold's name
// is asked of every unit and answered by the one that holds it, whatever
// partition its name would hash to (the plugin names views), with that
// unit's partition in X-Foldhost-Partition and min_revision honoured; a
// key no unit holds is a 404; one held by two units is a 409 (merging
// is not built). The query forms (?key=, ?key_b64=) route as the path
// forms do. Mutations caught: the fan-out asking only the view
// key's own hash partition (a view written by another partition's key is
// not found); several holders answered with one of them (no 409).
func TestPartitionedViewReads(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	const n = 4
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "testdata", "keyview1"),
			DataDir: filepath.Join(t.TempDir(), "routes"), Partitions: n}},
	})
	// Two keys of different partitions write the view key "s1/shared";
	// one writes "s1/single", from a partition other than the one
	// "s1/single" hashes to.
	var writers []string
	for i := 0; len(writers) < 2; i++ {
		k := fmt.Sprintf("w%d", i)
		if len(writers) == 0 || protocol.PartitionOf("routes", k, n) != protocol.PartitionOf("routes", writers[0], n) {
			writers = append(writers, k)
		}
	}
	single := ""
	for i := 0; single == ""; i++ {
		if k := fmt.Sprintf("x%d", i); protocol.PartitionOf("routes", k, n) != protocol.PartitionOf("routes", "s1/single", n) {
			single = k
		}
	}
	var last uint64
	for i := range 40 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), fmt.Sprintf("v%d", i))
	}
	hosttest.Put(t, b, writers[0], "to:shared")
	hosttest.Put(t, b, writers[1], "to:shared")
	last = hosttest.Put(t, b, single, "to:single")
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last)
	}
	srv := hosttest.LoopbackAPI(t, r.H.Handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string, string) {
		t.Helper()
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header.Get(host.PartitionHeader)
	}
	for i := range 40 {
		k := fmt.Sprintf("route.h%d", i)
		if code, body, p := get("/v1/folds/routes/view/s1/" + k); code != 200 || !strings.Contains(body, fmt.Sprintf(`"v%d"`, i)) || p != fmt.Sprint(protocol.PartitionOf("routes", k, n)) {
			t.Fatalf("view s1/%s: %d %s partition %q, want its key's partition %d", k, code, body, p, protocol.PartitionOf("routes", k, n))
		}
	}
	if code, body, p := get("/v1/folds/routes/view/s1/single"); code != 200 || !strings.Contains(body, single) || p != fmt.Sprint(protocol.PartitionOf("routes", single, n)) {
		t.Errorf("view s1/single: %d %s partition %q, want the writer %s's partition %d", code, body, p, single, protocol.PartitionOf("routes", single, n))
	}
	if code, body, _ := get("/v1/folds/routes/view/s1/shared"); code != http.StatusConflict || !strings.Contains(body, "2 partitions") {
		t.Errorf("view s1/shared, held by two units: %d %s, want 409", code, body)
	}
	if code, _, _ := get("/v1/folds/routes/view/s1/none"); code != http.StatusNotFound {
		t.Errorf("view s1/none: %d, want 404", code)
	}
	// The query forms route as the path forms do.
	if code, body, p := get("/v1/folds/routes/view?key=s1/single"); code != 200 || !strings.Contains(body, single) || p != fmt.Sprint(protocol.PartitionOf("routes", single, n)) {
		t.Errorf("view ?key=s1/single: %d %s partition %q", code, body, p)
	}
	k := "route.h7"
	if code, body, p := get("/v1/folds/routes/raw?key_b64=" + base64.StdEncoding.EncodeToString([]byte(k))); code != 200 || !strings.Contains(body, `"v7"`) || p != fmt.Sprint(protocol.PartitionOf("routes", k, n)) {
		t.Errorf("raw ?key_b64=%s: %d %s partition %q", k, code, body, p)
	}
	// A view range merges the units' pages: every view entry of every
	// unit once (s1/shared once per unit that holds it), keys in order.
	var wantViews []string
	for _, f := range r.H.Folds() {
		for k, v := range hosttest.ViewsOf(t, f) {
			wantViews = append(wantViews, k+"="+v)
		}
	}
	var gotViews []string
	prev, next := "", ""
	for page := 0; ; page++ {
		path := "/v1/folds/routes/view?prefix=s1/&limit=41" // its first page ends between the two s1/shared
		if next != "" {
			path += "&next=" + next
		}
		code, body, _ := get(path)
		var pg rangePage
		if code != http.StatusOK || json.Unmarshal([]byte(body), &pg) != nil {
			t.Fatalf("view range page %d: %d %s", page, code, body)
		}
		for _, it := range pg.Items {
			if it.Key < prev {
				t.Fatalf("view range: key %q after %q", it.Key, prev)
			}
			prev = it.Key
			gotViews = append(gotViews, it.Key+"="+it.Value)
		}
		if !pg.Truncated || page > len(wantViews) {
			break
		}
		next = pg.Next
	}
	slices.Sort(gotViews)
	slices.Sort(wantViews)
	if !slices.Equal(gotViews, wantViews) {
		t.Errorf("the merged view range: %d entries, want %d:\n got %q\nwant %q", len(gotViews), len(wantViews), gotViews, wantViews)
	}
	rev := hosttest.Put(t, b, "route.h3", "fresh")
	if code, body, _ := get(fmt.Sprintf("/v1/folds/routes/view/s1/route.h3?min_revision=%d&wait=30s", rev)); code != 200 || !strings.Contains(body, "fresh") {
		t.Errorf("view s1/route.h3 with min_revision %d: %d %s", rev, code, body)
	}
}

// TestAdoptsNamesAFoldOrAUnit: --adopt picks a fold by its name or by
// one of its units' (FOLD.P), and nothing else.
func TestAdoptsNamesAFoldOrAUnit(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  bool
	}{
		{[]string{"routes"}, true}, {[]string{"routes.1"}, true}, {[]string{"x", "routes.0"}, true},
		{[]string{"routesx.1"}, false}, {[]string{"route"}, false}, {[]string{"routes."}, false}, {nil, false},
	} {
		if got := host.Adopts(c.names, "routes"); got != c.want {
			t.Errorf("Adopts(%q, routes) = %v, want %v", c.names, got, c.want)
		}
	}
}

// mergedRawPages pages through the raw range "route." of the partitioned
// fold routes by its name, limit entries a page, calling between (if
// set) after the first page; it returns the entries as key=value, and
// the pages.
func mergedRawPages(t *testing.T, base string, limit int, between func()) ([]string, int) {
	t.Helper()
	var paged []string
	next := ""
	for page := 0; ; page++ {
		path := fmt.Sprintf("%s/v1/folds/routes/raw?prefix=route.&limit=%d", base, limit)
		if next != "" {
			path += "&next=" + next
		}
		code, body := hosttest.HTTPGet(t, path)
		var pg rangePage
		if code != http.StatusOK || json.Unmarshal([]byte(body), &pg) != nil || len(pg.Items) > limit {
			t.Fatalf("page %d of the merged range: %d %s", page, code, body)
		}
		for _, it := range pg.Items {
			paged = append(paged, it.Key+"="+it.Value)
		}
		if page == 0 && between != nil {
			between()
		}
		if !pg.Truncated {
			return paged, page + 1
		}
		if page > 1000 {
			t.Fatalf("the merged range is still truncated after %d pages of %d (%d entries)", page+1, limit, len(paged))
		}
		next = pg.Next
	}
}

// rangePage is a range page's body, as the tests read it.
type rangePage struct {
	Truncated bool   `json:"truncated"`
	Next      string `json:"next"`
	Items     []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"items"`
}
