package fold

// EffectHeader is one header of an Effect.
type EffectHeader struct{ Name, Value string }

// Effect is a message a plugin emits with a batch (ABI minor 1): committed
// to the fold's outbox in the batch's commit, published after it
// (Commit.Effects). The plugin runtime validated the subject and headers.
type Effect struct {
	Subject string
	Headers []EffectHeader
	Payload []byte
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
