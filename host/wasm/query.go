package wasm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
)

// Queries (ABI minor 2): a plugin's named, read-only queries run on
// instances of their own, at most Options.QueryInstances at once per
// Plugin, kept between queries; apply keeps its own instance and never
// waits for a query. A query runs the module the next batch runs (so one
// reloaded is queried at once, before a batch ran it), reads one snapshot
// (read and range), and cannot write: its output is an answer, nothing
// else.

// Errors of Query, for the caller to tell apart (errors.Is).
var (
	// ErrNoQueries: the module declares no queries (no foldhost_queries
	// export, or an empty list).
	ErrNoQueries = errors.New("the plugin declares no queries")
	// ErrUnknownQuery: the module declares queries, not this one.
	ErrUnknownQuery = errors.New("no such query")
	// ErrPluginClosed: the Plugin was closed or released.
	ErrPluginClosed = errors.New("wasm: plugin closed")
)

// QueryInputError is a query input over Limits.MaxQueryInputBytes.
type QueryInputError struct{ Size, Limit int }

func (e *QueryInputError) Error() string {
	return fmt.Sprintf("query input of %d bytes, over the limit of %d (%s)", e.Size, e.Limit, KeyMaxQueryInput)
}

// Answer is a query's answer.
type Answer struct {
	Body        []byte // the caller's
	ContentType string // as the query declares it; "" for application/octet-stream
	Module      fold.PluginIdentity
}

// queryPool holds the query instances of a Plugin.
type queryPool struct {
	slots  chan struct{} // one per query running; cap Options.QueryInstances
	mu     sync.Mutex
	idle   []*queryInstance
	closed bool
}

type queryInstance struct {
	in    *instance
	st    *callState
	m     *Module
	calls int
}

func (q *queryPool) init(n int) { q.slots = make(chan struct{}, n) }

// put keeps qi for the next query unless the pool closed or qi's module
// is no longer the one queries run (want).
func (q *queryPool) put(ctx context.Context, qi *queryInstance, want *Module) {
	q.mu.Lock()
	if !q.closed && qi.m == want && len(q.idle) < cap(q.slots) {
		q.idle = append(q.idle, qi)
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	qi.in.close(ctx)
}

// take returns an idle instance of m, closing idle ones of other modules.
func (q *queryPool) take(ctx context.Context, m *Module) *queryInstance {
	q.mu.Lock()
	var got *queryInstance
	var stale []*queryInstance
	keep := q.idle[:0]
	for _, qi := range q.idle {
		switch {
		case qi.m != m:
			stale = append(stale, qi)
		case got == nil:
			got = qi
		default:
			keep = append(keep, qi)
		}
	}
	clear(q.idle[len(keep):])
	q.idle = keep
	q.mu.Unlock()
	for _, qi := range stale {
		qi.in.close(ctx)
	}
	return got
}

// close closes the idle instances; instances in use are closed when their
// query ends.
func (q *queryPool) close(ctx context.Context) {
	q.mu.Lock()
	idle := q.idle
	q.idle, q.closed = nil, true
	q.mu.Unlock()
	for _, qi := range idle {
		qi.in.close(ctx)
	}
}

// Queries returns the queries of the module queries run now (the one the
// next batch runs) and its identity.
func (p *Plugin) Queries() ([]abi.Query, fold.PluginIdentity) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.upcoming()
	if m == nil {
		return nil, fold.PluginIdentity{}
	}
	return m.Queries, m.Identity()
}

// upcoming is the module the next batch runs; p.mu held.
func (p *Plugin) upcoming() *Module {
	if p.next != nil {
		return p.next
	}
	return p.current
}

// findQuery looks name up in m's queries.
func findQuery(m *Module, name string) (abi.Query, error) {
	if len(m.Queries) == 0 {
		return abi.Query{}, fmt.Errorf("%w: module %s (%s %s) exports no %s (ABI minor 2)",
			ErrNoQueries, m.Short(), m.Info.Name, m.Info.Version, abi.ExportQueries)
	}
	for _, q := range m.Queries {
		if q.Name == name {
			return q, nil
		}
	}
	names := make([]string, len(m.Queries))
	for i, q := range m.Queries {
		names[i] = q.Name
	}
	return abi.Query{}, fmt.Errorf("%w %q: module %s (%s %s) declares %v", ErrUnknownQuery, name, m.Short(), m.Info.Name, m.Info.Version, names)
}

