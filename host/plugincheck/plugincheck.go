package plugincheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/textfmt"
	"github.com/foldhost/foldhost/protocol"
)

// checkBatches are the updates plugin check folds: a put of a router
// entry (the example's key space, so its builds emit views), a put whose
// key and value are not UTF-8, a replacement, a delete and a delete of a
// key never written. A plugin of another key space rejects or ignores
// them, which passes: only failures, malformed outputs and differing
// outputs fail.
func checkBatches() [][]fold.Update {
	var rev protocol.Revision
	u := func(op fold.Op, key, value string) fold.Update {
		rev++
		if op != fold.OpPut {
			value = ""
		}
		return fold.Update{Op: op, Key: key, Value: []byte(value), Rev: rev, Time: 1_700_000_000_000_000_000 + int64(rev)}
	}
	const binKey = "route.\xff\xfe\x00\x80bin"
	return [][]fold.Update{{
		u(fold.OpPut, "route.check.example", `{"upstreams":[{"addr":"10.0.0.1:80","weight":2},{"addr":"10.0.0.2:80"}]}`),
		u(fold.OpPut, binKey, `{"upstreams":[{"addr":"10.0.0.3:80"}]}`),
		u(fold.OpPut, "check.\xc3\x28", "\xff\xfe not JSON, not UTF-8"),
	}, {
		u(fold.OpPut, "route.check.example", `{"upstreams":[{"addr":"10.0.0.2:80","weight":5}]}`),
		u(fold.OpDelete, binKey, ""),
		u(fold.OpDelete, "route.never.written", ""),
	}}
}

// Failed is the first check that failed: Check names it (load, apply,
// output or determinism).
type Failed struct {
	Check string
	Err   error
}

func (e *Failed) Error() string { return fmt.Sprintf("check %s failed: %v", e.Check, e.Err) }
func (e *Failed) Unwrap() error { return e.Err }

// failLine prints check's FAIL line to w and returns its *Failed.
func failLine(w io.Writer, check string, err error) error {
	fmt.Fprintf(w, "FAIL %-11s %s\n", check, textfmt.Printable(textfmt.OneLine(err.Error(), 2000))) // guest names and messages: no raw escapes
	return &Failed{check, err}
}

// Check runs the checks on the module at path, loaded with opts (a node's
// limits; Retries should be wasm.NoRetries: a failure is the verdict),
// printing a PASS or FAIL line per check to w. It returns a *Failed
// naming the first check that failed, or another error when the checks
// could not run.
func Check(ctx context.Context, w io.Writer, path string, opts wasm.Options) error {
	fail := func(check string, err error) error { return failLine(w, check, err) }
	start := time.Now()
	rt, m, err := openModule(ctx, path, opts)
	if f := (*Failed)(nil); errors.As(err, &f) {
		return fail(f.Check, f.Err)
	}
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	describe(w, path, m)
	fmt.Fprintf(w, "PASS %-11s validated and instantiated in %v (memory limit %d MiB)\n", "load",
		time.Since(start).Round(time.Millisecond), opts.MemoryLimitPages/16)
	queries := m.Queries
	if len(queries) > 0 { // validated by the load (names, content types); run by the queries check
		var qs []string
		for _, q := range m.Queries {
			ct := q.ContentType
			if ct == "" {
				ct = "application/octet-stream"
			}
			qs = append(qs, q.Name+" ("+textfmt.Printable(ct)+")")
		}
		fmt.Fprintf(w, "queries: %s\n", strings.Join(qs, ", "))
	}

	// Each run on a fresh instance of m: the Plugin of the last run hands
	// its module on and its instance goes.
	var p *wasm.Plugin
	defer func() {
		if p != nil {
			p.Close(context.Background())
		} else {
			m.Close(context.Background())
		}
	}()
	fresh := func() fold.Plugin {
		if p != nil {
			m = p.Release(context.Background())
		}
		p = rt.NewPlugin(m)
		return p
	}
	scratch, err := os.MkdirTemp("", "foldhost-plugin-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	if err := checkRuns(ctx, w, fail, fresh, scratch); err != nil {
		return err
	}
	if len(queries) > 0 {
		if err := checkQueries(ctx, w, fail, p, queries, scratch+"/1"); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "all checks passed\n")
	return nil
}

