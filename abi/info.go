package abi

import "fmt"

// Info is what a plugin says about itself.
type Info struct {
	Name       string
	Version    string
	ViewSchema uint32
}

// AppendInfo appends the info record.
func AppendInfo(b []byte, in Info) []byte {
	b = appendString(b, in.Name)
	b = appendString(b, in.Version)
	return le.AppendUint32(b, in.ViewSchema)
}

// MaxInfoField bounds an info record's name and version: they go into
// every status answer, log line and artifact manifest.
const MaxInfoField = 256

// DecodeInfo decodes an info record; a name or version longer than
// MaxInfoField bytes is an error.
func DecodeInfo(b []byte) (Info, error) {
	r := reader{b: b}
	in := Info{Name: string(r.bytes()), Version: string(r.bytes()), ViewSchema: r.u32()}
	r.end()
	if r.err != nil {
		return Info{}, r.err
	}
	if len(in.Name) > MaxInfoField || len(in.Version) > MaxInfoField {
		return Info{}, fmt.Errorf("abi: info: name (%d bytes) or version (%d bytes) longer than %d", len(in.Name), len(in.Version), MaxInfoField)
	}
	return in, nil
}
