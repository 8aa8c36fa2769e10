package wasm

import (
	"context"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"
)

// Guest log bounds: a plugin's log line is cut to MaxLogLine bytes, and a
// runtime passes on at most LogBurst lines at once and LogRate a second
// after that; what it drops is counted in the next line it passes (a guest
// logging per update must not flood the host's log, its disk or its
// memory).
const (
	MaxLogLine = 4 << 10
	LogBurst   = 100
	LogRate    = 50
)

// logLimiter is a token bucket shared by a runtime's instances.
type logLimiter struct {
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int
	now     func() time.Time
}

func newLogLimiter() *logLimiter { return &logLimiter{tokens: LogBurst, now: time.Now} }

// take reports whether a line may pass, and how many were dropped since
// the last one that did.
func (l *logLimiter) take() (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.last.IsZero() {
		l.tokens = min(LogBurst, l.tokens+now.Sub(l.last).Seconds()*LogRate)
	}
	l.last = now
	if l.tokens < 1 {
		l.dropped++
		return false, 0
	}
	l.tokens--
	dropped, l.dropped = l.dropped, 0
	return true, dropped
}

// logGuest passes one guest log line on, cut and rate-limited.
func (st *callState) logGuest(ctx context.Context, level slog.Level, msg []byte) {
	if !st.logger.Enabled(ctx, level) {
		return // a level the host does not print costs no budget
	}
	ok, dropped := st.logs.take()
	if !ok {
		return
	}
	attrs := []any{"plugin", st.module}
	if len(msg) > MaxLogLine {
		attrs = append(attrs, "cut_from_bytes", len(msg))
		msg = cutRunes(msg[:MaxLogLine])
	}
	if dropped > 0 {
		attrs = append(attrs, "dropped_before", dropped)
	}
	st.logger.Log(ctx, level, string(msg), attrs...)
}

// cutRunes drops the incomplete rune, if any, that a cut left at the end
// of b (at most utf8.UTFMax-1 bytes; invalid bytes elsewhere stay).
func cutRunes(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if c := b[len(b)-i]; c < utf8.RuneSelf {
			return b // ASCII: nothing after it is a rune's start
		} else if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
