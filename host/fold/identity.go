package fold

import (
	"encoding/json"
	"fmt"
)

// PluginIdentity names the plugin build a fold runs and that produced its
// views. Its JSON encoding is what a commit records ([Commit.PluginIdentity],
// [Output.Identity]), what an artifact's manifest carries and what the
// status API shows: the one shape of a plugin's identity in the host.
type PluginIdentity struct {
	SHA256     string `json:"sha256"` // of the module's bytes, hex
	Name       string `json:"name"`
	Version    string `json:"version"`
	ViewSchema uint32 `json:"view_schema"`
	ABI        string `json:"abi"` // "v<major>.<minor>"
}

// Encode is the identity's JSON encoding.
func (p PluginIdentity) Encode() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // a struct of strings and a number always encodes
	}
	return b
}

// ParsePluginIdentity decodes a recorded identity.
func ParsePluginIdentity(b []byte) (PluginIdentity, error) {
	var p PluginIdentity
	if err := json.Unmarshal(b, &p); err != nil {
		return PluginIdentity{}, fmt.Errorf("fold: plugin identity %q: %w", b, err)
	}
	return p, nil
}
