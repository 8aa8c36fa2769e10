package fold

import (
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// outboxKeys counts the pebble keys of the outbox space.
func outboxKeys(t testing.TB, s *Store) int {
	t.Helper()
	n := 0
	if err := scan(s.db, spaceOutbox, "", false, func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOutboxGroupsACommitsEffects: a commit files its effects as one
// outbox key (a group); deleting some of them (the first ones, one in the
// middle as a dead letter does, a repeat of a delete) keeps the others, in
// order, with their own ids, counted exactly, across a reopen; the last
// one deleted removes the key. Mutations caught: one key per effect (the
// key count), a partial delete that drops the whole group or keeps the
// deleted effects, the reopen's count of keys rather than effects, a
// repeated delete counted again.
func TestOutboxGroupsACommitsEffects(t *testing.T) {
	s, dir := openTemp(t, Options{})
	var effs []Effect
	for _, p := range []string{"a", "b", "c", "d", "e"} {
		effs = append(effs, effect("x."+p, p, "H", p))
	}
	mustCommit(t, s, Commit{Raw: []Update{put("k", 7, "1")}, Cursor: cursorAt(7), Effects: effs, EffectRev: 7})
	mustCommit(t, s, Commit{Raw: []Update{put("k", 9, "2")}, Cursor: cursorAt(9), Effects: []Effect{effect("y", "z")}, EffectRev: 9})
	if n := outboxKeys(t, s); n != 2 {
		t.Fatalf("two commits' effects in %d outbox keys, want 2 (one group each)", n)
	}
	var all []OutboxEntry
	if err := s.Outbox(0, func(e OutboxEntry) error { all = append(all, e); return nil }); err != nil || len(all) != 6 {
		t.Fatalf("outbox: %d entries, %v", len(all), err)
	}
	// The first two, and a middle one as a dead letter.
	if err := s.DeleteOutbox(all[0], all[1]); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetterEffect(all[3], DeadLetter{Rev: 7, Op: OpEffect, Effect: &DeadEffect{ID: all[3].ID("f"), Index: 3, Subject: all[3].Subject}}); err != nil {
		t.Fatal(err)
	}
	// A repeat (an ack after the fence confirmed them): nothing changes.
	if err := s.DeleteOutbox(all[0], all[3]); err != nil {
		t.Fatal(err)
	}
	want := []string{`f/7/2 x.c [{H c}] "c"`, `f/7/4 x.e [{H e}] "e"`, `f/9/0 y [] "z"`}
	check := func(when string) {
		t.Helper()
		if got := outboxOf(t, s); !reflect.DeepEqual(got, want) || s.OutboxLen() != int64(len(want)) {
			t.Fatalf("%s: outbox %q (len %d), want %q", when, got, s.OutboxLen(), want)
		}
		last, ok, err := s.LastOutbox()
		if err != nil || !ok || last.ID("f") != "f/9/0" {
			t.Fatalf("%s: last entry %v %v %v, want f/9/0", when, last, ok, err)
		}
	}
	check("after the deletes")
	s = reopen(t, s, dir)
	check("after a reopen")
	if err := s.DeleteOutbox(all[2], all[4]); err != nil {
		t.Fatal(err)
	}
	if n := outboxKeys(t, s); n != 1 || s.OutboxLen() != 1 {
		t.Fatalf("the first group emptied: %d outbox keys, len %d; want 1 and 1", n, s.OutboxLen())
	}
}

// TestOutboxReadsOneEffectEntries: a store written before groups holds
// one effect per key (version 1): it is read, counted at open, listed and
// deleted as before, beside groups. Mutation caught: a decoder that takes
// every value for a group.
func TestOutboxReadsOneEffectEntries(t *testing.T) {
	s, dir := openTemp(t, Options{})
	v1 := func(e Effect) []byte { return appendEffect([]byte{outboxVersion1}, &e) }
	if err := s.db.Set(outboxKey(3, 0), v1(effect("old.a", "1", "H", "v")), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(outboxKey(3, 1), v1(effect("old.b", "2")), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, dir)
	mustCommit(t, s, Commit{Raw: []Update{put("k", 4, "1")}, Cursor: cursorAt(4), Effects: []Effect{effect("new", "3")}, EffectRev: 4})
	want := []string{`f/3/0 old.a [{H v}] "1"`, `f/3/1 old.b [] "2"`, `f/4/0 new [] "3"`}
	if got := outboxOf(t, s); !reflect.DeepEqual(got, want) || s.OutboxLen() != 3 {
		t.Fatalf("outbox %q (len %d), want %q", got, s.OutboxLen(), want)
	}
	var first []OutboxEntry
	if err := s.Outbox(2, func(e OutboxEntry) error { first = append(first, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOutbox(first...); err != nil {
		t.Fatal(err)
	}
	if got := outboxOf(t, s); !reflect.DeepEqual(got, want[2:]) || s.OutboxLen() != 1 || outboxKeys(t, s) != 1 {
		t.Fatalf("after deleting the old entries: %q (len %d), want %q", got, s.OutboxLen(), want[2:])
	}
}
