package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// commitBatch applies batch through p and commits it to st (views, raw
// updates, cursor at the batch's last revision): a loop's round, by hand.
func commitBatch(t testing.TB, p *Plugin, st *fold.Store, batch ...fold.Update) {
	t.Helper()
	out, err := p.Apply(context.Background(), batch, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(fold.Commit{Raw: batch, Views: out.Views, Cursor: protocol.Cursor{Rev: batch[len(batch)-1].Rev}}); err != nil {
		t.Fatal(err)
	}
}

func putU(rev protocol.Revision, key, val string) fold.Update {
	return fold.Update{Key: key, Value: []byte(val), Rev: rev, Op: fold.OpPut}
}

func snapshotOf(t testing.TB, st *fold.Store) *fold.Snapshot {
	t.Helper()
	sn, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sn.Close() })
	return sn
}

func query(t testing.TB, p *Plugin, sn *fold.Snapshot, name, input string) string {
	t.Helper()
	a, err := p.Query(context.Background(), name, []byte(input), sn)
	if err != nil {
		t.Fatalf("query %s(%q): %v", name, input, err)
	}
	return string(a.Body)
}

// TestRouterQueriesAnswerFromTheirSnapshot: the C router's queries read
// the reverse index at the snapshot they are given, not the store as it
// is when they run.
func TestRouterQueriesAnswerFromTheirSnapshot(t *testing.T) {
	r := newRuntime(t, Options{})
	p, st := pluginAndStore(t, r, builtPlugin(t, "example-router", "router-c"))
	qs, id := p.Queries()
	if len(qs) != 2 || qs[0].Name != "hosts_of_upstream" || qs[0].ContentType != "application/json" || qs[1].Name != "top_upstreams" || id.ABI != "v1.3" {
		t.Fatalf("queries %+v of %+v", qs, id)
	}
	commitBatch(t, p, st,
		putU(1, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80","weight":3},{"addr":"10.0.0.2:80"}]}`),
		putU(2, "route.b", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`),
		putU(3, "route.c", `{"upstreams":[{"addr":"10.0.0.2:80"},{"addr":"10.0.0.3:80"}]}`),
	)
	old := snapshotOf(t, st)
	commitBatch(t, p, st,
		putU(4, "route.d", `{"upstreams":[{"addr":"10.0.0.3:80"}]}`),
		fold.Update{Key: "route.b", Rev: 5, Op: fold.OpDelete},
	)
	now := snapshotOf(t, st)
	for _, c := range []struct {
		sn          *fold.Snapshot
		name, input string
		want        string
	}{
		{old, "hosts_of_upstream", "10.0.0.2:80", `{"upstream":"10.0.0.2:80","hosts":["a","b","c"]}`},
		{now, "hosts_of_upstream", "10.0.0.2:80", `{"upstream":"10.0.0.2:80","hosts":["a","c"]}`},
		{now, "hosts_of_upstream", "10.0.0.3:80", `{"upstream":"10.0.0.3:80","hosts":["c","d"]}`},
		{now, "hosts_of_upstream", "10.9.9.9:80", `{"upstream":"10.9.9.9:80","hosts":[]}`},
		// 10.0.0.2:80's prefix must not take in 10.0.0.2:800's keys.
		{old, "top_upstreams", "2", `[{"addr":"10.0.0.2:80","hosts":3},{"addr":"10.0.0.1:80","hosts":1}]`},
		{now, "top_upstreams", "", `[{"addr":"10.0.0.2:80","hosts":2},{"addr":"10.0.0.3:80","hosts":2},{"addr":"10.0.0.1:80","hosts":1}]`},
	} {
		if got := query(t, p, c.sn, c.name, c.input); got != c.want {
			t.Errorf("%s(%q) at cursor %d = %s, want %s", c.name, c.input, c.sn.Cursor().Rev, got, c.want)
		}
	}
	// The plugin's verdict on its input: a guest error, the instance kept.
	_, err := p.Query(context.Background(), "top_upstreams", []byte("many"), now)
	var pe *PluginError
	if !errors.As(err, &pe) || pe.Kind != KindGuest || !strings.Contains(err.Error(), "count from 1 to 1000") {
		t.Fatalf("bad input: %v", err)
	}
	if _, err := p.Query(context.Background(), "nope", nil, now); !errors.Is(err, ErrUnknownQuery) || !strings.Contains(err.Error(), "hosts_of_upstream") {
		t.Fatalf("unknown query: %v", err)
	}
}

// TestRouterPrefixDoesNotTakeInALongerAddr: hosts_of_upstream ranges over
// upstream/<addr>/, not upstream/<addr>: 10.0.0.2:80 and 10.0.0.2:800
// are different upstreams.
func TestRouterPrefixDoesNotTakeInALongerAddr(t *testing.T) {
	r := newRuntime(t, Options{})
	p, st := pluginAndStore(t, r, builtPlugin(t, "example-router", "router-c"))
	commitBatch(t, p, st,
		putU(1, "route.a", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`),
		putU(2, "route.b", `{"upstreams":[{"addr":"10.0.0.2:800"}]}`),
	)
	if got, want := query(t, p, snapshotOf(t, st), "hosts_of_upstream", "10.0.0.2:80"), `{"upstream":"10.0.0.2:80","hosts":["a"]}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestRouterQueriesPageThroughLargeRanges: more hosts than one range page
// (1024) are all answered, in order.
func TestRouterQueriesPageThroughLargeRanges(t *testing.T) {
	r := newRuntime(t, Options{})
	p, st := pluginAndStore(t, r, builtPlugin(t, "example-router", "router-c"))
	const n = 2500
	var batch []fold.Update
	var hosts []string
	for i := range n {
		h := fmt.Sprintf("h%05d", i)
		hosts = append(hosts, `"`+h+`"`)
		batch = append(batch, putU(protocol.Revision(i+1), "route."+h, `{"upstreams":[{"addr":"u1"}]}`))
	}
	commitBatch(t, p, st, batch...)
	sn := snapshotOf(t, st)
	if got, want := query(t, p, sn, "hosts_of_upstream", "u1"), `{"upstream":"u1","hosts":[`+strings.Join(hosts, ",")+`]}`; got != want {
		t.Fatalf("got %d bytes, want %d", len(got), len(want))
	}
	if got, want := query(t, p, sn, "top_upstreams", "1"), fmt.Sprintf(`[{"addr":"u1","hosts":%d}]`, n); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestQueryRanges: forward and reverse ranges, paged by the plugin on
// "more" two keys at a time, over a prefix.
func TestQueryRanges(t *testing.T) {
	r := newRuntime(t, Options{})
	p, st := pluginAndStore(t, r, testPlugin(t, "query"))
	keys := []string{"a", "b/1", "b/2", "b/3", "b/4", "b/5", "b0", "c"}
	var batch []fold.Update
	for i, k := range keys {
		batch = append(batch, putU(protocol.Revision(i+1), k, "v"+k))
	}
	commitBatch(t, p, st, batch...)
	sn := snapshotOf(t, st)
	for _, c := range []struct{ name, in, want string }{
		{"scan", "b/", "b/1\nb/2\nb/3\nb/4\nb/5\n"},
		{"rscan", "b/", "b/5\nb/4\nb/3\nb/2\nb/1\n"},
		{"scan", "", strings.Join(keys, "\n") + "\n"},
		{"rscan", "b", "b0\nb/5\nb/4\nb/3\nb/2\nb/1\n"},
		{"scan", "z", ""},
		{"get", "b/3", "vb/3"},
	} {
		if got := query(t, p, sn, c.name, c.in); got != c.want {
			t.Errorf("%s(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// TestQueryFailures: every failure of a query is its own; a trap or a
// timeout costs the query instance, and the next query runs on a fresh
// one; a write is refused.
func TestQueryFailures(t *testing.T) {
	r := newRuntime(t, Options{CallTimeout: 500 * time.Millisecond, Limits: Limits{MaxOutputBytes: 64 << 10, MaxQueryInputBytes: 1000}})
	p, st := pluginAndStore(t, r, testPlugin(t, "query"))
	commitBatch(t, p, st, putU(1, "k", "v"))
	sn := snapshotOf(t, st)
	for _, c := range []struct {
		name, in string
		kind     Kind
		msg      string
	}{
		{"trap", "", KindTrap, "query.wasm: about to trap"},
		{"spin", "", KindTimeout, "deadline"},
		{"write", "x", KindGuest, "a query cannot write"},
		{"get", "missing", KindGuest, "not found"},
		{"fill", "70000", KindLimit, "plugin_max_output_mb"},
	} {
		_, err := p.Query(context.Background(), c.name, []byte(c.in), sn)
		var pe *PluginError
		if !errors.As(err, &pe) || pe.Kind != c.kind || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want a %s naming %q", c.name, err, c.kind, c.msg)
		}
		// One query at a time: one instance, kept after the plugin's own
		// verdict, discarded after anything else.
		p.queries.mu.Lock()
		idle := len(p.queries.idle)
		p.queries.mu.Unlock()
		if want := map[bool]int{true: 1, false: 0}[c.kind == KindGuest]; idle != want {
			t.Errorf("%s: %d idle query instances after it, want %d", c.name, idle, want)
		}
		// The next query answers, on a fresh instance when that one died.
		if got := query(t, p, sn, "get", "k"); got != "v" {
			t.Fatalf("after %s: get = %q", c.name, got)
		}
	}
	_, err := p.Query(context.Background(), "echo", make([]byte, 1001), sn)
	var ie *QueryInputError
	if !errors.As(err, &ie) || ie.Limit != 1000 {
		t.Fatalf("input over the limit: %v", err)
	}
	if got := query(t, p, sn, "echo", strings.Repeat("e", 1000)); len(got) != 1000 {
		t.Fatalf("echo of 1000 bytes: %d", len(got))
	}
	// The fold's apply is untouched by all of it.
	commitBatch(t, p, st, putU(2, "k", "w"))
	if got := query(t, p, snapshotOf(t, st), "get", "k"); got != "w" {
		t.Fatalf("after apply: %q", got)
	}
}

// TestASpinningQueryDoesNotBlockApply: apply runs on its own instance
// while a query spins on another.
func TestASpinningQueryDoesNotBlockApply(t *testing.T) {
	spinning := make(chan struct{}, 1)
	r := newRuntime(t, Options{CallTimeout: NoCallTimeout, Logger: slog.New(logSignal{ch: spinning, msg: "query.wasm: spinning"})})
	p, st := pluginAndStore(t, r, testPlugin(t, "query"))
	commitBatch(t, p, st, putU(1, "k", "v"))
	sn := snapshotOf(t, st)
	ctx, cancel := context.WithCancel(context.Background())
	done := startSpin(t, ctx, p, sn, spinning)
	started := time.Now()
	applies := make(chan error, 1)
	go func() {
		for i := range 20 {
			batch := []fold.Update{putU(protocol.Revision(i+2), "k", fmt.Sprint(i))}
			out, err := p.Apply(context.Background(), batch, st)
			if err == nil {
				err = st.Commit(fold.Commit{Raw: batch, Views: out.Views, Cursor: protocol.Cursor{Rev: batch[0].Rev}})
			}
			if err != nil {
				applies <- err
				return
			}
		}
		applies <- nil
	}()
	select {
	case err := <-applies:
		if err != nil {
			cancel()
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a busy machine's ceiling; they take a millisecond
		cancel()
		<-done
		<-applies
		t.Fatal("20 applies did not finish within a minute beside a spinning query")
	}
	applied := time.Since(started)
	select {
	case err := <-done:
		t.Fatalf("the spinning query ended before the applies did: %v", err)
	default:
	}
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "cancel") {
		t.Fatalf("spin cancelled: %v", err)
	}
	t.Logf("20 applies in %v beside a spinning query", applied)
}

// TestQueryRunsTheSwappedInModule: a module swapped in is queried at once,
// before any batch ran it; the old module's idle query instances go.
func TestQueryRunsTheSwappedInModule(t *testing.T) {
	r := newRuntime(t, Options{})
	p, st := pluginAndStore(t, r, testPlugin(t, "query"))
	sn := snapshotOf(t, st)
	if got := query(t, p, sn, "echo", "hi"); got != "hi" {
		t.Fatal(got)
	}
	m, err := r.LoadFile(context.Background(), builtPlugin(t, "example-router", "router-c"))
	if err != nil {
		t.Fatal(err)
	}
	p.Swap(m)
	if _, err := p.Query(context.Background(), "echo", nil, sn); !errors.Is(err, ErrUnknownQuery) {
		t.Fatalf("echo after the swap: %v", err)
	}
	if got := query(t, p, sn, "top_upstreams", ""); got != "[]" {
		t.Fatalf("top_upstreams after the swap: %s", got)
	}
	// A module without queries: the Go SDK's probe exports an empty list.
	g, err := r.LoadFile(context.Background(), testPlugin(t, "probe-go"))
	if err != nil {
		t.Fatal(err)
	}
	p.Swap(g)
	if _, err := p.Query(context.Background(), "top_upstreams", nil, sn); !errors.Is(err, ErrNoQueries) {
		t.Fatalf("a module without queries: %v", err)
	}
}

// TestConcurrentQueriesBesideSwapsAndApplies: more queries at once than
// query instances, while modules are swapped in and batches applied: every
// query answers, and every module is released in the end (a query holds
// its module while it instantiates; the last holder closes it).
func TestConcurrentQueriesBesideSwapsAndApplies(t *testing.T) {
	r := newRuntime(t, Options{})
	before := OpenModules()
	p, st := pluginAndStore(t, r, testPlugin(t, "query"))
	commitBatch(t, p, st, putU(1, "k", "v"))
	sn := snapshotOf(t, st)
	const workers, each = 6, 15
	errs := make(chan error, workers*each)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				a, err := p.Query(context.Background(), "get", []byte("k"), sn)
				if err == nil && string(a.Body) != "v" {
					err = fmt.Errorf("answer %q", a.Body)
				}
				errs <- err
			}
		})
	}
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m, err := r.LoadFile(context.Background(), testPlugin(t, "query"))
			if err != nil {
				errs <- err
				return
			}
			p.Swap(m)
			if _, err := p.Apply(context.Background(), []fold.Update{putU(protocol.Revision(i+2), "x", "y")}, st); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-swapped
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	p.Close(context.Background())
	if n := OpenModules(); n != before {
		t.Fatalf("%d modules open after the plugin closed, %d before", n, before)
	}
}

// TestAModuleClosedWhileHeldLivesUntilReleased: a query holding a module
// (acquire) can still instantiate it after its owner closed it (a swap
// meanwhile); the last release frees its compiled code, and a closed
// module cannot be acquired again.
func TestAModuleClosedWhileHeldLivesUntilReleased(t *testing.T) {
	r := newRuntime(t, Options{})
	before := OpenModules()
	m, err := r.LoadFile(context.Background(), testPlugin(t, "query"))
	if err != nil {
		t.Fatal(err)
	}
	if !m.acquire() {
		t.Fatal("could not acquire a fresh module")
	}
	m.Close(context.Background())
	if m.acquire() {
		t.Fatal("acquired a closed module")
	}
	st := r.newCallState(m.Short())
	st.start(time.Minute)
	in, err := r.instantiate(withCallState(context.Background(), st), m)
	if err != nil {
		t.Fatalf("instantiating a held module after its Close: %v", err)
	}
	in.close(context.Background())
	if n := OpenModules(); n != before+1 {
		t.Fatalf("%d modules open while held, want %d", n, before+1)
	}
	m.release(context.Background())
	if n := OpenModules(); n != before {
		t.Fatalf("%d modules open after the release, want %d", n, before)
	}
}

// TestRangeIsRefusedDuringApply: the range import answers -1 in an apply
// (the SDKs could not overlay the batch's writes on it); query.wasm calls
// it past its SDK and records what the host returned.
func TestRangeIsRefusedDuringApply(t *testing.T) {
	r := newRuntime(t, Options{})
	p, st := pluginAndStore(t, r, testPlugin(t, "query"))
	commitBatch(t, p, st, putU(1, "a", "x"), putU(2, "range-in-apply", ""))
	if got := query(t, p, snapshotOf(t, st), "get", "range-in-apply"); got != "-1" {
		t.Fatalf("range during apply returned %s, want -1", got)
	}
}

// TestSDKModulesWithoutQueriesImportNoRange: a module that declares no
// queries, from any SDK (the SDK probes), imports no range, so a host of
// an older minor loads it; every router build, which queries, does. The
// probes' declared queries are none.
func TestSDKModulesWithoutQueriesImportNoRange(t *testing.T) {
	ctx := context.Background()
	// The shared compilation cache: compiling the eight modules afresh
	// took 30 s under the race detector.
	cache, err := wazero.NewCompilationCacheWithDir(testCacheDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close(ctx)
	wr := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	defer wr.Close(ctx)
	r := newRuntime(t, Options{})
	importsRange := func(path string) bool {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := wr.CompileModule(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		defer cm.Close(ctx)
		for _, f := range cm.ImportedFunctions() {
			if mod, name, _ := f.Import(); mod == "foldhost" && name == abi.ImportRange {
				return true
			}
		}
		return false
	}
	for _, lang := range []string{"c", "as", "rust", "go"} {
		probe := testPlugin(t, "probe-"+lang)
		if importsRange(probe) {
			t.Errorf("probe-%s declares no queries but imports range", lang)
		}
		m, err := r.LoadFile(ctx, probe)
		if err != nil {
			t.Fatal(err)
		}
		// Every SDK speaks minor 3 (effects that name their update).
		if len(m.Queries) != 0 || m.ABIMinor != 3 {
			t.Errorf("probe-%s: queries %v, minor %d; want none, 3", lang, m.Queries, m.ABIMinor)
		}
		m.Close(ctx)
		if !importsRange(builtPlugin(t, "example-router", "router-"+lang)) {
			t.Errorf("router-%s queries without importing range", lang)
		}
	}
}

// TestQueryInstancesBoundTheQueriesRunning: at most Options.QueryInstances
// queries of a plugin run at once (plugin_query_instances): with that many
// spinning, another waits (here past its context's deadline), and runs as
// soon as one of them ends. Mutation caught: the option ignored (the
// default of 2 lets the second query of n=1 run at once, and holds the
// third spinner of n=3 back).
func TestQueryInstancesBoundTheQueriesRunning(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			spinning := make(chan struct{}, n)
			r := newRuntime(t, Options{CallTimeout: NoCallTimeout, QueryInstances: n,
				Logger: slog.New(logSignal{ch: spinning, msg: "query.wasm: spinning"})})
			p, st := pluginAndStore(t, r, testPlugin(t, "query"))
			commitBatch(t, p, st, putU(1, "k", "v"))
			sn := snapshotOf(t, st)
			cancels := make([]context.CancelFunc, n)
			done := make(chan error, n)
			running := n // spinners not joined yet
			for i := range n {
				var ctx context.Context
				ctx, cancels[i] = context.WithCancel(context.Background())
				go func() {
					_, err := p.Query(ctx, "spin", nil, sn)
					done <- err
				}()
			}
			defer func() { // join every spinner
				for _, c := range cancels {
					c()
				}
				for ; running > 0; running-- {
					<-done
				}
			}()
			deadline := time.After(time.Minute) // a busy machine's ceiling
			for i := range n {
				select {
				case <-spinning:
				case err := <-done:
					t.Fatalf("a spin query ended: %v", err)
				case <-deadline:
					t.Fatalf("%d of %d spin queries spinning after a minute", i, n)
				}
			}
			wctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if a, err := p.Query(wctx, "echo", []byte("hi"), sn); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a query beside %d spinning ones with %d instances: %q, %v; want it to wait", n, n, a.Body, err)
			}
			cancels[0]()
			if err := <-done; err == nil {
				t.Fatal("a cancelled spin query answered")
			}
			running--
			if got := query(t, p, sn, "echo", "hi"); got != "hi" {
				t.Fatalf("echo after a spinner ended: %q", got)
			}
		})
	}
}

// TestASQueriesCannotWrite: the AssemblyScript SDK refuses every write a
// query tries (a view put or delete, an index entry's, an effect): the
// query fails with the SDK's message as the plugin's own verdict, and the
// view is untouched. Mutation caught: the SDK's inQuery guard removed from
// put (the query then answers).
func TestASQueriesCannotWrite(t *testing.T) {
	r := newRuntime(t, Options{})
	p, st := pluginAndStore(t, r, testPlugin(t, "querywrite-as"))
	commitBatch(t, p, st, putU(1, "k", "v"))
	sn := snapshotOf(t, st)
	if got := query(t, p, sn, "echo", "hi"); got != "hi" {
		t.Fatalf("echo: %q", got)
	}
	for q, msg := range map[string]string{
		"put": "a query cannot write (put)", "del": "a query cannot write (del)",
		"index-put": "a query cannot write (put)", "index-del": "a query cannot write (del)",
		"emit": "a query cannot emit effects",
	} {
		a, err := p.Query(context.Background(), q, []byte("x"), sn)
		var pe *PluginError
		if !errors.As(err, &pe) || pe.Kind != KindGuest || !strings.Contains(err.Error(), msg) {
			t.Errorf("query %s: %q, %v; want the plugin's verdict %q", q, a.Body, err, msg)
		}
	}
	if v := views(t, st); len(v) != 1 || v["k"] != "v" {
		t.Errorf("the view after the queries: %v", v)
	}
}

// TestClosingAPluginEndsItsQueriesFirst: a plugin closed (then its
// runtime, as a stopping fold does) while a query spins on it, without
// a call timeout, cancels the query and waits for it before anything is
// released: the query fails with ErrPluginClosed, a query asked
// afterwards too, and the process lives (the runtime's close unmapped
// guest memory under the running call: SIGSEGV). Mutation caught: Close
// not waiting for the queries in flight (the SIGSEGV).
func TestClosingAPluginEndsItsQueriesFirst(t *testing.T) {
	spinning := make(chan struct{}, 1)
	r, err := NewRuntime(context.Background(), Options{CacheDir: testCacheDir, CallTimeout: NoCallTimeout, Logger: slog.New(logSignal{ch: spinning, msg: "query.wasm: spinning"})})
	if err != nil {
		t.Fatal(err)
	}
	p, st := pluginAndStore(t, r, testPlugin(t, "query"))
	commitBatch(t, p, st, putU(1, "k", "v"))
	sn := snapshotOf(t, st)
	done := startSpin(t, context.Background(), p, sn, spinning)
	p.Close(context.Background())
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Close waited for the query's call to end (its goroutine may send a
	// moment later): without the wait, the runtime's close crashes it.
	select {
	case err := <-done:
		if !errors.Is(err, ErrPluginClosed) {
			t.Errorf("the query cut short by Close: %v, want ErrPluginClosed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the query did not end within a minute of Close")
	}
	if _, err := p.Query(context.Background(), "get", []byte("k"), sn); !errors.Is(err, ErrPluginClosed) {
		t.Errorf("a query after Close: %v, want ErrPluginClosed", err)
	}
}

// startSpin runs the query plugin's spin query on p in a goroutine and
// returns once it spins (its log line reached spinning); the channel
// gives the query's error when it ends.
func startSpin(t *testing.T, ctx context.Context, p *Plugin, sn *fold.Snapshot, spinning <-chan struct{}) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := p.Query(ctx, "spin", nil, sn)
		done <- err
	}()
	select {
	case <-spinning:
	case err := <-done:
		t.Fatalf("the spin query ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the spin query did not start spinning within a minute")
	}
	return done
}
