package plugincheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/textfmt"
)

// TestOptions are Test's.
type TestOptions struct {
	// Load are the module's limits (a node's; Retries should be
	// wasm.NoRetries: a failure is the verdict).
	Load wasm.Options
	// BatchSize > 0 folds batches of at most this many updates instead of
	// the fixture's own; the expectations are still checked where the
	// fixture's batches end (replicas batch however they batch: the
	// views, effects and answers must not depend on it).
	BatchSize int
	// Update rewrites each fixture's expectations from what the module
	// produced (golden files), instead of failing on a difference.
	Update bool
}

// FixturesFailed is Test's error when fixtures failed.
type FixturesFailed struct{ Failed, Total int }

func (e *FixturesFailed) Error() string {
	return fmt.Sprintf("%d of %d fixtures failed", e.Failed, e.Total)
}

// Test runs each fixture file of paths (docs/plugins.md, "Fixtures")
// through the module at module: every fixture into a scratch store of its
// own, on a fresh instance, through the fold's own loop and commit (a
// failed update becomes a dead letter, as under on_plugin_error =
// "skip"), checking after each batch what the fixture expects. It prints
// the first difference of each batch that has one, and a PASS or FAIL
// line per fixture, to w, and returns a *FixturesFailed when any failed.
// A fixture file that does not parse is an error before anything runs;
// a module that does not load is a *Failed ("load").
func Test(ctx context.Context, w io.Writer, module string, paths []string, o TestOptions) error {
	var files []*fixtureFile
	for _, p := range paths {
		f, err := readFixtures(p)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	r, err := newFixtureRunner(ctx, w, module, o)
	if err != nil {
		return err
	}
	defer r.close()
	failed, total := 0, 0
	for _, f := range files {
		got := map[*batch]expect{}
		rewritten := 0
		for _, fx := range f.fixtures {
			total++
			res, err := r.run(fx)
			if err != nil {
				return err
			}
			diffs := 0
			for _, b := range fx.batches {
				g, ok := res.got[b]
				if !ok {
					continue
				}
				got[b] = g
				if d := firstDiff(b, g); d != "" {
					diffs++
					if !o.Update {
						fmt.Fprintf(w, "  %s:%d batch %q: %s", f.path, b.line, b.name, d)
						res.explain(w, b, g)
					}
				}
			}
			switch {
			case diffs > 0 && o.Update:
				rewritten += diffs
				fmt.Fprintf(w, "UPDATED %s: %d of %d batches rewritten\n", fx.label(), diffs, len(fx.batches))
			case diffs > 0:
				failed++
				fmt.Fprintf(w, "FAIL %s: %d of %d batches differ\n", fx.label(), diffs, len(fx.batches))
			default:
				fmt.Fprintf(w, "PASS %s: %s, %s%s\n", fx.label(), plural(len(fx.batches), "batch", "batches"), plural(fx.updates, "update", "updates"), r.batching())
			}
		}
		if rewritten > 0 {
			if err := writeFileKeepMode(f.path, f.rewrite(got)); err != nil {
				return err
			}
		}
	}
	if failed > 0 {
		return &FixturesFailed{Failed: failed, Total: total}
	}
	return nil
}

// MaxCallInput bounds the query input plugin call reads: the largest
// plugin_max_query_input_kb (the module's own bound, 1 MiB by default,
// refuses more than it allows).
const MaxCallInput = 64 << 20

// Call folds the updates of the fixture file at fixturePath ("": none) into
// a scratch store through the module at module, as Test does, then runs
// its query name with input on the store and returns the answer. A
// refusal is a *wasm.PluginError of wasm.KindGuest.
func Call(ctx context.Context, module, fixturePath, name string, input []byte, opts wasm.Options) ([]byte, error) {
	var fx *fixture
	if fixturePath != "" {
		f, err := readFixtures(fixturePath)
		if err != nil {
			return nil, err
		}
		if len(f.fixtures) > 1 {
			return nil, fmt.Errorf("%s holds %d fixtures: give a file of one", fixturePath, len(f.fixtures))
		}
		fx = f.fixtures[0]
	}
	r, err := newFixtureRunner(ctx, io.Discard, module, TestOptions{Load: opts})
	if err != nil {
		return nil, err
	}
	defer r.close()
	var answer []byte
	err = r.withStore(fx, func(p *wasm.Plugin, st *fold.Store) error {
		sn, err := st.Snapshot()
		if err != nil {
			return fmt.Errorf("%w: %w", errScratch, err)
		}
		defer sn.Close()
		a, err := p.Query(ctx, name, input, sn)
		if ge := (*abi.GuestError)(nil); errors.As(err, &ge) {
			return fmt.Errorf("query %s refused: %w", name, err)
		}
		answer = a.Body
		return err
	})
	return answer, err
}

// fixtureRunner runs fixtures through one module, each on a fresh
// instance, in a scratch directory.
type fixtureRunner struct {
	ctx     context.Context
	rt      *wasm.Runtime
	m       *wasm.Module
	scratch string
	runs    int
	size    int
}

// newFixtureRunner loads module (its description printed to w).
func newFixtureRunner(ctx context.Context, w io.Writer, module string, o TestOptions) (*fixtureRunner, error) {
	rt, m, err := openModule(ctx, module, o.Load)
	if f := (*Failed)(nil); errors.As(err, &f) {
		return nil, failLine(w, f.Check, f.Err)
	}
	if err != nil {
		return nil, err
	}
	describe(w, module, m)
	scratch, err := os.MkdirTemp("", "foldhost-plugin-test-")
	if err != nil {
		m.Close(context.Background())
		rt.Close(context.Background())
		return nil, err
	}
	return &fixtureRunner{ctx: ctx, rt: rt, m: m, scratch: scratch, size: o.BatchSize}, nil
}

func (r *fixtureRunner) close() {
	r.m.Close(context.Background())
	r.rt.Close(context.Background())
	os.RemoveAll(r.scratch)
}

func (r *fixtureRunner) batching() string {
	if r.size > 0 {
		return fmt.Sprintf(" (folded in batches of at most %d)", r.size)
	}
	return ""
}

// fixtureRun is what one run of a fixture produced.
type fixtureRun struct {
	got    map[*batch]expect
	errors map[uint64]string // each dead letter's whole error, by update
}

// run folds fx and collects, after each batch that has a batch line,
// what it checks.
func (r *fixtureRunner) run(fx *fixture) (fixtureRun, error) {
	res := fixtureRun{got: map[*batch]expect{}, errors: map[uint64]string{}}
	err := r.withStore(nil, func(p *wasm.Plugin, st *fold.Store) error {
		tap := &effectTap{p: p}
		rejected := 0
		var deadSeen uint64
		cfg := fold.LoopConfig{Logger: quiet, OnApplied: func(a fold.Applied) { rejected += a.Rejected }, Poison: poison(res.errors)}
		for _, b := range fx.batches {
			if err := r.fold(st, tap, cfg, b.updates); err != nil {
				return err
			}
			if b.line == 0 {
				continue
			}
			var e expect
			var err error
			if b.checks1(checkViews) {
				if e.views, err = viewsOf(st, b); err != nil {
					return fmt.Errorf("%w: %w", errScratch, err)
				}
			}
			if b.checks1(checkEffects) {
				e.effects, tap.effects = tap.effects, nil
			}
			if b.checks1(checkDeadLetters) {
				if e.dead, deadSeen, err = deadLettersAfter(st, deadSeen); err != nil {
					return fmt.Errorf("%w: %w", errScratch, err)
				}
			}
			if b.checks1(checkRejected) {
				e.rejected, rejected = rejected, 0
			}
			if e.queries, err = r.queries(p, st, b.want.queries); err != nil {
				return err
			}
			res.got[b] = e
		}
		return nil
	})
	return res, err
}

// withStore runs fn with a fresh instance of the module and a new scratch
// store, into which fx's updates (nil: none) were folded.
func (r *fixtureRunner) withStore(fx *fixture, fn func(*wasm.Plugin, *fold.Store) error) error {
	r.runs++
	st, _, err := fold.Open(filepath.Join(r.scratch, strconv.Itoa(r.runs)), fold.Options{Logger: quiet})
	if err != nil {
		return fmt.Errorf("%w: %w", errScratch, err)
	}
	defer st.Close()
	p := r.rt.NewPlugin(r.m)
	defer func() { r.m = p.Release(context.Background()) }()
	if fx != nil {
		cfg := fold.LoopConfig{Logger: quiet, Poison: poison(map[uint64]string{})}
		for _, b := range fx.batches {
			if err := r.fold(st, p, cfg, b.updates); err != nil {
				return err
			}
		}
	}
	return fn(p, st)
}

// fold folds updates into st through p in one run of the fold's loop:
// one batch, or batches of at most r.size.
func (r *fixtureRunner) fold(st *fold.Store, p fold.Plugin, cfg fold.LoopConfig, updates []fold.Update) error {
	cfg.MaxBatch = len(updates)
	if r.size > 0 {
		cfg.MaxBatch = r.size
	}
	ch := make(chan fold.Event, len(updates))
	for _, u := range updates {
		ch <- fold.Event{Update: u}
	}
	close(ch)
	if _, err := fold.NewLoop(st, p, cfg).Run(r.ctx, feed(ch)); err != nil {
		return fmt.Errorf("folding the updates of revisions %d..%d: %w", updates[0].Rev, updates[len(updates)-1].Rev, err)
	}
	return r.ctx.Err() // a cancelled loop returns nothing folded, and no error
}

// feed is a fold.Source of the events buffered in a closed channel.
type feed chan fold.Event

func (f feed) Events() <-chan fold.Event { return f }
func (f feed) Stop()                     {}
func (f feed) Err() error                { return nil }

// effectTap keeps the effects of every output the loop commits (copied:
// an output aliases the plugin's buffers). A failed Apply commits
// nothing, and is kept out.
type effectTap struct {
	p       fold.Plugin
	effects []effectLine
}

func (t *effectTap) Apply(ctx context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	out, err := t.p.Apply(ctx, batch, r)
	if err == nil {
		for _, e := range out.Effects {
			l := effectLine{subject: e.Subject, update: uint64(e.UpdateRev), payload: bytes.Clone(e.Payload)}
			if l.payload == nil {
				l.payload = []byte{}
			}
			for _, h := range e.Headers {
				l.headers = append(l.headers, [2]string{h.Name, h.Value})
			}
			t.effects = append(t.effects, l)
		}
	}
	return out, err
}

// viewsOf is st's view as b checks it: the whole view, or b's listed keys.
func viewsOf(st *fold.Store, b *batch) ([]viewLine, error) {
	var out []viewLine
	if !b.listed {
		err := st.ViewRange(nil, func(k, v []byte) error {
			out = append(out, viewLine{key: bytes.Clone(k), value: bytes.Clone(v)})
			return nil
		})
		return out, err
	}
	for _, w := range b.want.views {
		v, ok, err := st.ViewGet(w.key)
		if err != nil {
			return nil, err
		}
		out = append(out, viewLine{key: w.key, value: bytes.Clone(v), absent: !ok})
	}
	return out, nil
}

// deadLettersAfter are st's dead letters of updates after revision seen,
// and the last one's revision.
func deadLettersAfter(st *fold.Store, seen uint64) ([]deadLine, uint64, error) {
	var out []deadLine
	err := st.DeadLetters(func(d fold.DeadLetter) error {
		if d.Rev > seen && d.Effect == nil {
			out = append(out, deadLine{key: []byte(d.Key), update: d.Rev, err: d.Error})
			seen = d.Rev
		}
		return nil
	})
	return out, seen, err
}

// poison is the loops' Poison hook (as under on_plugin_error = "skip"):
// the dead letter of u, its error as a fixture states it; errs keeps the
// whole error, by update.
func poison(errs map[uint64]string) func(fold.Update, error) fold.DeadLetter {
	return func(u fold.Update, err error) fold.DeadLetter {
		errs[uint64(u.Rev)] = err.Error()
		return fold.DeadLetter{Key: u.Key, Rev: uint64(u.Rev), Op: u.Op.String(), Error: deadLetterError(err)}
	}
}

// deadLetterError is what a fixture says of a failed update: the failure's
// kind, with the plugin's own message for a reported error and the bound
// for a limit (not the module's hash, nor a trap's stack trace, which
// change with every build).
func deadLetterError(err error) string {
	var pe *wasm.PluginError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	var ge *abi.GuestError
	var le *wasm.LimitError
	switch {
	case errors.As(err, &ge):
		return string(pe.Kind) + ": " + ge.Message
	case errors.As(err, &le):
		return string(pe.Kind) + ": " + le.Error()
	}
	return string(pe.Kind)
}

// queries runs each query of want (its name and input) on a snapshot of
// st and returns the answers.
func (r *fixtureRunner) queries(p *wasm.Plugin, st *fold.Store, want []queryLine) ([]queryLine, error) {
	if len(want) == 0 {
		return nil, nil
	}
	sn, err := st.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errScratch, err)
	}
	defer sn.Close()
	var out []queryLine
	for _, w := range want {
		q := queryLine{name: w.name, input: w.input}
		a, err := p.Query(r.ctx, w.name, w.input, sn)
		var pe *wasm.PluginError
		var ge *abi.GuestError
		switch {
		case err == nil:
			q.answer = a.Body
		case errors.As(err, &ge):
			q.refused = &ge.Message
		case errors.As(err, &pe):
			q.failed = string(pe.Kind)
		case r.ctx.Err() != nil:
			return nil, r.ctx.Err()
		default:
			q.failed = err.Error() // no such query, an input over the bound
		}
		out = append(out, q)
	}
	return out, nil
}

