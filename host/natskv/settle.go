package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// settle is a prefix watch's settle probe (protocol.SettleDelivered,
// protocol.SettleQuiet): it confirms the deliveries up to the frontier
// against a retention reading, and while the scope is quiet carries the
// settled point over the revisions after them that hold nothing of the
// scope. It returns the settle mark to hand on (nil: the settled point did
// not move), or a *CursorError when retention may have evicted an update
// of the scope before the consumer reached it. A failed read proves
// nothing and is retried at the next tick; the deliveries stay unsettled
// meanwhile.
func (w *Watcher) settle(g *floorGuard) (*fold.Event, error) {
	before := g.settled
	info, err := w.b.streamInfo(w.ctx)
	if err != nil {
		return nil, nil
	}
	ret := retentionOf(info)
	s, ok := protocol.SettleDelivered(g.settled, g.frontier, ret, g.settledTime, info.TimeStamp.UnixNano())
	if !ok {
		return nil, &CursorError{Verdict: protocol.ResumeExpired, Cursor: g.settled, Retention: ret, MidWatch: true, Settling: true}
	}
	if s > g.settled {
		g.settled, g.settledTime = s, g.frontierTime
	}
	if ret.Last > g.settled {
		next, err := w.b.nextInScope(w.ctx, w.scope, g.settled+1)
		if err == nil {
			var after protocol.Retention
			if after, _, err = w.b.Retention(w.ctx); err == nil {
				if q := protocol.SettleQuiet(g.settled, ret.Last, next, after.First); q > g.settled {
					g.settled = q
					if q == ret.Last {
						g.settledTime = info.State.LastTime.UnixNano()
					} // else: the time of an older message, which is conservative
				}
			}
		}
	}
	if g.settled == before {
		return nil, nil
	}
	return &fold.Event{Settle: g.settled, SettleTime: g.settledTime}, nil
}

// nextInScope returns the revision of the first message of scope at or
// above from that the stream retains, or NoRevision when there is none.
// It asks the stream's leader (the JetStream API's message get), never a
// direct get: a direct get may be answered by a replica that lags, and a
// lookup that missed a message would settle past it.
func (b *Bucket) nextInScope(ctx context.Context, scope Scope, from protocol.Revision) (protocol.Revision, error) {
	next := protocol.NoRevision
	for _, f := range scope.filters() {
		req, err := json.Marshal(msgGetRequest{Seq: uint64(from), NextFor: "$KV." + b.name + "." + f})
		if err != nil {
			return 0, err
		}
		rctx, cancel := b.reqCtx(ctx)
		msg, err := b.nc.RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET."+b.stream, req)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("natskv: looking up the next message of %s from %d: %w", f, from, err)
		}
		var resp msgGetResponse
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return 0, fmt.Errorf("natskv: looking up the next message of %s: %w", f, err)
		}
		switch {
		case resp.Error != nil && resp.Error.ErrCode == errCodeMessageNotFound:
			continue // none in this prefix
		case resp.Error != nil:
			return 0, fmt.Errorf("natskv: looking up the next message of %s: %s (code %d)", f, resp.Error.Description, resp.Error.Code)
		case resp.Message == nil || resp.Message.Seq < uint64(from):
			return 0, errors.New("natskv: looking up the next message: the server's answer names no message at or above the revision asked for")
		}
		if r := protocol.Revision(resp.Message.Seq); next == protocol.NoRevision || r < next {
			next = r
		}
	}
	return next, nil
}

// errCodeMessageNotFound is the JetStream API's error code for "no message"
// (a 404 may also be a missing stream, which must not read as "none").
const errCodeMessageNotFound = 10037

type msgGetRequest struct {
	Seq     uint64 `json:"seq"`
	NextFor string `json:"next_by_subj"`
}

type msgGetResponse struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
	Message *struct {
		Seq uint64 `json:"seq"`
	} `json:"message"`
}
