package effects

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamSubjects are the subjects a fold's effects stream must capture:
// its effects subjects (Options.Subjects), its fence and, in a fleet, its
// claim subject. A stream created for the fold captures these.
func StreamSubjects(o Options) []string {
	need := append(slices.Clone(o.Subjects), o.Fence)
	if o.Fleet {
		need = append(need, claimSubject(o.Fence))
	}
	return need
}

// missingStream is the refusal of an effects stream that does not exist,
// with the nats CLI command that creates it fit for the effects.
func missingStream(o Options) error {
	return fmt.Errorf("effects_stream %q does not exist: create it (the embedded server's only while foldhost runs), "+
		"or let foldhost create it at the start: [fold.create_effects_stream] (docs/effects.md). With the nats CLI:\n  %s\n"+
		"(or unset effects_stream: the effects are then dropped)", o.Stream, streamAdd(o.Stream, StreamSubjects(o)))
}

// unfitStream lists everything the stream (config cfg) lacks for the
// fold's effects, at once, with the nats CLI command that meets all of
// it (a new stream's when its retention is wrong, which no edit changes);
// nil when it lacks nothing. filters are the effects subjects checked.
func unfitStream(o Options, cfg jetstream.StreamConfig, filters []string) error {
	var unmet, missing []string
	if !cfg.AllowAtomicPublish {
		unmet = append(unmet, "it does not allow atomic batch publishing (allow_atomic, NATS server 2.12+): effects are published in batches fenced against repeats")
	}
	need := append(slices.Clone(filters), o.Fence)
	if o.Fleet {
		need = append(need, claimSubject(o.Fence))
	}
	for _, sub := range need {
		if !captured(sub, cfg.Subjects) && !slices.Contains(missing, sub) {
			missing = append(missing, sub)
		}
	}
	if len(missing) > 0 {
		what := "the effects subjects (effects_subjects) and the fold's fence (effects_fence)"
		if o.Fleet {
			what = "the effects subjects (effects_subjects), the fold's fence (effects_fence) and, in a fleet, its claim subject (the fence's + \".claim\", where owners mark their claims)"
		}
		unmet = append(unmet, fmt.Sprintf("it does not capture %s (it captures %s): %s must be captured", quoted(missing), quoted(cfg.Subjects), what))
	}
	fix := streamEdit(o.Stream, append(slices.Clone(cfg.Subjects), missing...), !cfg.AllowAtomicPublish, len(missing) > 0)
	if cfg.Retention != jetstream.LimitsPolicy {
		unmet = append(unmet, fmt.Sprintf("it has %s retention: it would remove the fence (the record of what was published) once consumed, "+
			"so effects could be published twice; a stream's retention cannot change: make another one, and name it in effects_stream", cfg.Retention))
		fix = streamAdd(o.Stream+"_EFFECTS", StreamSubjects(o))
	}
	if len(unmet) == 0 {
		return nil
	}
	return fmt.Errorf("effects_stream %q cannot take the fold's effects:\n  - %s\nWith the nats CLI:\n  %s",
		o.Stream, strings.Join(unmet, "\n  - "), fix)
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
