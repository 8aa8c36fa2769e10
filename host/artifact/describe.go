package artifact

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/textfmt"
)

// ManifestReader is implemented by stores that can read the manifest a
// payload embeds (dirstore and s3store do): [List] then describes every
// payload, not only the published one, and [Show] shows any of them.
type ManifestReader interface {
	// PayloadManifest returns the manifest embedded in key's payload p,
	// ok only when its bytes have the address p is named by (so they are
	// the manifest the payload was uploaded under). A payload that is gone
	// or holds no such manifest gives ok false and a nil error.
	PayloadManifest(ctx context.Context, key string, p PayloadInfo) (manifest []byte, ok bool, err error)
}

// Summary is what a payload's manifest says of its artifact, in short.
type Summary struct {
	// Cursor is the revision the artifact is consistent with.
	Cursor        uint64    `json:"cursor"`
	Bucket        string    `json:"bucket"`
	Scope         []string  `json:"scope"`
	StreamCreated time.Time `json:"stream_created,omitzero"`
	// Plugin is the fold's plugin identity, decoded; nil for a raw-only
	// fold, or when the recorded identity does not decode (PluginIdentity
	// then holds its hex as recorded).
	Plugin         *fold.PluginIdentity `json:"plugin,omitempty"`
	PluginIdentity string               `json:"plugin_identity,omitempty"`
	// Files and DataBytes count the store files the artifact holds.
	Files     int   `json:"files"`
	DataBytes int64 `json:"data_bytes"`
}

// summarize reads manifest bytes b.
func summarize(b []byte) (*Summary, error) {
	m, err := ParseManifest(b)
	if err != nil {
		return nil, err
	}
	c, err := m.DecodeCursor()
	if err != nil {
		return nil, err
	}
	s := &Summary{Cursor: uint64(c.Rev), Bucket: m.Bucket, Scope: m.Scope, StreamCreated: m.StreamCreated, Files: len(m.Files)}
	if s.Scope == nil {
		s.Scope = []string{}
	}
	s.Plugin, s.PluginIdentity = decodeIdentity(m.PluginIdentity)
	for _, f := range m.Files {
		s.DataBytes += f.Size
	}
	return s, nil
}

// describePayloads fills each payload's manifest summary in l: the
// published one from the pointer, the others from their embedded manifest
// when s can read it.
func describePayloads(ctx context.Context, s Store, l *Listing, ptr []byte) error {
	mr, _ := s.(ManifestReader)
	for i := range l.Payloads {
		p := &l.Payloads[i]
		var b []byte
		switch {
		case p.Published:
			b = ptr
		case mr != nil:
			mb, ok, err := mr.PayloadManifest(ctx, l.Key, p.PayloadInfo)
			if err != nil {
				return fmt.Errorf("artifact: read the manifest of %s/%s: %w", l.Key, p.Name, err)
			}
			if !ok {
				p.ManifestError = "no manifest of its name inside"
				continue
			}
			b = mb
		default:
			continue
		}
		sum, err := summarize(b)
		if err != nil {
			p.ManifestError = err.Error()
			continue
		}
		p.Manifest = sum
	}
	return nil
}

// ID is the artifact ID of a payload name: its address.
func ID(payload string) string { return strings.TrimSuffix(payload, ".tar") }

// Shown is one artifact in full ([Show]).
type Shown struct {
	Key string `json:"key"`
	// ID is the artifact's address; Payload its payload's name.
	ID      string `json:"id"`
	Payload string `json:"payload"`
	// Published: the key's pointer names it.
	Published bool `json:"published"`
	// Size and Written are the payload's; Missing says the pointer names a
	// payload the store does not hold (Size and Written are then zero).
	Size     int64     `json:"size"`
	Written  time.Time `json:"written,omitzero"`
	Missing  bool      `json:"missing,omitempty"`
	Manifest Manifest  `json:"manifest"`
	// Cursor is the manifest's cursor, decoded.
	Cursor CursorInfo `json:"cursor"`
}

// CursorInfo is a decoded manifest cursor.
type CursorInfo struct {
	Rev          uint64 `json:"rev"`
	EvictionSeen bool   `json:"eviction_seen"`
	Unsettled    bool   `json:"unsettled,omitempty"`
	Settled      uint64 `json:"settled,omitempty"`
}

// ErrNoArtifact: [Show] found no artifact by the ID asked for (or no
// pointer to show).
var ErrNoArtifact = errors.New("artifact: no such artifact")

