package fold

import "context"

// Plugin is the domain logic the loop calls once per batch. Apply receives
// the batch's updates in revision order (puts, deletes and purges; a
// repair's synthetic deletes carry protocol.NoRevision) and a Reader over the
// fold as committed before this batch. It returns the view mutations to
// commit together with the batch's raw updates and cursor, and how many
// updates it rejected (malformed or irrelevant: still covered by the cursor).
//
// An error means the batch is not committed and the cursor does not move.
// Apply must not retain batch, its values, or the Reader after returning.
// It is called from one goroutine at a time.
type Plugin interface {
	Apply(ctx context.Context, batch []Update, fold Reader) (Output, error)
}

// Output is what a plugin produced for one batch. Its slices may alias the
// plugin's buffers: they stay valid until the next Apply (the loop commits
// before it calls Apply again).
type Output struct {
	Views    []ViewMutation
	Rejected int
	// Effects are the messages the plugin emits with this batch (ABI minor
	// 1), in its order: committed to the outbox with the views and the
	// cursor, published after the commit (Commit.Effects).
	Effects []Effect
	// Identity, when non-nil, names the plugin build that produced Views
	// (module hash, name, version, view schema); it is recorded in the
	// fold's metadata in the same commit.
	Identity []byte
}

// PluginFunc adapts a function to Plugin: the native Go implementation used
// by tests and benchmarks (the WASM runtime is another implementation).
type PluginFunc func(ctx context.Context, batch []Update, fold Reader) (Output, error)

// Apply calls f.
func (f PluginFunc) Apply(ctx context.Context, batch []Update, fold Reader) (Output, error) {
	return f(ctx, batch, fold)
}

// NopPlugin applies nothing and rejects nothing: the fold keeps the raw
// entries and the cursor only. The baseline of the benchmarks.
var NopPlugin Plugin = PluginFunc(func(context.Context, []Update, Reader) (Output, error) {
	return Output{}, nil
})