// checkQueries runs each query once with an empty input on the store the
// first run folded (dir), through p's query instances. An answer passes,
// and so does a refusal (the guest's error status: an empty input may be
// no valid input); a trap, a timeout, a limit or a malformed answer fails
// (bad input must be refused, not crash the query).
func checkQueries(ctx context.Context, w io.Writer, fail func(string, error) error, p *wasm.Plugin, queries []abi.Query, dir string) error {
	st, _, err := fold.Open(dir, fold.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return fmt.Errorf("%w: %w", errScratch, err)
	}
	defer st.Close()
	sn, err := st.Snapshot()
	if err != nil {
		return fmt.Errorf("%w: %w", errScratch, err)
	}
	defer sn.Close()
	var res []string
	for _, q := range queries {
		a, err := p.Query(ctx, q.Name, nil, sn)
		var pe *wasm.PluginError
		var ge *abi.GuestError
		switch {
		case err == nil:
			res = append(res, fmt.Sprintf("%s: %d bytes: %s", q.Name, len(a.Body), answerText(a.Body)))
		case errors.As(err, &pe) && pe.Kind == wasm.KindGuest && errors.As(err, &ge):
			res = append(res, fmt.Sprintf("%s: refused: %s", q.Name, answerText([]byte(ge.Message))))
		default:
			return fail("queries", fmt.Errorf("query %s with an empty input: %w (refuse bad input with an error answer)", q.Name, err))
		}
	}
	fmt.Fprintf(w, "PASS %-11s each ran once with an empty input on the folded store:\n", "queries")
	for _, r := range res {
		fmt.Fprintf(w, "  %s\n", r)
	}
	return nil
}

// maxAnswerText bounds an answer plugin check prints.
const maxAnswerText = 300

// answerText is an answer as plugin check prints it: on one line, cut
// at maxAnswerText bytes, escaped where it is not printable text.
func answerText(b []byte) string {
	return textfmt.Printable(textfmt.OneLine(string(b), maxAnswerText))
}

// checkRuns runs the apply, output and determinism checks: the check
// batches folded twice, each time through a plugin fresh returns (a fresh
// instance), into a scratch store of its own (scratch/1, scratch/2).
func checkRuns(ctx context.Context, w io.Writer, fail func(string, error) error, fresh func() fold.Plugin, scratch string) error {
	first, err := foldCheckBatches(ctx, fresh(), scratch+"/1")
	if errors.Is(err, errScratch) {
		return err
	}
	if err != nil {
		return failOfApply(fail, err)
	}
	fmt.Fprintf(w, "PASS %-11s %d batches, %d updates: %d view mutations, %d rejected\n", "apply",
		len(first.outs), first.updates, first.views, first.rejected)
	fmt.Fprintf(w, "PASS %-11s every output decodes within the limits (%d bytes in all)\n", "output", first.bytes)
	switch {
	case first.effects == 0:
	case first.named == first.effects:
		fmt.Fprintf(w, "PASS %-11s %d effects, each naming its update (replicas of a fold may all publish, at any batch_size)\n", "effects", first.effects)
	default:
		fmt.Fprintf(w, "PASS %-11s %d effects, filed per batch (replicas of a fold publish safely at batch_size = 1, or one of them publishes; name each effect's update: emit_for)\n", "effects", first.effects)
	}
	second, err := foldCheckBatches(ctx, fresh(), scratch+"/2")
	if errors.Is(err, errScratch) {
		return err
	}
	if err != nil {
		return fail("determinism", fmt.Errorf("the second instance failed where the first did not: %w", err))
	}
	for i := range first.outs {
		if !bytes.Equal(first.outs[i], second.outs[i]) {
			return fail("determinism", fmt.Errorf("batch %d: a second, fresh instance produced a different output (%d bytes, the first %d): "+
				"the plugin depends on something besides its input and its reads", i+1, len(second.outs[i]), len(first.outs[i])))
		}
	}
	fmt.Fprintf(w, "PASS %-11s a second, fresh instance produced byte-identical outputs\n", "determinism")
	return nil
}

// failOfApply names the check a failed Apply fails: output for what the
// host refused of an output, apply for everything else.
func failOfApply(fail func(string, error) error, err error) error {
	var pe *wasm.PluginError
	if errors.As(err, &pe) && (pe.Kind == wasm.KindMalformed || pe.Kind == wasm.KindLimit) {
		return fail("output", err)
	}
	return fail("apply", err)
}

// errScratch marks a failure of the scratch store: not the plugin's.
var errScratch = errors.New("plugin check: scratch store")

