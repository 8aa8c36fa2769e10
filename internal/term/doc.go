// Package term is the terminal control `foldhost top` needs, with the
// standard library's ioctls (no terminal package): the terminal's size,
// and raw input read a key at a time without echo. Elsewhere than Linux it
// reads no keys and knows no size.
package term
