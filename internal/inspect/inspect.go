// Package inspect makes the records `foldhost inspect` prints of a
// stopped fold's store, each from one snapshot: the cursor, the stats
// (sizes and exact key counts), the outbox, raw and view entries and
// ranges (byte strings as the HTTP API prints them), and the warnings of
// its origin record.
package inspect

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// Cursor is the applied cursor and the store's origin.
type Cursor struct {
	Fold         string       `json:"fold,omitempty"`
	DataDir      string       `json:"data_dir"`
	Cursor       uint64       `json:"cursor"`
	Settled      uint64       `json:"settled"`
	EvictionSeen bool         `json:"eviction_seen"`
	MsgTime      string       `json:"msg_time,omitempty"`
	Origin       *fold.Origin `json:"origin"`
}

// CursorOf is sn's cursor.
func CursorOf(sn *fold.Snapshot, name, dir string, origin *fold.Origin) Cursor {
	cur := sn.Cursor()
	out := Cursor{Fold: name, DataDir: dir, Cursor: uint64(cur.Rev), Settled: uint64(cur.SettledRev()), EvictionSeen: cur.EvictionSeen, Origin: origin}
	if cur.MsgUnixNano != 0 {
		out.MsgTime = time.Unix(0, cur.MsgUnixNano).UTC().Format(time.RFC3339Nano)
	}
	return out
}

// Stats is the store's sizes and exact key counts.
type Stats struct {
	Fold              string       `json:"fold,omitempty"`
	DataDir           string       `json:"data_dir"`
	Cursor            uint64       `json:"cursor"`
	EvictionSeen      bool         `json:"eviction_seen"`
	RawKeys           uint64       `json:"raw_keys"`
	ViewKeys          uint64       `json:"view_keys"`
	DiskBytes         uint64       `json:"disk_bytes"`
	RawBytes          uint64       `json:"raw_bytes_approx"`
	ViewBytes         uint64       `json:"view_bytes_approx"`
	PluginIdentityB64 string       `json:"plugin_identity_b64,omitempty"`
	FormatVersion     uint32       `json:"format_version"`
	Origin            *fold.Origin `json:"origin"`
}

// Outbox is the effects committed and not yet published. Ids name the
// fold (or "fold" when the store is named by its directory only), as the
// publisher's Foldhost-Effect-Id does.
type Outbox struct {
	Fold    string       `json:"fold,omitempty"`
	DataDir string       `json:"data_dir"`
	Cursor  uint64       `json:"cursor"`
	Count   int64        `json:"count"`
	First   string       `json:"first,omitempty"`
	Last    string       `json:"last,omitempty"`
	Oldest  []OutboxItem `json:"oldest"`
	// Held is the store's effects hold (docs/effects.md, "Replicas"),
	// when it has one.
	Held *fold.EffectsHold `json:"held,omitempty"`
}

// StatsOf is the stats of the store, read through its snapshot sn; name
// is the fold's (empty when the store is named by its directory only).
func StatsOf(store *fold.Store, sn *fold.Snapshot, name, dir string, origin *fold.Origin) (Stats, error) {
	st, err := store.Stats()
	if err != nil {
		return Stats{}, err
	}
	var rawKeys, viewKeys uint64
	if err := sn.RawKeys("", func([]byte) error { rawKeys++; return nil }); err != nil {
		return Stats{}, err
	}
	if err := sn.ViewRange(nil, func(_, _ []byte) error { viewKeys++; return nil }); err != nil {
		return Stats{}, err
	}
	ident, hasIdent, err := sn.PluginIdentity()
	if err != nil {
		return Stats{}, err
	}
	out := Stats{
		Fold: name, DataDir: dir, Cursor: uint64(sn.Cursor().Rev), EvictionSeen: sn.Cursor().EvictionSeen,
		RawKeys: rawKeys, ViewKeys: viewKeys,
		DiskBytes: st.DiskBytes, RawBytes: st.RawBytes, ViewBytes: st.ViewBytes,
		FormatVersion: fold.FormatVersion, Origin: origin,
	}
	if hasIdent {
		out.PluginIdentityB64 = base64.StdEncoding.EncodeToString(ident)
	}
	return out, nil
}

// OutboxItem is one outbox entry as inspect shows it (not its payload).
type OutboxItem struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
	Size    int    `json:"size"` // subject, headers and payload
}

