package effects

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// Target is where a fold's effects go: its stream, its fence, and the
// subject filters an effect must match (Options.Subjects, or the
// stream's subjects). OpenTarget checks them against the stream.
type Target struct {
	nc      *nats.Conn
	handle  jetstream.Stream
	stream  string
	fence   string // the fold's fence subject (Options.Fence)
	claim   string // its claim subject (a fleet's owners' marks), "" without a fleet
	filters []string
	timeout time.Duration // each publish
}

// OpenTarget checks, at the start, that the fold's effects stream
// exists and can take the fold's effects (unfitStream: atomic batches,
// limits retention, the effects subjects, the fence and in a fleet the
// claim subject captured), and returns the target. A refusal lists
// everything the stream lacks at once, with the nats CLI command that
// fixes it.
func OpenTarget(ctx context.Context, nc *nats.Conn, o Options, timeout time.Duration) (*Target, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := js.Stream(rctx, o.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, missingStream(o)
	}
	if err != nil {
		return nil, fmt.Errorf("effects_stream %q: %w", o.Stream, err)
	}
	cfg := s.CachedInfo().Config
	filters := o.Subjects
	if len(filters) == 0 {
		filters = cfg.Subjects
	}
	if len(filters) == 0 {
		return nil, fmt.Errorf("effects_stream %q captures no subject (a mirror or a source-only stream?): effects cannot be published to it", o.Stream)
	}
	for _, f := range filters {
		if err := validFilter(f); err != nil {
			return nil, fmt.Errorf("effects_subjects: %w", err)
		}
	}
	if err := unfitStream(o, cfg, filters); err != nil {
		return nil, err
	}
	var claim string
	if o.Fleet {
		claim = claimSubject(o.Fence)
	}
	return &Target{claim: claim, nc: nc, handle: s, stream: o.Stream, fence: o.Fence, filters: filters, timeout: timeout}, nil
}

// captures reports whether subject is one effects may go to.
func (t *Target) captures(subject string) bool { return captured(subject, t.filters) }

// The fence's headers: the last effect the batch holds ("<rev>/<index>"),
// and the history it belongs to (the folded stream's creation time: a
// recreated bucket numbers its revisions again, and its effects must not
// be taken for the old one's).
const (
	hdrFenceThrough = "Foldhost-Effects-Through"
	hdrFenceEpoch   = "Foldhost-Effects-Epoch"
	// hdrFenceFold names the fold whose effects the fence covers: a fence
	// subject shared by mistake with a fold of another name (whose ids are
	// its own) must not be read as this fold's cover, which would delete
	// effects never published. A fence without it (an older host's) is
	// taken as this fold's.
	hdrFenceFold = "Foldhost-Effects-Fold"
	// hdrFenceClaim, in a fleet, is the sequence of the claim mark the
	// batch was conditioned on: which owner published it.
	hdrFenceClaim = "Foldhost-Effects-Claim"
	// hdrEffectID carries an effect's id on its message.
	hdrEffectID = "Foldhost-Effect-Id"
)

// movedError is a batch refused because a subject's last sequence was not
// the one a message expected: the fence's, or in a fleet the claim
// subject's (the server names the sequence it found: "wrong last
// sequence: N"; 0 when it does not parse). It matches errFenceMoved.
type movedError struct {
	last uint64
	desc string
}

func (e *movedError) Error() string        { return errFenceMoved.Error() + ": " + e.desc }
func (e *movedError) Is(target error) bool { return target == errFenceMoved }

// lastSeqOf reads N from the server's "wrong last sequence: N".
func lastSeqOf(desc string) uint64 {
	_, n, ok := strings.Cut(desc, "wrong last sequence: ")
	if !ok {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(n), 10, 64)
	return v
}

// errFenceMoved: the fence subject's last sequence is not the one the
// batch expected, so the server refused the whole batch.
var errFenceMoved = errors.New("the effects fence moved")

// fenceState is what the fence subject's last message says: its sequence
// (0: none yet), and, when it is this history's, the last effect landed.
type fenceState struct {
	seq   uint64
	has   bool
	rev   protocol.Revision
	index uint32
}

// covers reports whether the fence says e is in the stream already.
func (s fenceState) covers(e fold.OutboxEntry) bool {
	return s.has && (e.Rev < s.rev || e.Rev == s.rev && e.Index <= s.index)
}

