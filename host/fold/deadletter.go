package fold

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/protocol"
)

// A DeadLetter records an update the plugin failed on alone and the fold
// skipped (LoopConfig.Poison): its raw entry was committed (the raw fold is
// the bucket's truth), its view effect was not, and the cursor covers it.
// Dead letters live in their own keyspace, keyed by revision, committed in
// the batch that skipped them.
//
// A dead letter may also record a poison effect (Effect set, Op
// OpEffect, no key): a committed effect its stream refused for good,
// moved out of the outbox (Store.DeadLetterEffect) so the effects after
// it are published. Rev is then the revision the effect was filed under.
type DeadLetter struct {
	Key    string      `json:"key"`      // in JSON: key and key_b64 (MarshalJSON)
	Rev    uint64      `json:"revision"` // the update's (a number in JSON, not protocol.Revision's text)
	Op     string      `json:"op"`
	Error  string      `json:"error"`
	Plugin string      `json:"plugin"` // sha256 of the module that failed
	At     time.Time   `json:"at"`
	Effect *DeadEffect `json:"effect,omitempty"`
}

// MaxDeadLetterError bounds the error text a dead letter keeps.
const MaxDeadLetterError = 4 << 10

// DeadLetterText is err's text as a dead letter keeps it: cut at
// MaxDeadLetterError bytes.
func DeadLetterText(err error) string {
	msg := err.Error()
	if len(msg) > MaxDeadLetterError {
		msg = msg[:MaxDeadLetterError] + "…"
	}
	return msg
}

// OpEffect is the Op of a poison effect's dead letter.
const OpEffect = "effect"

// DeadEffect describes a poison effect: its id, subject and size (subject,
// headers and payload together, as the plugin emitted it). Its payload is
// not kept: the stream refused it, and a dead letter list must stay small.
type DeadEffect struct {
	ID      string `json:"id"`
	Index   uint32 `json:"index"`
	Subject string `json:"subject"`
	Size    int    `json:"size"`
}

// deadLetterJSON is a DeadLetter's JSON, in the store and in answers: the
// key follows the byte-string rule of the HTTP API (key: the text, absent
// when the key is not valid UTF-8; key_b64: always, the exact bytes), so a
// key of any bytes survives (encoding/json would turn its invalid bytes
// into U+FFFD, and a replay would then read another key).
type deadLetterJSON struct {
	Key    *string     `json:"key,omitempty"`
	KeyB64 string      `json:"key_b64,omitempty"`
	Rev    uint64      `json:"revision"`
	Op     string      `json:"op"`
	Error  string      `json:"error"`
	Plugin string      `json:"plugin"`
	At     time.Time   `json:"at"`
	Effect *DeadEffect `json:"effect,omitempty"`
}

// MarshalJSON writes key and key_b64 (deadLetterJSON); an effect's dead
// letter has neither.
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	j := deadLetterJSON{Rev: d.Rev, Op: d.Op, Error: d.Error, Plugin: d.Plugin, At: d.At, Effect: d.Effect}
	if d.Effect == nil {
		j.KeyB64 = base64.StdEncoding.EncodeToString([]byte(d.Key))
		if utf8.ValidString(d.Key) {
			j.Key = &d.Key
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads key_b64 when present, else key (dead letters stored
// before key_b64 existed).
func (d *DeadLetter) UnmarshalJSON(b []byte) error {
	var j deadLetterJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*d = DeadLetter{Rev: j.Rev, Op: j.Op, Error: j.Error, Plugin: j.Plugin, At: j.At, Effect: j.Effect}
	switch {
	case j.KeyB64 != "":
		k, err := base64.StdEncoding.DecodeString(j.KeyB64)
		if err != nil {
			return fmt.Errorf("dead letter key_b64: %w", err)
		}
		d.Key = string(k)
	case j.Key != nil:
		d.Key = *j.Key
	}
	return nil
}

// deadKey is the pebble key of the dead letter of revision rev.
func deadKey(rev protocol.Revision) []byte {
	return binary.BigEndian.AppendUint64([]byte{spaceDead}, uint64(rev))
}

// deadEffectKey is the pebble key of the dead letter of the effect filed
// under rev at index: after the update's dead letter of rev (a longer key
// with the same prefix), so the list stays in revision order and a
// replay's ClearDeadLetters never reaches it.
func deadEffectKey(rev protocol.Revision, index uint32) []byte {
	return binary.BigEndian.AppendUint32(deadKey(rev), index)
}

// DeadLetterEffect moves a poison effect from the outbox to the dead
// letters, in one pebble batch (so a crash leaves it in one place or the
// other), with d (its Effect set) as the record.
func (s *Store) DeadLetterEffect(e OutboxEntry, d DeadLetter) error {
	if d.Effect == nil {
		return fmt.Errorf("fold: dead letter of effect %d/%d without its description", e.Rev, e.Index)
	}
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	v, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("fold: dead letter of effect %s: %w", d.Effect.ID, err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	removed, err := s.removeOutbox(b, []OutboxEntry{e})
	if err != nil {
		return fmt.Errorf("fold: outbox delete: %w", err)
	}
	if err := b.Set(deadEffectKey(e.Rev, e.Index), v, nil); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if err := s.apply(b, s.write); err != nil {
		return fmt.Errorf("fold: dead letter of effect %s: %w", d.Effect.ID, err)
	}
	if s.outboxLen.Add(-int64(removed)) < 0 {
		s.outboxLen.Store(0)
	}
	return nil
}

// putDeadLetters adds dead letters to b.
func putDeadLetters(b *pebble.Batch, dls []DeadLetter) error {
	for _, d := range dls {
		v, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("dead letter %q: %w", d.Key, err)
		}
		if err := b.Set(deadKey(protocol.Revision(d.Rev)), v, nil); err != nil {
			return fmt.Errorf("batch: %w", err)
		}
	}
	return nil
}

// DeadLetters calls fn with every dead letter, oldest revision first.
func (s *Store) DeadLetters(fn func(DeadLetter) error) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	return scan(s.db, spaceDead, "", true, func(_, v []byte) error {
		var d DeadLetter
		if err := json.Unmarshal(v, &d); err != nil {
			return fmt.Errorf("%w: dead letter: %w", ErrCorrupt, err)
		}
		return fn(d)
	})
}

// PruneDeadLetters deletes the dead letters older than maxAge (0: no age
// bound) and then the oldest beyond max (0: no count bound), and returns
// how many are left. It streams them (a count, then one pass reading only
// their revision and time): however many there are, it holds none.
func (s *Store) PruneDeadLetters(max int, maxAge time.Duration) (left int, err error) {
	if !s.gate.enter() {
		return 0, ErrClosed
	}
	defer s.gate.exit()
	total := 0
	if err := scan(s.db, spaceDead, "", false, func(_, _ []byte) error { total++; return nil }); err != nil {
		return 0, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	i, drop := 0, 0
	err = scan(s.db, spaceDead, "", maxAge > 0, func(k, v []byte) error {
		i++
		old := false
		if maxAge > 0 {
			var d struct {
				At time.Time `json:"at"`
			}
			if err := json.Unmarshal(v, &d); err != nil {
				return fmt.Errorf("%w: dead letter: %w", ErrCorrupt, err)
			}
			old = time.Since(d.At) > maxAge
		}
		if old || (max > 0 && total-(i-1) > max) {
			drop++
			return b.Delete(appendKey(nil, spaceDead, k), nil)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if drop > 0 {
		if err := s.apply(b, s.write); err != nil {
			return 0, fmt.Errorf("fold: prune dead letters: %w", err)
		}
	}
	return total - drop, nil
}
