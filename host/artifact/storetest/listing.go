package storetest

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
)

// contractDescribe: the store reads the manifest inside each payload
// ([artifact.ManifestReader]), so List describes every payload (cursor,
// bucket, scope, plugin identity), not only the published one, and names a
// payload without a manifest of its name; WriteListing prints them as
// `foldhost artifacts list` does; Show finds the pointer's artifact, any
// other by a unique ID prefix, refuses an ambiguous or unknown ID, and
// WriteShown prints the whole manifest.
func contractDescribe(t *testing.T, h Harness) {
	ctx := t.Context()
	if _, ok := h.Store.(artifact.ManifestReader); !ok {
		t.Fatalf("%T does not read payload manifests", h.Store)
	}
	st := OpenStore(t)
	a := ExportAt(t, st, 10, nil)
	b := ExportAt(t, st, 5, []string{"route."})
	for _, u := range []struct {
		key string
		a   Artifact
	}{{"f", a}, {"f", b}, {"g", a}} {
		if _, err := artifact.Upload(ctx, h.Store, u.key, u.a.Dir); err != nil {
			t.Fatal(err)
		}
	}
	const junk = "0123456789abcdef"
	h.PutPayload(t, "f", junk+".tar", []byte("not a tar"))
	ls, err := artifact.List(ctx, h.Store)
	if err != nil || len(ls) != 2 || len(ls[0].Payloads) != 3 {
		t.Fatalf("listing: %+v, %v", ls, err)
	}
	byID := map[string]artifact.ListedPayload{}
	for _, p := range ls[0].Payloads {
		byID[artifact.ID(p.Name)] = p
	}
	for _, w := range []struct {
		a         Artifact
		scope     []string
		published bool
	}{{a, []string{}, false}, {b, []string{"route."}, true}} {
		p := byID[w.a.Addr]
		m := p.Manifest
		if m == nil || p.Published != w.published || m.Cursor != uint64(w.a.Cursor.Rev) || m.Bucket != Origin.Bucket ||
			!slices.Equal(m.Scope, w.scope) || m.Plugin == nil || m.Plugin.SHA256 != "abc" || m.Plugin.ViewSchema != uint32(w.a.Cursor.Rev) ||
			m.Files == 0 || m.DataBytes == 0 || !m.StreamCreated.Equal(Origin.StreamCreated) {
			t.Errorf("payload %s: %+v (manifest %+v); want cursor %d, scope %q, published %t", w.a.Addr, p, m, w.a.Cursor.Rev, w.scope, w.published)
		}
	}
	if p := byID[junk]; p.Manifest != nil || p.ManifestError == "" {
		t.Errorf("a payload with no manifest: %+v", p)
	}

	var out strings.Builder
	if err := artifact.WriteListing(&out, "the store", ls, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^KEY +ID +CURSOR +BUCKET +SCOPE +PLUGIN +SIZE +AGE +STATE$`,
		`(?m)^f +` + a.Addr + ` +10 +routes +\* +-@-/abc +[0-9.]+ KiB +\d+s +-$`,
		`(?m)^f +` + b.Addr + ` +15 +routes +route\. +-@-/abc +[0-9.]+ KiB +\d+s +published$`,
		`(?m)^f +` + junk + ` +\? .* unreadable: `,
		`(?m)^g +` + a.Addr + ` +10 +routes +\* .* published$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("listing lacks %s:\n%s", re, out.String())
		}
	}

	if _, err := artifact.Show(ctx, h.Store, nil, ""); err == nil || !strings.Contains(err.Error(), "2 keys") {
		t.Errorf("Show of no ID in a store of two keys: %v", err)
	}
	sh, err := artifact.Show(ctx, h.Store, []string{"f"}, "")
	if err != nil || sh.ID != b.Addr || !sh.Published || sh.Cursor.Rev != uint64(b.Cursor.Rev) || !sh.Cursor.EvictionSeen || sh.Size == 0 {
		t.Errorf("Show of f's pointer: %+v, %v", sh, err)
	}
	if _, err := artifact.Show(ctx, h.Store, nil, a.Addr[:6]); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("Show of an ID under two keys: %v", err)
	}
	sh, err = artifact.Show(ctx, h.Store, []string{"f"}, a.Addr[:6])
	if err != nil || sh.ID != a.Addr || sh.Published || sh.Manifest.Bucket != Origin.Bucket || len(sh.Manifest.Files) == 0 {
		t.Fatalf("Show of f's older artifact: %+v, %v", sh, err)
	}
	if _, err := artifact.Show(ctx, h.Store, nil, "zz"); !errors.Is(err, artifact.ErrNoArtifact) {
		t.Errorf("Show of an unknown ID: %v", err)
	}
	out.Reset()
	if err := artifact.WriteShown(&out, "test", sh, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"not published", "cursor: ", "plugin: ", "view schema 10", a.Addr + ".tar"}, sh.Manifest.Files[0].Path, sh.Manifest.Files[0].BLAKE3) {
		if !strings.Contains(out.String(), want) {
			t.Errorf("shown artifact lacks %q:\n%s", want, out.String())
		}
	}
}

