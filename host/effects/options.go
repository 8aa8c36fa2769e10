package effects

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Options are a fold's effects settings (its config's effects_* keys).
type Options struct {
	// Stream is the JetStream stream effects are published to; "" drops
	// them (one WARN at the first).
	Stream string
	// Subjects are the filters an effect's subject must match, each
	// captured by Stream (checked at the start); default: the stream's
	// subjects.
	Subjects []string
	// Fence is the subject of the fold's fence in Stream; default
	// FenceNamespace + the fold's name.
	Fence string
	// MaxWait: once the outbox's first effect has waited longer than this
	// to be published, the fold is not ready. Negative: never.
	MaxWait time.Duration
	// Fleet: the fold's unit is placed by a fleet, whose owners mark
	// their claims on the fence's subject + ".claim" (Stream must capture
	// it).
	Fleet bool
}

// FenceNamespace holds every fold's default fence subject (FenceNamespace
// + the fold's name). No plugin may emit under it: an effect there would
// move another fold's fence (on a stream both share) and make that fold's
// publisher take its next batch as already landed.
const FenceNamespace = "foldhost.fence."

// Validate checks o for the fold named fold and sets its default fence.
func (o *Options) Validate(fold string) error {
	if o.Stream == "" {
		if len(o.Subjects) > 0 {
			return fmt.Errorf("EffectsSubjects without an EffectsStream")
		}
		return nil
	}
	if strings.ContainsAny(o.Stream, " \t\r\n.*>/\\") {
		return fmt.Errorf("EffectsStream %q is not a stream name", o.Stream)
	}
	if o.Fence == "" {
		o.Fence = FenceNamespace + fold
	}
	if err := validFilter(o.Fence); err != nil || strings.ContainsAny(o.Fence, "*>") {
		return fmt.Errorf("EffectsFence %q is not a subject (name the fold's fence subject: the default, foldhost.fence.<fold>, needs a fold name that is one subject token)", o.Fence)
	}
	for _, s := range o.Subjects {
		if err := validFilter(s); err != nil {
			return fmt.Errorf("EffectsSubjects: %w", err)
		}
	}
	return nil
}

// validFilter checks a subject filter effects may match: tokens, '*' and a
// last '>' as NATS has them, nothing under '$' (the server's and the
// KV buckets' own subjects: an effect must not write a bucket).
func validFilter(f string) error {
	if strings.HasPrefix(f, "$") {
		return fmt.Errorf("%q: the $ subjects are the server's (and the KV buckets')", f)
	}
	toks := strings.Split(f, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return fmt.Errorf("%q has an empty token", f)
		case t == ">" && i != len(toks)-1:
			return fmt.Errorf("%q: '>' is only the last token", f)
		case strings.ContainsAny(t, " \t\r\n") || (len(t) > 1 && strings.ContainsAny(t, "*>")):
			return fmt.Errorf("%q is not a subject filter", f)
		}
	}
	return nil
}

// subjectSubset reports whether every subject that filter matches also
// matches pattern (a literal subject is a filter of one subject).
func subjectSubset(filter, pattern string) bool {
	f, p := strings.Split(filter, "."), strings.Split(pattern, ".")
	for i, pt := range p {
		if pt == ">" {
			return len(f) > i // '>' matches one token or more
		}
		if i >= len(f) {
			return false
		}
		switch ft := f[i]; {
		case ft == ">":
			return false // the filter reaches deeper than pattern's fixed length
		case pt == "*":
		case ft == "*" || ft != pt:
			return false
		}
	}
	return len(f) == len(p)
}

// captured reports whether some pattern captures every subject of filter.
func captured(filter string, patterns []string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return subjectSubset(filter, p) })
}

// SubjectError is an effect to a subject outside the fold's effects
// subjects: a plugin failure (the batch is not committed), since the
// outbox would hold an effect no stream takes.
type SubjectError struct {
	Subject string
	Filters []string
	Fence   bool // the subject is the fold's fence
}

func (e *SubjectError) Error() string {
	if e.Fence {
		return fmt.Sprintf("an effect to subject %q, a fold's effects fence (the host's record of what was published: the fold's own, or under %s, where every fold's default fence is)", e.Subject, FenceNamespace)
	}
	return fmt.Sprintf("an effect to subject %q, outside the fold's effects subjects %q (effects_subjects, or effects_stream's subjects)", e.Subject, e.Filters)
}
