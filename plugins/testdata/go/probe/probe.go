// Package probe is the Go SDK probe (abi/sdk/go): the probe of
// ../../c/probe.c, command for command, byte for byte, for the commands the
// Go SDK has (no stdout/stderr commands). It builds natively, so the host's
// tests run it both as a module (../main.go, probe-go.wasm) and through the
// host's native path (host/wasm.NewNative).
//
// parsefail: the Go SDK's Parse cannot fail a batch (it accepts or
// rejects), so the probe marks the batch in Parse and fails it with the
// value as message at the start of Apply: the same status-1 output, nothing
// committed.
package probe

import (
	"bytes"
	"errors"
	"strconv"

	foldhost "github.com/foldhost/foldhost/abi/sdk/go"

	"github.com/foldhost/foldhost/abi"
)

// Rec is one accepted update, copied (an update is only valid in Parse).
type Rec struct {
	remove bool
	key    []byte
	value  []byte
}

// Probe implements foldhost.Plugin[Rec].
type Probe struct {
	parseFail []byte // the message of a parsefail in this batch
	failed    bool
	key, val  []byte
}

var _ foldhost.Plugin[Rec] = (*Probe)(nil)

// Info implements foldhost.Plugin.
func (*Probe) Info() abi.Info {
	return abi.Info{Name: "testdata-probe", Version: "1.0.0", ViewSchema: 1}
}

// Parse implements foldhost.Plugin.
func (p *Probe) Parse(u *foldhost.Update, r *Rec) bool {
	if bytes.HasPrefix(u.Key, []byte("reject")) {
		return false
	}
	if string(u.Key) == "parsefail" && !p.failed {
		p.failed = true
		p.parseFail = append(p.parseFail[:0], u.Value...)
	}
	r.remove = u.Removes()
	r.key = append(r.key[:0], u.Key...)
	r.value = append(r.value[:0], u.Value...)
	return true
}

// result puts <prefix><i>/<k> = head + v.
func (p *Probe) result(b *foldhost.Batch, prefix string, i int, k []byte, head string, v []byte) {
	p.key = append(strconv.AppendInt(append(p.key[:0], prefix...), int64(i), 10), '/')
	p.key = append(p.key, k...)
	p.val = append(append(p.val[:0], head...), v...)
	b.Put(p.key, p.val)
}

// Apply implements foldhost.Plugin.
func (p *Probe) Apply(b *foldhost.Batch, recs []Rec) error {
	if p.failed {
		p.failed = false
		return errors.New(string(p.parseFail))
	}
	for i := range recs {
		r := &recs[i]
		switch k := r.key; {
		case bytes.HasPrefix(k, []byte("w/")):
			if r.remove {
				b.Delete(k[2:])
			} else {
				b.Put(k[2:], r.value)
			}
		case bytes.HasPrefix(k, []byte("pf/")):
			if err := b.Prefetch(k[3:]); err != nil {
				return err
			}
		case bytes.HasPrefix(k, []byte("pfraw/")):
			if err := b.PrefetchRaw(k[6:]); err != nil {
				return err
			}
		case bytes.HasPrefix(k, []byte("r/")):
			v, found, err := b.View(k[2:])
			if err != nil {
				return err
			}
			if found {
				p.result(b, "got/", i, k[2:], "1", v)
			} else {
				p.result(b, "got/", i, k[2:], "0", nil)
			}
		case bytes.HasPrefix(k, []byte("raw/")):
			e, found, err := b.Raw(k[4:])
			if err != nil {
				return err
			}
			if found {
				p.result(b, "rawgot/", i, k[4:], strconv.FormatUint(e.Rev, 10)+":", e.Value)
			} else {
				p.result(b, "rawgot/", i, k[4:], "0", nil)
			}
		case string(k) == "log":
			b.Log(0, string(r.value))
		case bytes.HasPrefix(k, []byte("emitfor/")) && len(k) > 10:
			b.EmitFor(int(k[8]-'0'), k[10:], r.value)
		case bytes.HasPrefix(k, []byte("emit/")):
			b.Emit(k[5:], r.value)
		case string(k) == "fail":
			return errors.New(string(r.value))
		}
	}
	return nil
}