// contractList: Keys lists the keys with a pointer, corrupt ones included;
// Payloads lists a key's payloads as they are stored, with their sizes, and
// not what an upload left; List says which payload is published and what
// its manifest holds, and that a corrupt pointer is corrupt.
func contractList(t *testing.T, h Harness) {
	ctx := t.Context()
	if keys, err := h.Keys(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("an empty store's keys: %q, %v", keys, err)
	}
	if ls, err := artifact.List(ctx, h); err != nil || len(ls) != 0 {
		t.Fatalf("an empty store's listing: %+v, %v", ls, err)
	}
	st := OpenStore(t)
	a := ExportAt(t, st, 10, []string{"route."})
	b := ExportAt(t, st, 10, []string{"route."})
	for _, u := range []struct {
		key string
		a   Artifact
	}{{"f", a}, {"f", b}, {"g", a}} {
		if _, err := artifact.Upload(ctx, h, u.key, u.a.Dir); err != nil {
			t.Fatal(err)
		}
	}
	h.AbandonUpload(t, "f")
	h.PutPointer(t, "h", []byte("{not a manifest"))
	keys, err := h.Keys(ctx)
	if err != nil || !slices.Equal(keys, []string{"f", "g", "h"}) {
		t.Fatalf("keys %q, %v; want f g h", keys, err)
	}
	pays, err := h.Payloads(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pays {
		names = append(names, p.Name)
		if p.Size <= 0 || p.Modified.IsZero() || time.Since(p.Modified) > time.Hour {
			t.Errorf("payload %+v: want its size and a recent last write", p)
		}
	}
	var want []string // the stored names, without the abandoned upload's
	for _, n := range h.PayloadNames(t, "f") {
		if n == a.Addr+".tar" || n == b.Addr+".tar" {
			want = append(want, n)
		}
	}
	if !slices.Equal(names, want) || len(names) != 2 {
		t.Fatalf("payloads of f %q, stored %q (want the two uploads, not the abandoned one)", names, want)
	}
	ls, err := artifact.List(ctx, h)
	if err != nil || len(ls) != 3 {
		t.Fatalf("listing: %+v, %v", ls, err)
	}
	f, g, hh := ls[0], ls[1], ls[2]
	if p := f.Published; p == nil || p.Cursor != uint64(b.Cursor.Rev) || p.Payload != b.Addr+".tar" || p.Size == 0 || p.Missing ||
		!slices.Equal(p.Scope, []string{"route."}) || p.Files == 0 || p.DataBytes == 0 {
		t.Errorf("f's published artifact: %+v, want cursor %d in %s.tar", p, b.Cursor.Rev, b.Addr)
	}
	published := 0
	for _, p := range f.Payloads {
		if p.Published {
			published++
			if p.Name != b.Addr+".tar" {
				t.Errorf("payload %s marked published", p.Name)
			}
		}
	}
	if published != 1 || len(f.Payloads) != 2 {
		t.Errorf("f's payloads: %+v", f.Payloads)
	}
	if g.Key != "g" || g.Published == nil || g.Published.Cursor != uint64(a.Cursor.Rev) || len(g.Payloads) != 1 {
		t.Errorf("g: %+v", g)
	}
	if hh.Key != "h" || hh.Published != nil || hh.PointerError == "" || len(hh.Payloads) != 0 {
		t.Errorf("a corrupt pointer's listing: %+v", hh)
	}
	if ls, err := artifact.List(ctx, h, "nope"); err != nil || len(ls) != 1 || ls[0].Published != nil || len(ls[0].Payloads) != 0 {
		t.Errorf("an unknown key's listing: %+v, %v", ls, err)
	}
	if _, err := h.Payloads(ctx, "../f"); err == nil {
		t.Error("Payloads of a bad key")
	}
}
