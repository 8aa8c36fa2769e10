// Package natskv is foldhost's adapter to NATS JetStream KV: connecting,
// opening a bucket, reading its retention live from the stream, and watching
// it with the guards NATS does not provide.
//
// NATS never tells a consumer it is behind: a resume below the first retained
// revision is silently clamped, a resume beyond the last revision silently
// skips everything up to it, and a live consumer overrun by retention silently
// skips what was evicted. Watch refuses the first two before it starts
// (protocol.CheckResume, returning ErrCursorExpired or ErrCursorBeyondHead)
// and, on a whole-bucket watch, ends with ErrCursorExpired when a delivery gap
// or a periodic probe shows retention overran it (the floor guard,
// protocol.ResumeWindowOK). Every request to the server is bounded by a
// timeout, so a half-dead TCP connection cannot park a caller forever.
//
// It imports package fold (the Update and Source types the loop takes)
// and nothing else of the host: no plugin runtime, no artifacts, no
// supervision.
package natskv
