package protocol

// A prefix-scoped watch's consumer delivers only the messages of its scope,
// so a gap between two deliveries is normal, and by itself cannot tell a
// message outside the scope from one retention evicted before a lagging
// consumer reached it: NATS clamps such a consumer to the first retained
// revision, silently, as it does a resume. The whole-bucket floor guard reads
// retention in band before it hands on a gapped delivery; a prefix watch
// would have to read it before every delivery. It hands its deliveries on
// unsettled instead ([Cursor.Unsettled]) and settles them with a probe every
// so often: [SettleDelivered] confirms what was delivered, [SettleQuiet]
// carries the settled point over the stretch after the last delivery that
// holds nothing of the scope, so that unrelated writes evicting old messages
// never look like a clamp. RATIONALE.md, "Filtered consumers and the settle
// probe".

// SettleDelivered settles a filtered watch's deliveries. settled is its
// settled point (every update in scope at or below it reached the fold;
// settledUnixNano the server time of a message at or below it, 0 when
// unknown), delivered the highest revision it delivered, and r, taken at
// serverNowUnixNano, a retention reading made after every delivery up to
// delivered was received.
//
// If r shows nothing above settled evicted (ResumeWindowOK, or on an
// age-only bucket [GapHoldsNoEviction]), nothing was evicted before the
// consumer scanned it either: every message the consumer skipped up to
// delivered was outside the scope (or superseded by a later one it delivers),
// and the settled point moves to delivered. Otherwise the consumer may have
// been clamped past an update of the scope, and ok is false: the cursor
// expired at settled, and the fold must repair.
func SettleDelivered(settled, delivered Revision, r Retention, settledUnixNano, serverNowUnixNano int64) (Revision, bool) {
	if !ResumeWindowOK(settled, r.First) && !GapHoldsNoEviction(r, settledUnixNano, serverNowUnixNano) {
		return settled, false
	}
	return max(settled, delivered), true
}

// SettleQuiet carries a settled point over revisions that hold nothing of the
// scope. head is the last revision of a retention reading made first; next
// is what a server lookup made after it answered for "the first message of
// the scope at or above settled+1" (NoRevision: none); firstAfter is the
// first retained revision of a reading made after the lookup.
//
// firstAfter <= settled+1 means nothing above settled had been evicted when
// the lookup ran, so every message of the scope written up to head was still
// retained and the lookup would have found the first of them: there is none
// below next, and the settled point moves to min(next-1, head). Otherwise it
// stays (this proves nothing; [SettleDelivered] decides about expiry).
func SettleQuiet(settled, head, next, firstAfter Revision) Revision {
	if !ResumeWindowOK(settled, firstAfter) {
		return settled
	}
	to := head
	if next != NoRevision && next-1 < to {
		to = next - 1
	}
	return max(settled, to)
}

// CheckCursorResume is [CheckResume] for a cursor that may be unsettled: the
// position must not be beyond the head (the resume reads c.Rev+1 onward), and
// retention must not have passed the settled point (an update of the scope
// above it may never have reached the fold).
func CheckCursorResume(c Cursor, w Window) ResumeVerdict {
	if v := CheckResume(c.Rev, w); v != ResumeOK && v != ResumeExpired {
		return v
	}
	if !ResumeWindowOK(c.SettledRev(), w.First) {
		return ResumeExpired
	}
	return ResumeOK
}