// firstDiff is the first category of b whose expected lines differ from
// got's, with a diff of them ("" when none does).
func firstDiff(b *batch, got expect) string {
	want, have := b.categories(b.want), b.categories(got)
	for i := range want {
		if d := lineDiff(want[i].lines, have[i].lines); d != "" {
			return fmt.Sprintf("%s differ (- expected, + produced):\n%s", want[i].name, d)
		}
	}
	return ""
}

// explain adds what a diff cannot show: the whole error of each dead
// letter the module produced in b.
func (res fixtureRun) explain(w io.Writer, _ *batch, got expect) {
	for _, d := range got.dead {
		if full := res.errors[d.update]; full != "" && full != d.err {
			fmt.Fprintf(w, "    update %d failed: %s\n", d.update, textfmt.Printable(textfmt.OneLine(full, 2000)))
		}
	}
}

// plural is n with the noun for it.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// maxDiffLines bounds the lines of one diff.
const maxDiffLines = 20

// lineDiff is a diff of want and got, the lines only in want marked -,
// only in got +, in order (their longest common subsequence left out);
// "" when they are equal.
func lineDiff(want, got []string) string {
	if slices.Equal(want, got) {
		return ""
	}
	var out []string
	if len(want)*len(got) > 4<<20 { // too long for the table: the lines each lacks
		in := func(l string, ls []string) bool {
			return strings.Contains("\n"+strings.Join(ls, "\n")+"\n", "\n"+l+"\n")
		}
		for _, l := range want {
			if !in(l, got) {
				out = append(out, "- "+l)
			}
		}
		for _, l := range got {
			if !in(l, want) {
				out = append(out, "+ "+l)
			}
		}
	} else {
		// lcs[i][j]: the longest common subsequence of want[i:] and got[j:].
		lcs := make([][]int, len(want)+1)
		for i := range lcs {
			lcs[i] = make([]int, len(got)+1)
		}
		for i := len(want) - 1; i >= 0; i-- {
			for j := len(got) - 1; j >= 0; j-- {
				if want[i] == got[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(want) || j < len(got) {
			switch {
			case i < len(want) && j < len(got) && want[i] == got[j]:
				i, j = i+1, j+1
			case i < len(want) && (j == len(got) || lcs[i+1][j] >= lcs[i][j+1]):
				out = append(out, "- "+want[i])
				i++
			default:
				out = append(out, "+ "+got[j])
				j++
			}
		}
	}
	if len(out) == 0 { // the same lines, repeated otherwise
		out = append(out, fmt.Sprintf("  (%d lines expected, %d produced)", len(want), len(got)))
	}
	var b strings.Builder
	for i, l := range out {
		if i == maxDiffLines {
			fmt.Fprintf(&b, "    … %d more\n", len(out)-i)
			break
		}
		b.WriteString("    " + textfmt.Printable(textfmt.OneLine(l, 500)) + "\n")
	}
	return b.String()
}

// writeFileKeepMode replaces the file at path with b, keeping its mode,
// through a temporary file renamed over it.
func writeFileKeepMode(path string, b []byte) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp := path + ".foldhost-update.tmp"
	if err := os.WriteFile(tmp, b, fi.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// quiet is the scratch stores' and loops' logger.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openModule loads the module at path through a new runtime with opts.
// The caller closes both.
func openModule(ctx context.Context, path string, opts wasm.Options) (*wasm.Runtime, *wasm.Module, error) {
	rt, err := wasm.NewRuntime(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	m, err := rt.LoadFile(ctx, path) // a regular file within MaxModuleBytes only: never /dev/zero
	if err != nil {
		rt.Close(context.Background())
		return nil, nil, &Failed{"load", err}
	}
	return rt, m, nil
}

// describe prints what the module at path says about itself.
func describe(w io.Writer, path string, m *wasm.Module) {
	id := m.Identity()
	fmt.Fprintf(w, "plugin %s: name %s, version %s, view schema %d, ABI %s, sha256 %s\n",
		path, textfmt.Printable(id.Name), textfmt.Printable(id.Version), id.ViewSchema, id.ABI, id.SHA256)
}
