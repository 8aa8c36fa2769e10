package abi

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

// DecodeInfo decodes an info record.
func DecodeInfo(b []byte) (Info, error) {
	r := reader{b: b}
	in := Info{Name: string(r.bytes()), Version: string(r.bytes()), ViewSchema: r.u32()}
	r.end()
	if r.err != nil {
		return Info{}, r.err
	}
	return in, nil
}
