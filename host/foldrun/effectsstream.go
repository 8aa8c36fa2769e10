package foldrun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EffectsStreamConfig is how a fold creates its effects stream when it
// does not exist (Options.CreateEffectsStream): what the stream holds
// beyond what the effects need, which the creation always sets.
type EffectsStreamConfig struct {
	Replicas int           // 1 .. 5; 0: 1
	Memory   bool          // memory storage instead of file
	MaxAge   time.Duration // 0: no age limit
	MaxBytes int64         // 0: unlimited
}

// effectsStream readies the fold's effects stream before its publisher
// checks it (effects.OpenTarget): created from CreateEffectsStream when it
// does not exist; otherwise checked for everything the effects need at
// once, so that a refusal lists every unmet requirement with the nats CLI
// command that meets them (the publisher's own check stops at the first).
// With the embedded server, whose streams exist only while foldhost runs,
// the creation is the way in.
func (f *Fold) effectsStream(ctx context.Context, nc *nats.Conn) error {
	o := f.o
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, f.env.RequestTimeout)
	defer cancel()
	need := slices.Clone(o.EffectsSubjects)
	need = append(need, o.EffectsFence)
	if f.env.Fleet {
		need = append(need, o.EffectsFence+".claim") // the owners' claim marks (package effects)
	}
	s, err := js.Stream(rctx, o.EffectsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		c := o.CreateEffectsStream
		if c == nil {
			return fmt.Errorf("effects_stream %q does not exist: create it (the embedded server's only while foldhost runs), "+
				"or let foldhost create it at the start: [fold.create_effects_stream] (docs/effects.md). With the nats CLI:\n  %s\n"+
				"(or unset effects_stream: the effects are then dropped)", o.EffectsStream, streamAdd(o.EffectsStream, need))
		}
		cfg := jetstream.StreamConfig{Name: o.EffectsStream, Subjects: need, AllowAtomicPublish: true, Retention: jetstream.LimitsPolicy,
			Replicas: c.Replicas, MaxAge: c.MaxAge, MaxBytes: c.MaxBytes}
		if c.MaxBytes == 0 {
			cfg.MaxBytes = -1
		}
		if c.Memory {
			cfg.Storage = jetstream.MemoryStorage
		}
		if _, err := js.CreateStream(rctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("effects_stream %q did not exist, and creating it failed: %w", o.EffectsStream, err)
		} else if err == nil {
			f.log.Warn("the effects stream did not exist: created it (a misspelled effects_stream? unset create_effects_stream to refuse a missing stream)",
				"stream", o.EffectsStream, "subjects", need, "replicas", c.Replicas, "memory", c.Memory,
				"max_age", c.MaxAge.String(), "max_bytes", c.MaxBytes)
		}
		return nil // lost a creation race: the winner's, checked by the publisher
	}
	if err != nil {
		return nil // the publisher's check says what failed
	}
	cfg := s.CachedInfo().Config
	if len(cfg.Subjects) == 0 {
		return nil // a mirror or a source-only stream: no edit helps, the publisher's check says so
	}
	var unmet, missing []string
	if !cfg.AllowAtomicPublish {
		unmet = append(unmet, "it does not allow atomic batch publishing (allow_atomic, NATS server 2.12+): effects are published in batches fenced against repeats")
	}
	for _, sub := range need {
		if !slices.ContainsFunc(cfg.Subjects, func(p string) bool { return server.SubjectMatchesFilter(sub, p) }) {
			missing = append(missing, sub)
		}
	}
	if len(missing) > 0 {
		unmet = append(unmet, fmt.Sprintf("it does not capture %s (it captures %s): the effects subjects (effects_subjects), the fold's fence (effects_fence)%s",
			quoted(missing), quoted(cfg.Subjects), map[bool]string{true: " and, in a fleet, its claim subject"}[f.env.Fleet]))
	}
	fix := streamEdit(o.EffectsStream, append(slices.Clone(cfg.Subjects), missing...), !cfg.AllowAtomicPublish, len(missing) > 0)
	if cfg.Retention != jetstream.LimitsPolicy {
		unmet = append(unmet, fmt.Sprintf("it has %s retention: it would remove the fence (the record of what was published) once consumed, "+
			"so effects could be published twice; a stream's retention cannot change: make another one, and name it in effects_stream", cfg.Retention))
		fix = streamAdd(o.EffectsStream+"_EFFECTS", need)
	}
	if len(unmet) == 0 {
		return nil
	}
	return fmt.Errorf("effects_stream %q cannot take the fold's effects:\n  - %s\nWith the nats CLI:\n  %s",
		o.EffectsStream, strings.Join(unmet, "\n  - "), fix)
}

// streamAdd is the nats CLI command that makes a stream fit for effects.
func streamAdd(name string, subjects []string) string {
	return "nats stream add " + name + subjectFlags(subjects) + " --retention limits --allow-batch --defaults"
}

// streamEdit is the nats CLI command that gives a stream what effects
// need of it: subjects (the whole list), atomic batches.
func streamEdit(name string, subjects []string, batch, subs bool) string {
	cmd := "nats stream edit " + name
	if subs {
		cmd += subjectFlags(subjects)
	}
	if batch {
		cmd += " --allow-batch"
	}
	return cmd + " --force"
}

func subjectFlags(subjects []string) string {
	var b strings.Builder
	for _, s := range subjects {
		b.WriteString(" --subjects " + shellWord(s))
	}
	return b.String()
}

// shellWord is s as one word of a POSIX shell: quoted when it holds more
// than subject characters ('>' and '*' would be read by the shell).
func shellWord(s string) string {
	if strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, " ") + "]"
}
