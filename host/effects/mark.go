package effects

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/protocol"
)

// In a fleet, the owner of a fold's unit writes a claim mark, its epoch,
// on the fold's claim subject (the fence's subject + ".claim") in the
// effects stream before it publishes, conditioned on the mark it read
// and only over an older one (protocol.FenceMark); each of its batches
// then expects the claim subject's last sequence to be its mark's. Once a
// newer owner marked, the server refuses every batch of the older one:
// a node paused past its lease and resumed is fenced by the server, not
// by its own belief (RATIONALE.md, "The fleet").

// Headers of a claim mark.
const (
	hdrClaimEpoch = "Foldhost-Claim-Epoch"
	hdrClaimNode  = "Foldhost-Claim-Node"
)

// claimSubject is the claim subject of the fold whose fence is fence.
func claimSubject(fence string) string { return fence + ".claim" }

// mark is a claim mark as read: its sequence (0: none) and epoch.
type mark struct {
	seq   uint64
	epoch protocol.Revision
}

// readMark reads the claim subject's last message.
func (t *Target) readMark(ctx context.Context) (mark, error) {
	rctx, cancel := t.bounded(ctx)
	defer cancel()
	m, err := t.handle.GetLastMsgForSubject(rctx, t.claim)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return mark{}, nil
	}
	if err != nil {
		return mark{}, fmt.Errorf("reading the claim mark %q: %w", t.claim, err)
	}
	e, err := strconv.ParseUint(m.Header.Get(hdrClaimEpoch), 10, 64)
	if err != nil {
		// Not a mark of foldhost's: taken as the oldest (overwritten by
		// the next owner's mark).
		return mark{seq: m.Sequence}, nil
	}
	return mark{seq: m.Sequence, epoch: protocol.Revision(e)}, nil
}

// MarkEpoch is the epoch of the claim mark in the fold's effects stream
// (0: none, no effects stream, or not in a fleet): an epoch the fleet's
// must stay above.
func (p *Publisher) MarkEpoch(ctx context.Context) (protocol.Revision, error) {
	if p.target == nil || p.target.claim == "" {
		return 0, nil
	}
	m, err := p.target.readMark(ctx)
	return m.epoch, err
}

// errMarkMoved: the claim subject moved between the read and the write of
// a mark (another owner's mark, or this one's whose answer was lost).
var errMarkMoved = errors.New("the claim mark moved")

// writeMark writes the mark of epoch, conditioned on the claim subject's
// last sequence being after's; it returns the mark's sequence.
func (t *Target) writeMark(ctx context.Context, epoch protocol.Revision, node string, after uint64) (uint64, error) {
	m := nats.NewMsg(t.claim)
	m.Header.Set(hdrClaimEpoch, strconv.FormatUint(uint64(epoch), 10))
	m.Header.Set(hdrClaimNode, node)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(after, 10))
	rctx, cancel := t.bounded(ctx)
	defer cancel()
	js, err := jetstream.New(t.nc)
	if err != nil {
		return 0, err
	}
	ack, err := js.PublishMsg(rctx, m)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, fmt.Errorf("%w: %s", errMarkMoved, apiErr.Description)
	}
	if err != nil {
		return 0, fmt.Errorf("writing the claim mark %q: %w", t.claim, err)
	}
	return ack.Sequence, nil
}

// errFencedOut: a newer owner of the fold's unit marked its claim: this
// publisher publishes nothing more under its epoch.
var errFencedOut = errors.New("a newer owner of the fold's unit claimed it")

// ensureMark makes sure the claim subject holds this owner's mark for
// epoch, writing it when an older one (or none) is there, and returns
// the mark's sequence; errFencedOut when a newer owner's is there.
func (p *Publisher) ensureMark(ctx context.Context, epoch protocol.Revision) (uint64, error) {
	if p.markEpoch == epoch && p.markSeq != 0 {
		return p.markSeq, nil
	}
	for {
		cur, err := p.target.readMark(ctx)
		if err != nil {
			return 0, err
		}
		switch protocol.FenceMark(cur.epoch, epoch) {
		case protocol.MarkHeld:
			p.markEpoch, p.markSeq = epoch, cur.seq
			return cur.seq, nil
		case protocol.MarkFenced:
			return 0, fmt.Errorf("%w (the claim mark is at epoch %d, this owner's %d)", errFencedOut, cur.epoch, epoch)
		}
		seq, err := p.target.writeMark(ctx, epoch, p.cfg.Node, cur.seq)
		if errors.Is(err, errMarkMoved) {
			continue // read it again: a newer owner's, or this one's own
		}
		if err != nil {
			return 0, err
		}
		p.markEpoch, p.markSeq = epoch, seq
		p.log.Info("wrote this owner's claim mark in the effects stream: an older owner's batches are refused from now on",
			"epoch", uint64(epoch), "claim", p.target.claim, "seq", seq)
		return seq, nil
	}
}
