package foldrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/effects"
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

// effectsStream creates the fold's effects stream when it does not exist
// and Options.CreateEffectsStream asks for it, fit for the effects
// (effects.StreamSubjects captured, atomic batches, limits retention).
// Whether an existing stream can take the effects is the publisher's
// check (effects.OpenTarget), which lists all it lacks. With the embedded
// server, whose streams exist only while foldhost runs, the creation is
// the way in.
func (f *Fold) effectsStream(ctx context.Context, nc *nats.Conn) error {
	o := f.o
	c := o.CreateEffectsStream
	if c == nil {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, f.env.RequestTimeout)
	defer cancel()
	if _, err := js.Stream(rctx, o.EffectsStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // there (checked by the publisher), or unreadable (the publisher says why)
	}
	eo := o.effects()
	eo.Fleet = f.env.Fleet
	need := effects.StreamSubjects(eo)
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
	return nil // or lost a creation race: the winner's, checked by the publisher
}
