package abi

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

func TestBatchRoundTrip(t *testing.T) {
	var e BatchEncoder
	for round := 0; round < 2; round++ { // the second round reuses the buffer
		e.Reset()
		e.Add(OpPut, 7, 1700, "route.a", []byte(`{"x":1}`))
		e.Add(OpDelete, 8, 1701, "route.b", nil)
		e.Add(OpPurge, 0, 0, "", nil)
		r := NewBatchReader(e.Bytes())
		if r.Len() != 3 {
			t.Fatalf("Len = %d", r.Len())
		}
		var got []string
		for r.Next() {
			u := r.Update()
			got = append(got, fmt.Sprintf("%d/%d/%d/%s/%s", u.Op, u.Rev, u.Time, u.Key, u.Value))
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		want := `[1/7/1700/route.a/{"x":1} 2/8/1701/route.b/ 3/0/0//]`
		if fmt.Sprint(got) != want {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	var empty BatchEncoder
	r := NewBatchReader(empty.Bytes())
	if r.Next() || r.Err() != nil {
		t.Fatalf("empty batch: next or err %v", r.Err())
	}
}

func TestBatchRejects(t *testing.T) {
	var e BatchEncoder
	e.Add(OpPut, 1, 1, "k", []byte("v"))
	good := e.Bytes()
	cases := map[string][]byte{
		"empty":          {},
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte{}, good...), 0),
		"huge count":     {0xff, 0xff, 0xff, 0xff},
		"bad op":         append([]byte{1, 0, 0, 0, 9}, good[5:]...),
		"key past end":   append(append([]byte{}, good[:21]...), 0xff, 0xff, 0, 0),
		"count too high": append([]byte{2, 0, 0, 0}, good[4:]...),
	}
	for name, b := range cases {
		r := NewBatchReader(b)
		for r.Next() {
		}
		if !errors.Is(r.Err(), ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, r.Err())
		}
	}
}