// Query runs the query name with input against sn (which the caller
// keeps and closes), on a query instance: the module the next batch runs,
// under the limits of an apply (its deadline, memory limit, MaxOutputBytes
// for the answer, the read bounds for its reads). It waits for a free
// query instance as long as ctx allows.
//
// Errors: ErrNoQueries, ErrUnknownQuery, a *QueryInputError before
// anything runs; a *PluginError of KindGuest when the plugin answered
// status 1 (the instance is kept: the guest returned normally); any other
// *PluginError (a trap, a timeout, a limit, a malformed answer) discards
// the instance, and the next query gets a fresh one. A query is never
// retried.
func (p *Plugin) Query(ctx context.Context, name string, input []byte, sn QueryReader) (Answer, error) {
	p.mu.Lock()
	m := p.upcoming()
	if m == nil || p.closing {
		p.mu.Unlock()
		return Answer{}, ErrPluginClosed
	}
	p.running.Add(1)
	defer p.running.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.stop, cancel)() // Close cancels it
	q, err := findQuery(m, name)
	if err != nil {
		p.mu.Unlock()
		return Answer{}, err
	}
	if !m.acquire() {
		p.mu.Unlock()
		return Answer{}, ErrPluginClosed
	}
	p.mu.Unlock()
	defer m.release(ctx)
	o := &p.r.opts
	if len(input) > o.MaxQueryInputBytes {
		return Answer{}, &QueryInputError{Size: len(input), Limit: o.MaxQueryInputBytes}
	}
	select {
	case p.queries.slots <- struct{}{}:
	case <-ctx.Done():
		return Answer{}, ctx.Err()
	}
	defer func() { <-p.queries.slots }()

	qi := p.queries.take(ctx, m)
	if qi == nil {
		st := p.r.newCallState(m.Short())
		st.start(o.CallTimeout) // instantiation runs _initialize
		in, err := p.r.instantiate(withCallState(ctx, st), m)
		if err != nil {
			return Answer{}, &PluginError{Kind: KindTrap, Module: m.Short(), Err: fmt.Errorf("instantiate: %w", err)}
		}
		qi = &queryInstance{in: in, st: st, m: m}
	}
	body, err := p.runQuery(ctx, qi, name, input, sn)
	var ge *abi.GuestError
	if err != nil && !errors.As(err, &ge) {
		qi.in.close(ctx) // never reuse an instance after a failure
		if p.stop.Err() != nil {
			return Answer{}, ErrPluginClosed // cut short by Close
		}
		return Answer{}, err
	}
	p.mu.Lock()
	want := p.upcoming()
	p.mu.Unlock()
	p.queries.put(ctx, qi, want)
	if err != nil {
		return Answer{}, &PluginError{Kind: KindGuest, Module: m.Short(), Err: ge}
	}
	return Answer{Body: body, ContentType: q.ContentType, Module: m.Identity()}, nil
}

// runQuery makes one query call on qi; the answer is copied out of guest
// memory. A status-1 answer is returned as the *abi.GuestError.
func (p *Plugin) runQuery(ctx context.Context, qi *queryInstance, name string, input []byte, sn QueryReader) ([]byte, error) {
	o := &p.r.opts
	st, in := qi.st, qi.in
	st.fold, st.snap = sn, sn
	defer func() { st.fold, st.snap = nil, nil }() // the snapshot is the caller's, for this call only
	st.start(o.CallTimeout)                        // one deadline for write, query and gc
	if cc, ok := sn.(CallClock); ok {
		cc.CallStarted(st.deadline)
	}
	cctx := withCallState(ctx, st)
	if o.containment == containCloseOnDone {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, o.CallTimeout)
		defer cancel()
	}
	buf := make([]byte, 0, len(name)+len(input))
	buf = append(append(buf, name...), input...)
	if err := in.write(cctx, buf); err != nil {
		return nil, err
	}
	packed, err := in.call2(cctx, in.query, uint64(len(name)), uint64(len(input)))
	if err != nil {
		return nil, err
	}
	raw, err := in.read(packed)
	if err != nil {
		return nil, err
	}
	if len(raw) > o.MaxOutputBytes+8 {
		return nil, &PluginError{Kind: KindLimit, Module: qi.m.Short(),
			Err: &LimitError{What: "a query answer record", Size: int64(len(raw)), Limit: int64(o.MaxOutputBytes), Unit: "bytes", Key: KeyMaxOutput}}
	}
	ans, err := abi.DecodeQueryOutput(raw, o.MaxErrorBytes)
	var ge *abi.GuestError
	switch {
	case errors.As(err, &ge):
		return nil, ge
	case err != nil:
		return nil, &PluginError{Kind: KindMalformed, Module: qi.m.Short(), Err: err, Stderr: in.stderr.String()}
	}
	body := append([]byte(nil), ans...)
	qi.calls++
	if in.gc != nil && qi.calls%o.GCEvery == 0 {
		if _, err := in.call(cctx, in.gc, 0); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// MaxQueryInputBytes is the bound on a query's input (Limits).
func (p *Plugin) MaxQueryInputBytes() int { return p.r.opts.MaxQueryInputBytes }

// QueryInstances is how many of p's queries run at once
// (Options.QueryInstances).
func (p *Plugin) QueryInstances() int { return cap(p.queries.slots) }
