package host

import "context"

// SetAfterReplay makes every view rebuild call fn between its replay and
// its switch (a test holds the rebuild there while it writes or reloads);
// fn should return when ctx ends. The returned func unsets it. Not safe
// while a host runs.
func SetAfterReplay(fn func(ctx context.Context, live bool)) (unset func()) {
	afterReplay = fn
	return func() { afterReplay = nil }
}