// Show finds an artifact and reads its manifest. With id "" it is the
// pointer's artifact of the one key of keys (or of the store, when keys is
// empty and the store holds one key). Otherwise id is an artifact ID (a
// payload's address, with or without ".tar") or a unique prefix of one,
// looked up under keys (every key of the store when empty).
func Show(ctx context.Context, s Store, keys []string, id string) (Shown, error) {
	if len(keys) == 0 {
		var err error
		if keys, err = s.Keys(ctx); err != nil {
			return Shown{}, fmt.Errorf("artifact: list keys: %w", err)
		}
	}
	id = ID(id)
	if id == "" {
		switch len(keys) {
		case 0:
			return Shown{}, fmt.Errorf("%w: the store holds no pointer", ErrNoArtifact)
		case 1:
		default:
			return Shown{}, fmt.Errorf("the store holds %d keys (%s): name one, or an artifact ID", len(keys), strings.Join(keys, ", "))
		}
	}
	ls, err := list(ctx, s, false, keys)
	if err != nil {
		return Shown{}, err
	}
	type match struct {
		l *Listing
		p *ListedPayload // nil: the pointer's payload is missing
	}
	var found []match
	for i := range ls {
		l := &ls[i]
		if id == "" {
			switch {
			case l.PointerError != "":
				return Shown{}, fmt.Errorf("%w: %s's pointer is corrupt: %s", ErrNoArtifact, l.Key, l.PointerError)
			case l.Published == nil:
				return Shown{}, fmt.Errorf("%w: %s has no pointer", ErrNoArtifact, l.Key)
			}
		}
		for j := range l.Payloads {
			p := &l.Payloads[j]
			if (id == "" && p.Published) || (id != "" && strings.HasPrefix(ID(p.Name), id)) {
				found = append(found, match{l, p})
			}
		}
		if pub := l.Published; pub != nil && pub.Missing && (id == "" || strings.HasPrefix(ID(pub.Payload), id)) {
			found = append(found, match{l, nil})
		}
	}
	switch {
	case len(found) == 0:
		return Shown{}, fmt.Errorf("%w: %q under %s", ErrNoArtifact, id, strings.Join(keys, ", "))
	case len(found) > 1:
		var names []string
		for _, m := range found {
			if m.p != nil {
				names = append(names, m.l.Key+"/"+ID(m.p.Name))
			} else {
				names = append(names, m.l.Key+"/"+ID(m.l.Published.Payload))
			}
		}
		return Shown{}, fmt.Errorf("artifact ID %q is ambiguous: %s", id, strings.Join(names, ", "))
	}
	m := found[0]
	sh := Shown{Key: m.l.Key}
	var b []byte
	if m.p == nil || m.p.Published {
		if b, err = s.Pointer(ctx, m.l.Key); err != nil {
			return Shown{}, err
		}
		sh.Published = true
	}
	if m.p == nil {
		sh.Payload, sh.Missing = m.l.Published.Payload, true
	} else {
		sh.Payload, sh.Size, sh.Written = m.p.Name, m.p.Size, m.p.Modified
		if b == nil {
			mr, ok := s.(ManifestReader)
			if !ok {
				return Shown{}, fmt.Errorf("artifact: this store cannot read a payload's manifest")
			}
			var found bool
			if b, found, err = mr.PayloadManifest(ctx, m.l.Key, m.p.PayloadInfo); err != nil {
				return Shown{}, err
			} else if !found {
				return Shown{}, fmt.Errorf("%w: %s/%s holds no manifest of its name", ErrArtifactInvalid, m.l.Key, m.p.Name)
			}
		}
	}
	sh.ID = ID(sh.Payload)
	if sh.Manifest, err = ParseManifest(b); err != nil {
		return Shown{}, err
	}
	c, err := sh.Manifest.DecodeCursor()
	if err != nil {
		return Shown{}, err
	}
	sh.Cursor = CursorInfo{Rev: uint64(c.Rev), EvictionSeen: c.EvictionSeen, Unsettled: c.Unsettled, Settled: uint64(c.Settled)}
	return sh, nil
}

// WriteListing writes ls as the table `foldhost artifacts list` prints:
// one row per payload with its manifest's cursor, bucket, scope and plugin
// identity, its size and age (at now), and whether the pointer names it.
func WriteListing(w io.Writer, where string, ls []Listing, now time.Time) error {
	if len(ls) == 0 {
		_, err := fmt.Fprintf(w, "no artifacts in %s ('foldhost export' publishes them)\n", where)
		return err
	}
	fmt.Fprintf(w, "artifact store %s\n", where)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tID\tCURSOR\tBUCKET\tSCOPE\tPLUGIN\tSIZE\tAGE\tSTATE")
	for _, l := range ls {
		switch {
		case l.PointerError != "":
			fmt.Fprintf(tw, "%s\t(corrupt pointer: %s; the next export replaces it)\t\t\t\t\t\t\t\n", l.Key, l.PointerError)
		case l.Published == nil && len(l.Payloads) == 0:
			fmt.Fprintf(tw, "%s\t(nothing published)\t\t\t\t\t\t\t\n", l.Key)
		case l.Published != nil && l.Published.Missing:
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t\t\t\tpublished, payload MISSING\n", l.Key, ID(l.Published.Payload), l.Published.Cursor,
				orDash(l.Published.Bucket), scopeText(l.Published.Scope))
		}
		for _, p := range l.Payloads {
			cursor, bucket, scope, plugin := "?", "?", "?", "?"
			if s := p.Manifest; s != nil {
				cursor, bucket, scope, plugin = strconv.FormatUint(s.Cursor, 10), orDash(s.Bucket), scopeText(s.Scope), pluginCell(s.Plugin, s.PluginIdentity)
			}
			state := "-"
			switch {
			case p.Published:
				state = "published"
			case p.ManifestError != "":
				state = "unreadable: " + p.ManifestError
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Key, ID(p.Name), cursor, bucket, scope, plugin,
				textfmt.HumanBytes(p.Size), Age(now.Sub(p.Modified)), state)
		}
	}
	return tw.Flush()
}

