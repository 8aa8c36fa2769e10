package fold

import "github.com/foldhost/foldhost/protocol"

// EffectHeader is one header of an Effect.
type EffectHeader struct{ Name, Value string }

// Effect is a message a plugin emits with a batch (ABI minor 1): committed
// to the fold's outbox in the batch's commit, published after it
// (Commit.Effects). The plugin runtime validated the subject and headers.
type Effect struct {
	// UpdateRev is the revision of the update the effect derives from, when the
	// plugin named it (ABI minor 3): the effect is then filed under it,
	// and its id does not depend on the batch around it. 0: the effect
	// belongs to its batch, filed under Commit.EffectRev.
	UpdateRev protocol.Revision
	Subject   string
	Headers   []EffectHeader
	Payload   []byte
}

// Size is the effect's subject, headers and payload together (what the
// host's plugin_max_effect_kb bounds, abi.Effect.Size).
func (e *Effect) Size() int {
	n := len(e.Subject) + len(e.Payload)
	for _, h := range e.Headers {
		n += len(h.Name) + len(h.Value)
	}
	return n
}