// readFence reads the fence subject's last message.
func (t *Target) readFence(ctx context.Context, foldName, epoch string) (fenceState, error) {
	rctx, cancel := t.bounded(ctx)
	defer cancel()
	m, err := t.handle.GetLastMsgForSubject(rctx, t.fence)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fenceState{}, nil
	}
	if err != nil {
		return fenceState{}, fmt.Errorf("reading the effects fence %q: %w", t.fence, err)
	}
	st := fenceState{seq: m.Sequence}
	if m.Header.Get(hdrFenceEpoch) != epoch {
		return st, nil // another history's fence: none of these effects landed
	}
	if name := m.Header.Get(hdrFenceFold); name != "" && name != foldName {
		return st, nil // another fold's: it says nothing of this one's effects
	}
	r, i, ok := strings.Cut(m.Header.Get(hdrFenceThrough), "/")
	rev, err1 := strconv.ParseUint(r, 10, 64)
	idx, err2 := strconv.ParseUint(i, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return st, fmt.Errorf("the effects fence %q, message %d: %s %q is not <revision>/<index>", t.fence, m.Sequence, hdrFenceThrough, m.Header.Get(hdrFenceThrough))
	}
	st.has, st.rev, st.index = true, protocol.Revision(rev), uint32(idx)
	return st, nil
}

// fencePublish publishes chunk as one JetStream atomic batch, the fence
// last: the server stores all of it or none, and only if the fence
// subject's last sequence is still fenceSeq. So a batch lands once,
// whatever the stream's duplicate window, however long the outage: a
// repeat after a lost ack finds the fence moved. It returns the fence's
// new sequence.
//
// An effect refused for good (larger than the connection's max_payload,
// or than the stream's max_msg_size) is a *poisonEffectError naming it.
// The server answers each message of a batch only when it has a reply
// subject; without one (!probe, the fast path), a refused message shows
// only as the commit's errBatchIncomplete, and the caller probes: each
// message then goes as a request, and the first refusal names its effect.
func (t *Target) fencePublish(ctx context.Context, foldName, epoch string, fenceSeq, markSeq uint64, chunk []fold.OutboxEntry, probe bool) (uint64, error) {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	batch := hex.EncodeToString(rnd[:])
	for i, e := range chunk {
		m := nats.NewMsg(e.Subject)
		m.Data = e.Payload
		for _, h := range e.Headers {
			m.Header.Add(h.Name, h.Value)
		}
		m.Header.Set(hdrEffectID, e.ID(foldName))
		m.Header.Set(jsBatchID, batch)
		m.Header.Set(jsBatchSeq, strconv.Itoa(i+1))
		if i == 0 && markSeq != 0 {
			// A fleet's owner: the batch lands only while its claim mark
			// is the claim subject's last (no newer owner marked).
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(markSeq, 10))
			m.Header.Set(jsExpectedLastSubjSeqSubj, t.claim)
		}
		var err error
		if probe {
			err = t.probeOne(ctx, m)
		} else {
			err = t.nc.PublishMsg(m)
		}
		if err != nil && i > 0 {
			t.abandon(batch, i)
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return 0, &poisonEffectError{index: i, reason: fmt.Sprintf("larger than the NATS server's max_payload (%d bytes, headers included)", t.nc.MaxPayload())}
		}
		var refused *refusedError
		if errors.As(err, &refused) && refused.code == jsErrBatchTooLarge {
			return 0, fmt.Errorf("%w: %s", errBatchTooLarge, refused.desc)
		}
		if errors.As(err, &refused) && refused.code == jsErrMessageTooLarge {
			return 0, &poisonEffectError{index: i, reason: fmt.Sprintf("stream %q refused it: %s (error %d; the stream's max_msg_size counts headers too)", t.stream, refused.desc, refused.code)}
		}
		if err != nil {
			return 0, fmt.Errorf("effect %s to %q: %w", e.ID(foldName), e.Subject, err)
		}
	}
	last := chunk[len(chunk)-1]
	fm := nats.NewMsg(t.fence)
	fm.Header.Set(hdrFenceThrough, fmt.Sprintf("%d/%d", last.Rev, last.Index))
	fm.Header.Set(hdrFenceEpoch, epoch)
	fm.Header.Set(hdrFenceFold, foldName)
	if markSeq != 0 {
		fm.Header.Set(hdrFenceClaim, strconv.FormatUint(markSeq, 10)) // which owner's batch (its claim mark)
	}
	fm.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(fenceSeq, 10))
	fm.Header.Set(jsBatchID, batch)
	fm.Header.Set(jsBatchSeq, strconv.Itoa(len(chunk)+1))
	fm.Header.Set(jsBatchCommit, "1")
	reply, err := t.request(ctx, fm)
	if err != nil {
		return 0, fmt.Errorf("effects %s to %s: %w", chunk[0].ID(foldName), last.ID(foldName), err)
	}
	var ack struct {
		Seq   uint64 `json:"seq"`
		Count int    `json:"count"`
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return 0, fmt.Errorf("effects: the server's answer %q: %w", reply.Data, err)
	}
	switch {
	case ack.Error != nil && (ack.Error.ErrCode == int(jetstream.JSErrCodeStreamWrongLastSequence) || ack.Error.ErrCode == int(jetstream.JSErrCodeStreamWrongLastSequenceConstant)):
		return 0, &movedError{last: lastSeqOf(ack.Error.Description), desc: ack.Error.Description}
	case ack.Error != nil && ack.Error.ErrCode == jsErrBatchTooLarge:
		return 0, fmt.Errorf("effects %s to %s: %w: %s", chunk[0].ID(foldName), last.ID(foldName), errBatchTooLarge, ack.Error.Description)
	case ack.Error != nil && ack.Error.ErrCode == jsErrBatchIncomplete:
		return 0, fmt.Errorf("effects %s to %s: %w: stream %q refused a message of the batch (does it still capture every effects subject and the fence %q?): %s", chunk[0].ID(foldName), last.ID(foldName), errBatchIncomplete, t.stream, t.fence, ack.Error.Description)
	case ack.Error != nil:
		return 0, fmt.Errorf("effects %s to %s: stream %q refused the batch: %s (error %d)", chunk[0].ID(foldName), last.ID(foldName), t.stream, ack.Error.Description, ack.Error.ErrCode)
	case ack.Count != len(chunk)+1:
		return 0, fmt.Errorf("effects: stream %q stored a batch of %d messages, %d sent", t.stream, ack.Count, len(chunk)+1)
	}
	return ack.Seq, nil
}