func TestOutputRoundTrip(t *testing.T) {
	var w OutputWriter
	w.Reset()
	w.Put([]byte("h.a"), []byte("entry"))
	w.Delete([]byte("h.b"))
	w.Reject()
	w.Reject()
	var got []string
	rej, err := DecodeOutput(w.Bytes(), func(op byte, k, v []byte) error {
		got = append(got, fmt.Sprintf("%d:%s=%s", op, k, v))
		return nil
	})
	if err != nil || rej != 2 || fmt.Sprint(got) != "[1:h.a=entry 2:h.b=]" {
		t.Fatalf("rej %d err %v got %v", rej, err, got)
	}
	_, err = DecodeOutput(w.Error("bad route"), func(byte, []byte, []byte) error { return nil })
	var ge *GuestError
	if !errors.As(err, &ge) || ge.Message != "bad route" {
		t.Fatalf("error record: %v", err)
	}
	stop := errors.New("stop")
	w.Reset()
	w.Put([]byte("k"), nil)
	if _, err := DecodeOutput(w.Bytes(), func(byte, []byte, []byte) error { return stop }); err != stop {
		t.Fatalf("callback error not returned: %v", err)
	}
	for name, b := range map[string][]byte{
		"empty":      {},
		"status 7":   {7, 0, 0, 0},
		"truncated":  w.Bytes()[:len(w.Bytes())-1],
		"bad op":     {0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0},
		"trailing":   append(append([]byte{}, w.Bytes()...), 1),
		"huge count": {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f},
	} {
		if _, err := DecodeOutput(b, func(byte, []byte, []byte) error { return nil }); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

// TestOutputEffectsForUpdates: effects that name their update travel as a
// status-3 record, each with its update's index; indices that decrease,
// and Emit mixed with EmitFor, are refused on both sides.
func TestOutputEffectsForUpdates(t *testing.T) {
	var w OutputWriter
	w.Reset()
	w.Put([]byte("host/a"), []byte("e"))
	w.EmitFor(0, []byte("route.changed"), []Header{{[]byte("Route-Op"), []byte("put")}}, []byte("a"))
	w.EmitFor(2, []byte("route.changed"), nil, []byte("b"))
	w.EmitFor(2, []byte("other"), nil, nil)
	out := w.Bytes()
	if le.Uint32(out) != StatusOKUpdateEffects {
		t.Fatalf("status %d, want %d", le.Uint32(out), StatusOKUpdateEffects)
	}
	var got []string
	if _, err := DecodeOutputEffects(out, -1, func(byte, []byte, []byte) error { return nil }, func(e *Effect) error {
		got = append(got, fmt.Sprintf("%d:%s:%s", e.Update, e.Subject, e.Payload))
		return nil
	}); err != nil || fmt.Sprint(got) != "[0:route.changed:a 2:route.changed:b 2:other:]" {
		t.Fatalf("err %v effects %v", err, got)
	}
	// A status-2 record's effects name no update.
	w.Reset()
	w.Emit([]byte("a"), nil, nil)
	if _, err := DecodeOutputEffects(w.Bytes(), -1, func(byte, []byte, []byte) error { return nil }, func(e *Effect) error {
		if e.Update != -1 {
			t.Errorf("a status-2 effect names update %d", e.Update)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	misuse := map[string]func(w *OutputWriter){
		"decreasing":    func(w *OutputWriter) { w.EmitFor(3, []byte("a"), nil, nil); w.EmitFor(1, []byte("a"), nil, nil) },
		"Emit, EmitFor": func(w *OutputWriter) { w.Emit([]byte("a"), nil, nil); w.EmitFor(1, []byte("a"), nil, nil) },
		"EmitFor, Emit": func(w *OutputWriter) { w.EmitFor(1, []byte("a"), nil, nil); w.Emit([]byte("a"), nil, nil) },
	}
	for name, f := range misuse {
		w.Reset()
		f(&w)
		var ge *GuestError
		if _, err := DecodeOutput(w.Bytes(), func(byte, []byte, []byte) error { return nil }); !errors.As(err, &ge) {
			t.Errorf("%s: %v, want the writer's error record", name, err)
		}
		w.Reset() // a Reset forgets the misuse
		if _, err := DecodeOutput(w.Bytes(), func(byte, []byte, []byte) error { return nil }); err != nil {
			t.Errorf("%s, then Reset: %v", name, err)
		}
	}
	// Decreasing indices in a record a writer did not make.
	rec := le.AppendUint32(nil, StatusOKUpdateEffects)
	rec = le.AppendUint32(le.AppendUint32(rec, 0), 0) // rejected, mutations
	rec = le.AppendUint32(rec, 2)
	rec = appendEffect(le.AppendUint32(rec, 5), []byte("a"), nil, nil)
	rec = appendEffect(le.AppendUint32(rec, 4), []byte("a"), nil, nil)
	if _, err := DecodeOutput(rec, func(byte, []byte, []byte) error { return nil }); !errors.Is(err, ErrMalformed) {
		t.Fatalf("decreasing update indices: %v, want ErrMalformed", err)
	}
	if _, err := DecodeOutput([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, func(byte, []byte, []byte) error { return nil }); !errors.Is(err, ErrMalformed) {
		t.Fatalf("status 3 without effects: %v, want ErrMalformed", err)
	}
}

func TestOutputEffectsRoundTrip(t *testing.T) {
	var w OutputWriter
	w.Reset()
	w.Put([]byte("host/a"), []byte("e"))
	noEffects := append([]byte(nil), w.Bytes()...)
	if le.Uint32(noEffects) != StatusOK {
		t.Fatalf("an output without effects has status %d, want 0 (a minor-0 record)", le.Uint32(noEffects))
	}
	// The writer goes on after Bytes: an effect turns it into status 2.
	w.Emit([]byte("route.changed"), []Header{{[]byte("Route-Op"), []byte("put")}, {[]byte("X"), nil}}, []byte("a\ne"))
	w.Emit([]byte("b"), nil, nil)
	out := w.Bytes()
	if le.Uint32(out) != StatusOKEffects || !bytes.HasPrefix(out[4:], noEffects[4:]) {
		t.Fatalf("status %d; mutations changed: %x", le.Uint32(out), out)
	}
	if again := w.Bytes(); !bytes.Equal(again, out) {
		t.Fatalf("a second Bytes differs: %x vs %x", again, out)
	}
	var muts, effs []string
	_, err := DecodeOutputEffects(out, -1, func(op byte, k, v []byte) error {
		muts = append(muts, fmt.Sprintf("%d:%s=%s", op, k, v))
		return nil
	}, func(e *Effect) error {
		s := string(e.Subject) + "|"
		for _, h := range e.Headers {
			s += string(h.Name) + ":" + string(h.Value) + ";"
		}
		effs = append(effs, s+"|"+string(e.Payload))
		return nil
	})
	if err != nil || fmt.Sprint(muts) != "[1:host/a=e]" || fmt.Sprintf("%q", effs) != `["route.changed|Route-Op:put;X:;|a\ne" "b||"]` {
		t.Fatalf("err %v muts %v effects %q", err, muts, effs)
	}
	// The plain decoder validates and drops them.
	if _, err := DecodeOutput(out, func(byte, []byte, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	if _, err := DecodeOutputEffects(out, -1, func(byte, []byte, []byte) error { return nil }, func(*Effect) error { return stop }); err != stop {
		t.Fatalf("effect callback error not returned: %v", err)
	}

	bad := func(subject string, h []Header) []byte {
		var w OutputWriter
		w.Reset()
		w.Emit([]byte(subject), h, []byte("p"))
		return w.Bytes()
	}
	hdr := func(n, v string) []Header { return []Header{{[]byte(n), []byte(v)}} }
	for name, b := range map[string][]byte{
		"status 2, no effects":   {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"status 2, no section":   {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"empty subject":          bad("", nil),
		"empty token":            bad("a..b", nil),
		"leading dot":            bad(".a", nil),
		"trailing dot":           bad("a.", nil),
		"star":                   bad("a.*", nil),
		"gt":                     bad("a.>", nil),
		"space":                  bad("a b", nil),
		"tab":                    bad("a\tb", nil),
		"long subject":           bad(strings.Repeat("a", MaxSubjectBytes+1), nil),
		"empty header name":      bad("a", hdr("", "v")),
		"colon in name":          bad("a", hdr("A:B", "v")),
		"space in name":          bad("a", hdr("A B", "v")),
		"reserved Nats-":         bad("a", hdr("nats-msg-id", "x")),
		"reserved Foldhost-":     bad("a", hdr("FOLDHOST-x", "x")),
		"CR in value":            bad("a", hdr("A", "x\ry")),
		"LF in value":            bad("a", hdr("A", "x\ny")),
		"leading space in value": bad("a", hdr("A", " x")),
		"truncated":              out[:len(out)-1],
		"trailing":               append(append([]byte{}, out...), 0),
	} {
		if _, err := DecodeOutputEffects(b, -1, func(byte, []byte, []byte) error { return nil }, func(*Effect) error { return nil }); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	if err := ValidSubject([]byte("route.changed.api-1_x")); err != nil {
		t.Fatal(err)
	}
}

func TestInfoAndReadRoundTrip(t *testing.T) {
	in := Info{Name: "example-router", Version: "1.0.0", ViewSchema: 3}
	got, err := DecodeInfo(AppendInfo(nil, in))
	if err != nil || got != in {
		t.Fatalf("info %+v %v", got, err)
	}
	if _, err := DecodeInfo(AppendInfo(nil, in)[:5]); !errors.Is(err, ErrMalformed) {
		t.Fatal("truncated info accepted")
	}
	req := AppendReadRequest(nil, [][]byte{[]byte("a"), []byte("bb")})
	var keys []string
	if err := DecodeReadRequest(req, func(k []byte) error { keys = append(keys, string(k)); return nil }); err != nil || fmt.Sprint(keys) != "[a bb]" {
		t.Fatalf("request %v %v", keys, err)
	}
	resp := AppendReadRawHit(AppendReadMiss(AppendReadHit(nil, []byte("v"))), 9, []byte("raw"))
	var out []string
	err = DecodeReadResponse(resp, 3, func(i int, found bool, v []byte) error {
		out = append(out, fmt.Sprintf("%d:%v:%q", i, found, v))
		return nil
	})
	if err != nil || fmt.Sprint(out) != `[0:true:"v" 1:false:"" 2:true:"\t\x00\x00\x00\x00\x00\x00\x00raw"]` {
		t.Fatalf("response %v %v", out, err)
	}
	if err := DecodeReadResponse(resp, 2, func(int, bool, []byte) error { return nil }); !errors.Is(err, ErrMalformed) {
		t.Fatal("response with trailing entries accepted")
	}
}

func TestPackUnpack(t *testing.T) {
	for _, c := range [][2]uint32{{0, 0}, {1, 2}, {0xffffffff, 0xffffffff}, {65536, 7}} {
		p, l := Unpack(Pack(c[0], c[1]))
		if p != c[0] || l != c[1] {
			t.Fatalf("%v -> %d %d", c, p, l)
		}
	}
}

// TestStdlibOnly: abi is shared with guests; it must stay stdlib-only.
func TestStdlibOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/foldhost/foldhost/abi" {
			t.Errorf("non-stdlib dependency %s", p)
		}
	}
}

func FuzzBatchReader(f *testing.F) {
	var e BatchEncoder
	e.Add(OpPut, 1, 2, "k", []byte("v"))
	f.Add(e.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewBatchReader(b)
		var re BatchEncoder
		re.Reset()
		for r.Next() {
			u := r.Update()
			re.Add(u.Op, u.Rev, u.Time, string(u.Key), u.Value)
		}
		if r.Err() == nil && !bytes.Equal(re.Bytes(), b) {
			t.Fatalf("accepted input does not re-encode to itself")
		}
	})
}

func FuzzDecodeOutput(f *testing.F) {
	var w OutputWriter
	w.Put([]byte("k"), []byte("v"))
	w.Delete([]byte("d"))
	f.Add(w.Bytes())
	f.Add(w.Error("x"))
	w.Emit([]byte("route.changed"), []Header{{[]byte("Route-Op"), []byte("put")}}, []byte("h\ne"))
	f.Add(w.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		var re OutputWriter
		re.Reset()
		rej, err := DecodeOutputEffects(b, -1, func(op byte, k, v []byte) error {
			if op == MutPut {
				re.Put(k, v)
			} else {
				re.Delete(k)
			}
			return nil
		}, func(e *Effect) error {
			if ValidSubject(e.Subject) != nil {
				t.Fatalf("invalid subject %q passed the decoder", e.Subject)
			}
			for _, h := range e.Headers {
				if ValidHeaderName(h.Name) != nil || ValidHeaderValue(h.Value) != nil {
					t.Fatalf("invalid header %q: %q passed the decoder", h.Name, h.Value)
				}
			}
			re.Emit(e.Subject, e.Headers, e.Payload)
			return nil
		})
		if err == nil {
			re.rejected = uint32(rej) // not a Reject loop: a fuzzed count can be 4e9
			if !bytes.Equal(re.Bytes(), b) {
				t.Fatalf("accepted output does not re-encode to itself")
			}
		}
	})
}

func FuzzDecodeInfo(f *testing.F) {
	f.Add(AppendInfo(nil, Info{Name: "n", Version: "v", ViewSchema: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeInfo(b)
		if err == nil && !bytes.Equal(AppendInfo(nil, in), b) {
			t.Fatal("accepted info does not re-encode to itself")
		}
	})
}

func FuzzReadRecords(f *testing.F) {
	f.Add(AppendReadRequest(nil, [][]byte{[]byte("a")}), 1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		var keys [][]byte
		if err := DecodeReadRequest(b, func(k []byte) error { keys = append(keys, k); return nil }); err == nil {
			if !bytes.Equal(AppendReadRequest(nil, keys), b) {
				t.Fatal("accepted request does not re-encode to itself")
			}
		}
		if n < 0 || n > 1<<16 {
			return
		}
		_ = DecodeReadResponse(b, n, func(int, bool, []byte) error { return nil })
	})
}

func TestDecodeInfoBoundsItsFields(t *testing.T) {
	long := strings.Repeat("n", MaxInfoField+1)
	for _, in := range []Info{{Name: long, Version: "1"}, {Name: "n", Version: long}} {
		if _, err := DecodeInfo(AppendInfo(nil, in)); err == nil {
			t.Errorf("accepted a %d-byte name and a %d-byte version", len(in.Name), len(in.Version))
		}
	}
	ok := Info{Name: strings.Repeat("n", MaxInfoField), Version: strings.Repeat("v", MaxInfoField)}
	if got, err := DecodeInfo(AppendInfo(nil, ok)); err != nil || got != ok {
		t.Errorf("fields at the bound: %v %v", got, err)
	}
}