// WriteShown writes sh, read from the store where, in human form
// (`foldhost artifacts show`), its age taken at now.
func WriteShown(w io.Writer, where string, sh Shown, now time.Time) error {
	fmt.Fprintf(w, "artifact store %s\n", where)
	m := sh.Manifest
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, f string, args ...any) { fmt.Fprintf(tw, "%s\t"+f+"\n", append([]any{k}, args...)...) }
	row("key:", "%s", sh.Key)
	row("id:", "%s", sh.ID)
	row("payload:", "%s", sh.Payload)
	switch {
	case sh.Missing:
		row("state:", "published, payload MISSING (the next export replaces the pointer)")
	case sh.Published:
		row("state:", "published (the pointer names it: bootstraps and restores download it)")
	default:
		row("state:", "not published (an older export, or one that lost to a newer; pruned once 4 x lease_ttl old)")
	}
	if !sh.Missing {
		row("size:", "%s (%d bytes)", textfmt.HumanBytes(sh.Size), sh.Size)
		row("written:", "%s (%s ago)", sh.Written.UTC().Format(time.RFC3339), Age(now.Sub(sh.Written)))
	}
	c := sh.Cursor
	cur := strconv.FormatUint(c.Rev, 10)
	if c.Unsettled {
		cur += fmt.Sprintf(" (unsettled above %d)", c.Settled)
	}
	if c.EvictionSeen {
		cur += " (eviction seen)"
	}
	row("cursor:", "%s", cur)
	row("bucket:", "%s", orDash(m.Bucket))
	row("scope:", "%s", scopeText(m.Scope))
	if m.StreamCreated.IsZero() {
		row("stream created:", "(not recorded)")
	} else {
		row("stream created:", "%s", m.StreamCreated.UTC().Format(time.RFC3339Nano))
	}
	switch p, raw := decodeIdentity(m.PluginIdentity); {
	case p != nil:
		row("plugin:", "%s %s, view schema %d, ABI %s, sha256 %s", orDash(p.Name), orDash(p.Version), p.ViewSchema, p.ABI, p.SHA256)
	case raw != "":
		row("plugin:", "(identity undecodable) %s", raw)
	default:
		row("plugin:", "(none: a raw-only fold)")
	}
	row("format:", "schema %d, backend %s, store format %d, pebble format %d", m.Schema, m.Backend, m.StoreFormat, m.PebbleFormat)
	var data int64
	for _, f := range m.Files {
		data += f.Size
	}
	row("files:", "%d (%s of data)", len(m.Files), textfmt.HumanBytes(data))
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PATH\tSIZE\tBLAKE3")
	for _, f := range m.Files {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", f.Path, f.Size, f.BLAKE3)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// scopeText is a scope in a cell: its prefixes, or "*" for the whole
// bucket.
func scopeText(scope []string) string {
	if len(scope) == 0 {
		return "*"
	}
	return strings.Join(scope, ",")
}

// decodeIdentity decodes a manifest's plugin identity (the hex of its JSON
// encoding): the identity, or its hex when it does not decode, or neither
// for a raw-only fold.
func decodeIdentity(h *string) (*fold.PluginIdentity, string) {
	if h == nil {
		return nil, ""
	}
	b, err := hex.DecodeString(*h)
	if err == nil {
		if p, err := fold.ParsePluginIdentity(b); err == nil {
			return &p, ""
		}
	}
	return nil, *h
}

// pluginCell is a plugin identity in a cell: name@version/<first 12 hex
// digits of the module's sha256>, "-" for none.
func pluginCell(p *fold.PluginIdentity, raw string) string {
	switch {
	case p != nil:
		return fmt.Sprintf("%s@%s/%s", orDash(p.Name), orDash(p.Version), p.SHA256[:min(12, len(p.SHA256))])
	case raw != "":
		return "?"
	}
	return "-"
}

// Age is d in its two largest units: 45s, 12m5s, 3h20m, 2d4h.
func Age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
}
