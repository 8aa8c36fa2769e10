package repair_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/protocol"
)

// TestCheckArtifact: an artifact is refused, before any download, when it
// is of another bucket, its scope does not cover the fold's (narrower,
// disjoint, covering only part of it, or any scope for a whole-bucket
// fold), it does not record its stream or records another incarnation, it
// is not ahead of the fold, or it cannot be resumed from; an artifact of
// the fold's scope or a wider one passes. Each case fails when its check
// is removed; the narrower and wider cases fail when covers() tests the
// prefixes the wrong way round (the source-mutation check applies both).
func TestCheckArtifact(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &repair.Runner{Bucket: "rt", Scope: []string{"route.eu."}, Stream: created}
	local := protocol.Cursor{Rev: 10}
	ret := protocol.Retention{Window: protocol.Window{First: 30, Last: 50}}
	at := func(rev protocol.Revision) string {
		c, _ := protocol.Cursor{Rev: rev}.MarshalBinary()
		return hex.EncodeToString(c)
	}
	good := func() artifact.Manifest {
		return artifact.Manifest{Bucket: "rt", Scope: nil, StreamCreated: created, Cursor: at(40)}
	}
	if err := r.CheckArtifact(good(), local, ret); err != nil {
		t.Fatalf("a good artifact (whole bucket, ahead, resumable) refused: %v", err)
	}
	for _, c := range []struct {
		name, want string
		edit       func(*artifact.Manifest)
	}{
		{"another bucket", "bucket", func(m *artifact.Manifest) { m.Bucket = "other" }},
		{"a narrower scope", `its scope ["route.eu.par."] does not cover the fold's ["route.eu."]`, func(m *artifact.Manifest) { m.Scope = []string{"route.eu.par."} }},
		{"a disjoint scope", `its scope ["route.us."] does not cover`, func(m *artifact.Manifest) { m.Scope = []string{"route.us."} }},
		{"no stream recorded", "does not record its stream", func(m *artifact.Manifest) { m.StreamCreated = time.Time{} }},
		{"a previous incarnation", "another incarnation", func(m *artifact.Manifest) { m.StreamCreated = created.Add(-time.Hour) }},
		{"not ahead", "not ahead", func(m *artifact.Manifest) { m.Cursor = at(10) }},
		{"not resumable", "not sound", func(m *artifact.Manifest) { m.Cursor = at(20) }},
		{"beyond the head", "not sound", func(m *artifact.Manifest) { m.Cursor = at(60) }},
	} {
		m := good()
		c.edit(&m)
		if err := r.CheckArtifact(m, local, ret); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal saying %q", c.name, err, c.want)
		}
	}
	for _, scope := range [][]string{{"route.eu."}, {"route."}, {"route.us.", "route.eu."}} {
		m := good()
		m.Scope = scope
		if err := r.CheckArtifact(m, local, ret); err != nil {
			t.Errorf("an artifact of scope %q (covering the fold's) refused: %v", scope, err)
		}
	}
	// A fold of two prefixes needs both; a whole-bucket fold needs a
	// whole-bucket artifact.
	for _, c := range []struct{ fold, art []string }{
		{[]string{"a.", "b."}, []string{"a."}},
		{nil, []string{"a."}},
	} {
		r := &repair.Runner{Bucket: "rt", Scope: c.fold, Stream: created}
		m := good()
		m.Scope = c.art
		if err := r.CheckArtifact(m, local, ret); err == nil || !strings.Contains(err.Error(), "does not cover") {
			t.Errorf("fold scope %q, artifact scope %q: %v, want a refusal", c.fold, c.art, err)
		}
	}
}