// checkRun is what one run of the check batches produced.
type checkRun struct {
	outs                            [][]byte // each batch's output, re-encoded
	updates, views, rejected, bytes int
	effects, named                  int // effects, and those naming their update
}

// foldCheckBatches folds checkBatches through p into a new store in dir,
// committing each batch as the fold loop does (so the next batch's reads
// see it), and keeps each output encoded as the ABI encodes it. The
// encoding is canonical (the host's decoder refuses anything but an exact
// record), so equal encodings mean equal guest outputs.
func foldCheckBatches(ctx context.Context, p fold.Plugin, dir string) (checkRun, error) {
	var run checkRun
	st, _, err := fold.Open(dir, fold.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return run, fmt.Errorf("%w: %w", errScratch, err)
	}
	defer st.Close()
	var enc abi.OutputWriter
	for _, batch := range checkBatches() {
		out, err := p.Apply(ctx, batch, st)
		if err != nil {
			return run, err
		}
		enc.Reset()
		for _, v := range out.Views {
			if v.Op == fold.ViewPut {
				enc.Put(v.Key, v.Value)
			} else {
				enc.Delete(v.Key)
			}
		}
		for range out.Rejected {
			enc.Reject()
		}
		for _, e := range out.Effects {
			hs := make([]abi.Header, 0, len(e.Headers))
			for _, h := range e.Headers {
				hs = append(hs, abi.Header{Name: []byte(h.Name), Value: []byte(h.Value)})
			}
			if e.UpdateRev == 0 {
				enc.Emit([]byte(e.Subject), hs, e.Payload)
				continue
			}
			i := slices.IndexFunc(batch, func(u fold.Update) bool { return u.Rev == e.UpdateRev })
			enc.EmitFor(uint32(i), []byte(e.Subject), hs, e.Payload)
			run.named++
		}
		run.effects += len(out.Effects)
		b := enc.Bytes()
		run.outs = append(run.outs, bytes.Clone(b))
		run.updates += len(batch)
		run.views += len(out.Views)
		run.rejected += out.Rejected
		run.bytes += len(b)
		if err := st.Commit(fold.Commit{Raw: batch, Views: out.Views, Cursor: protocol.Cursor{Rev: batch[len(batch)-1].Rev},
			PluginIdentity: out.Identity}); err != nil {
			return run, fmt.Errorf("%w: %w", errScratch, err)
		}
	}
	return run, nil
}

// Options are the runtime options of the plugin commands' limits flags:
// memMB (1..4096) as a fold's plugin_memory_mb, maxMB as plugin_max_mb,
// timeout as plugin_call_timeout (0: none); no retries (a failure is the
// verdict). cacheDir keeps compiled modules ("": none); log takes the
// plugin's log lines and output, as a node logs them.
func Options(memMB, maxMB int, timeout time.Duration, cacheDir string, log *slog.Logger) (wasm.Options, error) {
	if memMB <= 0 || memMB > 4096 || maxMB <= 0 || timeout < 0 {
		return wasm.Options{}, errors.New("--memory-mb must be 1..4096, --max-mb positive, --call-timeout not negative")
	}
	o := wasm.Options{CacheDir: cacheDir, MemoryLimitPages: uint32(memMB) * 16, // 64 KiB pages
		MaxModuleBytes: int64(maxMB) << 20, CallTimeout: timeout, Retries: wasm.NoRetries, Logger: log}
	if timeout == 0 {
		o.CallTimeout = wasm.NoCallTimeout
	}
	return o, nil
}

// Refused is a module that fails Validate's checks.
type Refused struct{ Err error }

func (e *Refused) Error() string { return e.Err.Error() }
func (e *Refused) Unwrap() error { return e.Err }

// Validate makes the checks a node makes before it swaps a module in, on
// the module's bytes b, with its fold's limits: the load check alone. It
// returns the module's identity, or a *Refused when the module fails them
// (another error: the checks could not run).
func Validate(ctx context.Context, b []byte, limits wasm.Options) (fold.PluginIdentity, error) {
	rt, err := wasm.NewRuntime(ctx, limits)
	if err != nil {
		return fold.PluginIdentity{}, err
	}
	defer rt.Close(context.Background())
	m, err := rt.Load(ctx, b)
	if err != nil {
		return fold.PluginIdentity{}, &Refused{err}
	}
	defer m.Close(context.Background())
	return m.Identity(), nil
}
