package wasm

import (
	"bytes"
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
	passLine(ctx, st.logger, st.logs, level, msg, len(msg), "plugin", st.module)
}

// passLine logs one guest line (msg: its first bytes, of full bytes in
// all), cut to MaxLogLine and rate-limited by logs, with attrs.
func passLine(ctx context.Context, logger *slog.Logger, logs *logLimiter, level slog.Level, msg []byte, full int, attrs ...any) {
	if !logger.Enabled(ctx, level) {
		return // a level the host does not print costs no budget
	}
	ok, dropped := logs.take()
	if !ok {
		return
	}
	if len(msg) > MaxLogLine {
		msg = msg[:MaxLogLine]
	}
	if full > len(msg) {
		attrs = append(attrs, "cut_from_bytes", full)
		msg = cutRunes(msg)
	}
	if dropped > 0 {
		attrs = append(attrs, "dropped_before", dropped)
	}
	logger.Log(ctx, level, string(msg), attrs...)
}

// guestOutput is one instance's stdout or stderr (WASI fds 1 and 2): each
// line reaches the host log as the SDK's log lines do (cut to MaxLogLine,
// sharing their rate limit), stdout at INFO and stderr at WARN, and every
// byte goes to the tail that the instance's errors carry. A line is passed
// on at its newline, or when the instance closes.
type guestOutput struct {
	tail   *tail
	logger *slog.Logger
	logs   *logLimiter
	module string
	stream string
	level  slog.Level

	mu   sync.Mutex
	line []byte // the current line's first MaxLogLine bytes
	full int    // the current line's length so far
}

func (o *guestOutput) Write(p []byte) (int, error) {
	n := len(p)
	_, _ = o.tail.Write(p)
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := MaxLogLine - len(o.line); room > 0 {
			o.line = append(o.line, chunk[:min(room, len(chunk))]...)
		}
		o.full += len(chunk)
		if i < 0 {
			break
		}
		o.emit()
		p = p[i+1:]
	}
	return n, nil
}

// flush passes on a last line that had no newline.
func (o *guestOutput) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.emit()
}

func (o *guestOutput) emit() {
	line, full := bytes.TrimSuffix(o.line, []byte("\r")), o.full
	if len(line) < len(o.line) {
		full--
	}
	if full > 0 { // blank lines are not logged
		passLine(context.Background(), o.logger, o.logs, o.level, line, full, "plugin", o.module, "stream", o.stream)
	}
	o.line, o.full = o.line[:0], 0
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
