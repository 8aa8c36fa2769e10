package foldrun

import (
	"context"
	"errors"
	"fmt"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/wasm"
)

var _ httpapi.Querier = (*Fold)(nil)

// noQueries is why the fold answers no query when it has no plugin.
func (f *Fold) noQueries() error {
	if f.waitFor == nil {
		return fmt.Errorf("%w: it folds raw entries only (no plugin)", httpapi.ErrNoQueries)
	}
	return fmt.Errorf("%w: it waits for its plugin module", httpapi.ErrNoQueries)
}

// QueryLookup implements httpapi.Querier: the queries of the module the
// fold's next batch runs (a reloaded one at once).
func (f *Fold) QueryLookup(name string) (httpapi.QueryInfo, error) {
	p := f.plug()
	if p == nil {
		return httpapi.QueryInfo{}, f.noQueries()
	}
	qs, id := p.Queries()
	if id.SHA256 == "" { // closed: the fold is stopping
		return httpapi.QueryInfo{}, fmt.Errorf("its plugin is closed: %w", fold.ErrClosed)
	}
	if len(qs) == 0 {
		return httpapi.QueryInfo{}, fmt.Errorf("%w: its plugin %s %s (%s, ABI %s) declares none (ABI minor 2: foldhost_queries)",
			httpapi.ErrNoQueries, id.Name, id.Version, shortSHA(id.SHA256), id.ABI)
	}
	for _, q := range qs {
		if q.Name == name {
			return httpapi.QueryInfo{ContentType: q.ContentType, MaxInput: p.MaxQueryInputBytes()}, nil
		}
	}
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	return httpapi.QueryInfo{}, fmt.Errorf("%w: its plugin %s %s declares %v", httpapi.ErrUnknownQuery, id.Name, id.Version, names)
}

// QueryViewSchema is the view schema of the module the fold's queries run
// (false: no plugin, or closed).
func (f *Fold) QueryViewSchema() (uint32, bool) {
	p := f.plug()
	if p == nil {
		return 0, false
	}
	_, id := p.Queries()
	return id.ViewSchema, id.SHA256 != ""
}

// Query implements httpapi.Querier: the query runs on the plugin's query
// instances, never the one batches apply on.
func (f *Fold) Query(ctx context.Context, sn *fold.Snapshot, name string, input []byte) (httpapi.QueryAnswer, error) {
	return f.QueryOver(ctx, []*fold.Snapshot{sn}, sn, name, input)
}

// QueryOver runs the query name over rd, which reads the snapshots sns:
// one fold's, or a partitioned fold's units read as one fold (their
// views are each partition's share). A snapshot whose views another view
// schema wrote (a rebuild's switch, just before its module reaches the
// live plugin; a unit still on the previous module in a rollout) is
// refused: the module would misread them. A read rd refuses (a
// *wasm.ReadRefusal) fails the query with the refusal's error.
func (f *Fold) QueryOver(ctx context.Context, sns []*fold.Snapshot, rd wasm.QueryReader, name string, input []byte) (httpapi.QueryAnswer, error) {
	p := f.plug()
	if p == nil {
		return httpapi.QueryAnswer{}, f.noQueries()
	}
	_, mod := p.Queries()
	for _, sn := range sns {
		if b, ok, err := sn.PluginIdentity(); err != nil {
			return httpapi.QueryAnswer{}, err
		} else if ok {
			if views, err := fold.ParsePluginIdentity(b); err == nil && views.ViewSchema != mod.ViewSchema {
				return httpapi.QueryAnswer{}, fmt.Errorf("%w: the views at cursor %d are view schema %d, the plugin's is %d (a view rebuild or its switch is under way; ask again)",
					httpapi.ErrQueryStale, sn.Cursor().Rev, views.ViewSchema, mod.ViewSchema)
			}
		}
	}
	a, err := p.Query(ctx, name, input, rd)
	var ie *wasm.QueryInputError
	var pe *wasm.PluginError
	switch {
	case err == nil:
		return httpapi.QueryAnswer{Body: a.Body, ContentType: a.ContentType, Module: a.Module.SHA256}, nil
	case errors.Is(err, wasm.ErrPluginClosed):
		return httpapi.QueryAnswer{}, fmt.Errorf("%v: %w", err, fold.ErrClosed)
	case errors.Is(err, wasm.ErrNoQueries):
		return httpapi.QueryAnswer{}, fmt.Errorf("%w: %v", httpapi.ErrNoQueries, err)
	case errors.Is(err, wasm.ErrUnknownQuery):
		return httpapi.QueryAnswer{}, fmt.Errorf("%w: %v", httpapi.ErrUnknownQuery, err)
	case errors.As(err, &ie):
		return httpapi.QueryAnswer{}, fmt.Errorf("%w: %v", httpapi.ErrQueryInputTooLarge, err)
	case errors.As(err, &pe) && pe.Kind == wasm.KindGuest:
		return httpapi.QueryAnswer{}, fmt.Errorf("%w: %v", httpapi.ErrQueryRefused, err)
	case errors.As(err, &pe) && pe.Kind == wasm.KindRefused:
		return httpapi.QueryAnswer{}, pe.Err // the reader's reason, as it wrapped it
	}
	return httpapi.QueryAnswer{}, err
}
