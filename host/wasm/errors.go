package wasm

import (
	"errors"
	"fmt"
)

// ErrInvalidModule is wrapped by every validation failure of Runtime.Load.
var ErrInvalidModule = errors.New("wasm: invalid plugin module")

// ErrModuleUnavailable, wrapped by a ReloadFrom loader's error, says the
// module could not be read at all (a download cut short, its store
// unreachable): no verdict on any module, so no refusal is recorded.
var ErrModuleUnavailable = errors.New("wasm: plugin module unavailable")

// Kind classifies a plugin failure.
type Kind string

const (
	KindGuest     Kind = "guest-error" // the plugin reported a status-1 error
	KindTrap      Kind = "trap"        // unreachable, out of bounds, a panic, exit
	KindTimeout   Kind = "timeout"     // the per-call deadline passed
	KindOOM       Kind = "out-of-memory"
	KindMalformed Kind = "malformed-output"
	KindLimit     Kind = "over-limit"   // a *LimitError: what it made the host hold
	KindRefused   Kind = "read-refused" // a *ReadRefusal: a read the host would not answer
)

// PluginError is a failed call into a plugin. The batch it was applying is
// not committed.
type PluginError struct {
	Kind   Kind
	Module string // sha256 of the module, hex, shortened
	Err    error
	Stderr string // the tail of what the guest wrote to stderr
}

func (e *PluginError) Error() string {
	if e.Stderr != "" {
		// stderr first: the error may end in a multi-line wasm stack trace.
		return fmt.Sprintf("wasm plugin %s: %s (stderr: %q): %v", e.Module, e.Kind, e.Stderr, e.Err)
	}
	return fmt.Sprintf("wasm plugin %s: %s: %v", e.Module, e.Kind, e.Err)
}

func (e *PluginError) Unwrap() error { return e.Err }

// LimitError is a call that crossed one of the bounds on what a plugin can
// make the host hold (Options.MaxOutputBytes and the others).
type LimitError struct {
	What  string // what crossed it: "output record", "view value", ...
	Size  int64  // how large it was, in Unit (at least: counting stops there)
	Limit int64
	Unit  string // "bytes" or "view mutations"
	// Key is the fold configuration's key that sets the limit (Options
	// names the field).
	Key string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: %d %s, over the limit of %d (%s)", e.What, e.Size, e.Unit, e.Limit, e.Key)
}

// Configuration keys of the limits (host/config), named by LimitError.
const (
	KeyMaxOutput        = "plugin_max_output_mb"
	KeyMaxViewMutations = "plugin_max_view_mutations"
	KeyMaxViewKey       = "plugin_max_view_key_bytes"
	KeyMaxViewValue     = "plugin_max_view_value_kb"
	KeyMaxRead          = "plugin_max_read_mb"
	KeyMaxCallRead      = "plugin_max_call_read_mb"
	KeyMaxError         = "plugin_max_error_bytes"
	KeyMaxEffects       = "plugin_max_effects"
	KeyMaxEffect        = "plugin_max_effect_kb"
	KeyMaxQueryInput    = "plugin_max_query_input_kb"
)