// The JetStream errors the publisher tells apart (nats-server's
// JSAtomicPublishIncompleteBatchErr and JSStreamMessageExceedsMaximumErr).
const (
	jsErrBatchIncomplete = 10176
	jsErrBatchTooLarge   = 10199 // JSAtomicPublishTooLargeBatchErrF
	jsErrMessageTooLarge = 10054
)

// errBatchTooLarge: the server takes batches of fewer messages (its
// max_batch_size).
var errBatchTooLarge = errors.New("the batch is larger than the server's max_batch_size")

// errBatchIncomplete: the server refused a message of the batch, so its
// commit found the batch incomplete and stored none of it.
var errBatchIncomplete = errors.New("incomplete batch")

// poisonEffectError: the server refuses chunk[index] for good, whatever
// the retries (its size). A stream that does not capture an effect's
// subject is not one: the operator may fix the stream.
type poisonEffectError struct {
	index  int
	reason string
}

func (e *poisonEffectError) Error() string { return "a poison effect: " + e.reason }

// refusedError is a JetStream error answering one message.
type refusedError struct {
	code int
	desc string
}

func (e *refusedError) Error() string { return fmt.Sprintf("%s (error %d)", e.desc, e.code) }

// probeOne publishes one non-commit message of a batch as a request: the
// server answers an empty message once it staged it, or a JetStream error
// (a *refusedError). No stream capturing the subject shows as
// nats.ErrNoResponders.
func (t *Target) probeOne(ctx context.Context, m *nats.Msg) error {
	reply, err := t.request(ctx, m)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no stream captures the subject (did stream %q stop capturing it?): %w", t.stream, err)
	}
	if err != nil || len(reply.Data) == 0 {
		return err
	}
	var ack struct {
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return fmt.Errorf("the server's answer %q: %w", reply.Data, err)
	}
	if ack.Error != nil {
		return &refusedError{code: ack.Error.ErrCode, desc: ack.Error.Description}
	}
	return nil
}

// abandon makes the server drop a batch whose first staged messages it
// holds, at once rather than at the batch's timeout (an open batch counts
// against the stream's 50 in flight): a message out of sequence ends it,
// and is not stored. Best effort: the timeout ends it anyway.
func (t *Target) abandon(batch string, staged int) {
	m := nats.NewMsg(t.fence)
	m.Header.Set(jsBatchID, batch)
	m.Header.Set(jsBatchSeq, strconv.Itoa(staged+2))
	_ = t.nc.PublishMsg(m)
}

// JetStream's atomic batch headers (server 2.12+), and the one that
// conditions a message on another subject's last sequence (2.11+).
const (
	jsExpectedLastSubjSeqSubj = "Nats-Expected-Last-Subject-Sequence-Subject"
	jsBatchID                 = "Nats-Batch-Id"
	jsBatchSeq                = "Nats-Batch-Sequence"
	jsBatchCommit             = "Nats-Batch-Commit"
)