// OutboxOf is the outbox: how many effects wait, the first and last ids,
// and the oldest n (0: 10).
func OutboxOf(store *fold.Store, name, dir string, cursor uint64, n int) (Outbox, error) {
	if n == 0 {
		n = 10
	}
	idName := name
	if idName == "" {
		idName = "fold"
	}
	out := Outbox{Fold: name, DataDir: dir, Cursor: cursor, Count: store.OutboxLen(), Oldest: []OutboxItem{}}
	if err := store.Outbox(n, func(e fold.OutboxEntry) error {
		out.Oldest = append(out.Oldest, OutboxItem{ID: e.ID(idName), Subject: e.Subject, Size: e.Size()})
		return nil
	}); err != nil {
		return Outbox{}, err
	}
	h, held, err := store.EffectsHold()
	if err != nil {
		return Outbox{}, err
	}
	if held {
		out.Held = &h
	}
	if len(out.Oldest) > 0 {
		out.First = out.Oldest[0].ID
		last, ok, err := store.LastOutbox()
		if err != nil {
			return Outbox{}, err
		}
		if ok {
			out.Last = last.ID(idName)
		}
	}
	return out, nil
}

// Origin is sn's origin record (nil: none), and warnings an operator
// needs: a record that does not parse (the store is still inspectable),
// or another source than the config's fold fc (nil: the store is named by
// its directory).
func Origin(sn *fold.Snapshot, fc *config.FoldConfig, dir string) (*fold.Origin, []string, error) {
	var warnings []string
	origin, hasOrigin, err := sn.Origin()
	if errors.Is(err, fold.ErrCorrupt) {
		warnings = append(warnings, fmt.Sprintf("%v ('foldhost run --adopt FOLD' records the config's)", err))
	} else if err != nil {
		return nil, nil, err
	}
	if fc != nil {
		want := fold.NewOrigin(fc.Bucket, fc.Scope, time.Time{})
		if d := origin.Mismatch(want); hasOrigin && d != "" {
			warnings = append(warnings, fmt.Sprintf("the store in %s is of another source than fold %s (the store's %s): 'run' and 'export' refuse it", dir, fc.Name, d))
		}
	}
	if !hasOrigin {
		return nil, warnings, nil
	}
	return &origin, warnings, nil
}

// Raw is one raw entry, with the cursor the answer reflects.
type Raw struct {
	Cursor uint64 `json:"cursor"`
	httpapi.RawItem
}

// View is one view entry, with the cursor the answer reflects.
type View struct {
	Cursor uint64 `json:"cursor"`
	httpapi.ViewItem
}

// Get is the raw entry of key; ok false when there is none.
func Get(sn *fold.Snapshot, key string) (Raw, bool, error) {
	e, ok, err := sn.Get(key)
	if err != nil || !ok {
		return Raw{}, ok, err
	}
	return Raw{uint64(sn.Cursor().Rev), httpapi.NewRawItem([]byte(key), e.Rev, e.Value)}, true, nil
}

// ViewGet is the view entry of key; ok false when there is none.
func ViewGet(sn *fold.Snapshot, key string) (View, bool, error) {
	v, ok, err := sn.ViewGet([]byte(key))
	if err != nil || !ok {
		return View{}, ok, err
	}
	return View{uint64(sn.Cursor().Rev), httpapi.NewViewItem([]byte(key), v)}, true, nil
}

// Range writes the raw entries (view: the view's) whose key starts with
// prefix, at most limit (0: all), to w as the HTTP API's range answers
// are written: streamed, so memory does not grow with the fold.
func Range(w io.Writer, sn *fold.Snapshot, view bool, prefix string, limit int) error {
	rw := httpapi.NewRangeWriter(w, limit, uint64(sn.Cursor().Rev), prefix)
	var err error
	if view {
		err = sn.ViewRange([]byte(prefix), func(k, v []byte) error { return rw.Item(httpapi.NewViewItem(k, v)) })
	} else {
		err = sn.RawRange(prefix, func(k []byte, rev protocol.Revision, v []byte) error {
			return rw.Item(httpapi.NewRawItem(k, rev, v))
		})
	}
	if err != nil && !errors.Is(err, httpapi.ErrRangeLimit) {
		return err
	}
	return rw.End()
}
