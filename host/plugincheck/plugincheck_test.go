package plugincheck

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/wasm"
)

// runChecks runs the apply, output, effects and determinism checks on the
// plugins fresh returns, and returns their PASS and FAIL lines.
func runChecks(t *testing.T, fresh func() fold.Plugin) (string, error) {
	var out bytes.Buffer
	fail := func(check string, err error) error {
		out.WriteString("FAIL " + check + " " + err.Error() + "\n")
		return &Failed{check, err}
	}
	err := checkRuns(context.Background(), &out, fail, fresh, t.TempDir())
	return out.String(), err
}

// TestPluginCheckRunsOnFreshPlugins drives the apply, output and
// determinism checks with fakes (fault injection: no module in the host's
// sandbox varies between instances, and none of the built ones makes an
// output the host refuses on the check's batches).
func TestPluginCheckRunsOnFreshPlugins(t *testing.T) {
	run := func(fresh func() fold.Plugin) (string, error) { return runChecks(t, fresh) }
	// The batches: a put, a delete, and a key that is not UTF-8.
	var seen []fold.Update
	runs := 0
	out, err := run(func() fold.Plugin {
		runs++
		return fold.PluginFunc(func(_ context.Context, batch []fold.Update, _ fold.Reader) (fold.Output, error) {
			if runs == 1 {
				seen = append(seen, batch...)
			}
			return fold.Output{Views: []fold.ViewMutation{{Op: fold.ViewPut, Key: []byte("n"), Value: []byte{byte('0' + len(batch))}}}}, nil
		})
	})
	if err != nil || runs != 2 || !strings.Contains(out, "PASS determinism") {
		t.Fatalf("a deterministic fake: %v after %d runs:\n%s", err, runs, out)
	}
	var put, del, binary bool
	for _, u := range seen {
		put = put || u.Op == fold.OpPut
		del = del || u.Op == fold.OpDelete
		binary = binary || !utf8.ValidString(u.Key)
	}
	if !put || !del || !binary {
		t.Errorf("the check batches lack a put (%v), a delete (%v) or a key that is not UTF-8 (%v): %+v", put, del, binary, seen)
	}

	// nondeterministicFake: the second instance puts another value of the
	// same length.
	runs = 0
	out, err = run(func() fold.Plugin {
		runs++
		v := []byte{byte('a' + runs)}
		return fold.PluginFunc(func(context.Context, []fold.Update, fold.Reader) (fold.Output, error) {
			return fold.Output{Views: []fold.ViewMutation{{Op: fold.ViewPut, Key: []byte("k"), Value: v}}}, nil
		})
	})
	var cf *Failed
	if !asCheckFailed(err, &cf) || cf.Check != "determinism" || !strings.Contains(out, "FAIL determinism batch 1") {
		t.Errorf("a nondeterministic fake: %v:\n%s", err, out)
	}

	// malformedFake: what the host refuses of an output fails the output
	// check, anything else the apply check.
	for kind, check := range map[wasm.Kind]string{wasm.KindMalformed: "output", wasm.KindLimit: "output", wasm.KindTrap: "apply", wasm.KindTimeout: "apply"} {
		out, err = run(func() fold.Plugin {
			return fold.PluginFunc(func(context.Context, []fold.Update, fold.Reader) (fold.Output, error) {
				return fold.Output{}, &wasm.PluginError{Kind: kind, Module: "fake", Err: os.ErrInvalid}
			})
		})
		if !asCheckFailed(err, &cf) || cf.Check != check || strings.Contains(out, "PASS") {
			t.Errorf("a fake failing with %s: %v, want check %s failed:\n%s", kind, err, check, out)
		}
	}
}

func asCheckFailed(err error, cf **Failed) bool {
	c, ok := err.(*Failed)
	*cf = c
	return ok
}

// TestPluginCheckReportsEffects: a plugin's effects are reported, as
// naming their update or filed per batch (what replicas need), and a
// second instance that emits other effects fails the determinism check.
// Fakes (fault injection): no built module emits per batch any more.
func TestPluginCheckReportsEffects(t *testing.T) {
	run := func(fresh func() fold.Plugin) (string, error) { return runChecks(t, fresh) }
	emitter := func(named bool, payload func() string) func() fold.Plugin {
		return func() fold.Plugin {
			p := payload()
			return fold.PluginFunc(func(_ context.Context, batch []fold.Update, _ fold.Reader) (fold.Output, error) {
				e := fold.Effect{Subject: "changed", Payload: []byte(p)}
				if named {
					e.UpdateRev = batch[len(batch)-1].Rev
				}
				return fold.Output{Effects: []fold.Effect{e}}, nil
			})
		}
	}
	same := func() string { return "p" }
	for _, c := range []struct {
		named bool
		want  string
	}{{true, "effects, each naming its update"}, {false, "effects, filed per batch"}} {
		out, err := run(emitter(c.named, same))
		if err != nil || !strings.Contains(out, "PASS effects") || !strings.Contains(out, c.want) {
			t.Errorf("named %v: %v:\n%s", c.named, err, out)
		}
	}
	n := 0
	out, err := run(emitter(true, func() string { n++; return strings.Repeat("p", n) }))
	if err == nil || !strings.Contains(out, "FAIL determinism") {
		t.Errorf("a second instance with other effects: %v:\n%s", err, out)
	}
}
