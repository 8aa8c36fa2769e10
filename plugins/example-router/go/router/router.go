// Package router is the example-router plugin's logic (SPEC.md): route.<host>
// keys holding upstream lists become a resolved entry per host and a reverse
// index upstream -> hosts. It builds natively for tests and for wasip1 as
// the plugin (../main.go).
package router

import (
	"bytes"
	"errors"
	"strconv"

	foldhost "github.com/foldhost/foldhost/abi/sdk/go"

	"github.com/foldhost/foldhost/abi"
)

// Record is one parsed update.
type Record struct {
	host   []byte
	remove bool
	entry  []byte // resolved "addr=w,addr=w"
	addrs  [][]byte
}

// Router implements foldhost.Plugin[Record].
type Router struct {
	ups  []upstream
	keys [][]byte
	old  [][]byte
	buf  []byte
}

var _ foldhost.Plugin[Record] = (*Router)(nil)

// Info implements foldhost.Plugin.
func (*Router) Info() abi.Info {
	return abi.Info{Name: "example-router", Version: "1.0.0", ViewSchema: 1}
}

var routePrefix = []byte("route.")

// Parse implements foldhost.Plugin. Records keep copies (the update's bytes
// are only valid during Parse); reused records reuse their buffers.
func (r *Router) Parse(u *foldhost.Update, rec *Record) bool {
	if !bytes.HasPrefix(u.Key, routePrefix) || len(u.Key) == len(routePrefix) {
		return false
	}
	rec.host = append(rec.host[:0], u.Key[len(routePrefix):]...)
	rec.remove = u.Removes()
	rec.entry = rec.entry[:0]
	rec.addrs = rec.addrs[:0]
	if rec.remove {
		return true
	}
	var ok bool
	r.ups, ok = parseEntry(u.Value, r.ups)
	if !ok {
		return false
	}
	for i, up := range r.ups {
		if i > 0 {
			rec.entry = append(rec.entry, ',')
		}
		rec.entry = append(rec.entry, up.addr...)
		rec.entry = append(rec.entry, '=')
		rec.entry = strconv.AppendInt(rec.entry, int64(up.weight), 10)
	}
	return true
}

// Apply implements foldhost.Plugin.
func (r *Router) Apply(b *foldhost.Batch, recs []Record) error {
	// One batched read for every host's previous entry.
	r.keys = r.keys[:0]
	for i := range recs {
		r.buf = append(append(r.buf[:0], "host/"...), recs[i].host...)
		r.keys = append(r.keys, append([]byte(nil), r.buf...))
	}
	if err := b.Prefetch(r.keys...); err != nil {
		return errors.New("reading previous entries: " + err.Error())
	}
	for i := range recs {
		rec := &recs[i]
		hostKey := r.keys[i]
		prev, found, err := b.View(hostKey)
		if err != nil {
			return err
		}
		changed := found // a delete changes a host that had an entry
		if !rec.remove {
			changed = !found || !bytes.Equal(prev, rec.entry)
		}
		r.old = r.old[:0]
		if found {
			r.old = addrsOf(prev, r.old)
		}
		newAddrs := rec.addrs[:0]
		if !rec.remove {
			newAddrs = addrsOf(rec.entry, newAddrs)
		}
		for j, a := range r.old {
			if !contains(r.old[:j], a) && !contains(newAddrs, a) {
				b.IndexDelete(upstreamIndex, a, rec.host)
			}
		}
		for j, a := range newAddrs {
			if !contains(newAddrs[:j], a) && !contains(r.old, a) {
				b.IndexPut(upstreamIndex, a, rec.host)
			}
		}
		if rec.remove {
			b.Delete(hostKey)
		} else {
			b.Put(hostKey, rec.entry)
		}
		if changed {
			r.emitChanged(b, i, rec)
		}
	}
	return nil
}

var (
	changedSubject = []byte("route.changed")
	opHeader       = []byte("Route-Op")
	opPut          = []byte("put")
	opDelete       = []byte("delete")
)

// emitChanged emits the effect of a changed host (SPEC.md, "Effects"),
// naming the record it derives from: its id is then its update's.
func (r *Router) emitChanged(b *foldhost.Batch, i int, rec *Record) {
	r.buf = append(append(append(r.buf[:0], rec.host...), '\n'), rec.entry...)
	op := opPut
	if rec.remove {
		op = opDelete
	}
	b.EmitFor(i, changedSubject, r.buf, abi.Header{Name: opHeader, Value: op})
}

// upstreamIndex is the reverse index upstream/<addr>/<host>.
var upstreamIndex = []byte("upstream")

// addrsOf lists the addrs of a resolved entry, in order (aliasing entry).
func addrsOf(entry []byte, dst [][]byte) [][]byte {
	for len(entry) > 0 {
		item := entry
		if i := bytes.IndexByte(entry, ','); i >= 0 {
			item, entry = entry[:i], entry[i+1:]
		} else {
			entry = nil
		}
		if eq := bytes.LastIndexByte(item, '='); eq >= 0 {
			dst = append(dst, item[:eq])
		}
	}
	return dst
}

func contains(list [][]byte, a []byte) bool {
	for _, x := range list {
		if bytes.Equal(x, a) {
			return true
		}
	}
	return false
}
