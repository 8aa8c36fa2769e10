package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// Plugin is a module running as a fold.Plugin.
type Plugin struct {
	r *Runtime

	mu      sync.Mutex // guards next, status
	next    *Module    // swapped in at the next batch boundary
	status  Status
	current *Module // used by Apply only

	in    *instance
	enc   abi.BatchEncoder
	state *callState
	views []fold.ViewMutation
	spans []span
	arena []byte
	effs  []fold.Effect
	espan []effectSpan
	batch []fold.Update // Apply's, during the call: what effects name

	queries queryPool // the query instances (query.go)

	// Queries in flight: Close cancels them (stop) and waits for them
	// (running) before it releases anything: their calls read and write
	// guest memory the runtime's close would unmap under them.
	running    sync.WaitGroup
	stop       context.Context
	stopCancel context.CancelFunc
	closing    bool // guarded by mu
}

// effectSpan locates one effect in Plugin.arena: its subject and payload,
// and its headers as spans[h0:h1] (name as the key, value as the value).
type effectSpan struct {
	s0, s1, p0, p1 int
	h0, h1         int
	rev            protocol.Revision // the update it names (0: none)
}

// updateRevOf is the revision of the update in batch that e names (ABI
// minor 3), 0 when it names none; an index past the batch is malformed
// output.
func updateRevOf(batch []fold.Update, e *abi.Effect) (protocol.Revision, error) {
	switch {
	case e.Update < 0:
		return 0, nil
	case e.Update >= len(batch):
		return 0, fmt.Errorf("an effect names update %d of a batch of %d", e.Update, len(batch))
	}
	return batch[e.Update].Rev, nil
}

// span locates one mutation's key and value in Plugin.arena.
type span struct{ k0, k1, v0, v1 int }

var _ fold.Plugin = (*Plugin)(nil)

// Status is what operators see of a plugin.
type Status struct {
	// Module is the module the next batch runs (swapped in or current).
	Module       fold.PluginIdentity
	Path         string
	Loaded       time.Time
	Failures     int    // consecutive failed attempts
	LastError    string // the last failure, including a refused reload
	ReloadFailed bool   // the last reload attempt was refused; the old module runs
	// LastReload is the last reload attempt that was a verdict on a file
	// (a refusal, or a new module accepted); nil before the first.
	LastReload *Reload
	// Reload verdicts since the Plugin was made.
	ReloadsAccepted, ReloadsRefused uint64
}

// Reload is the outcome of one reload attempt.
type Reload struct {
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"`          // ReloadAccepted or ReloadRefused
	Module  string    `json:"module,omitempty"` // sha256 of the accepted module
	Reason  string    `json:"reason,omitempty"` // why it was refused
}

// Reload outcomes.
const (
	ReloadAccepted = "accepted" // validated; swapped in at the next batch
	ReloadRefused  = "refused"  // failed validation; the running module stays
)

// NewPlugin runs m. The Plugin owns m from now on: Close (or a later swap)
// releases it.
func (r *Runtime) NewPlugin(m *Module) *Plugin {
	p := &Plugin{r: r, current: m, state: r.newCallState(m.Short())}
	p.stop, p.stopCancel = context.WithCancel(context.Background())
	p.queries.init(r.opts.QueryInstances)
	p.setStatus(m)
	return p
}

func (p *Plugin) setStatus(m *Module) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status.Module = m.Identity()
	p.status.Path = m.Path
	p.status.Loaded = time.Now()
	p.status.ReloadFailed = false
}

// Status returns a copy of the plugin's status.
func (p *Plugin) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Swap makes m the module for the next batch; the batch in flight (if any)
// finishes on the old one, which is then released. m must come from
// Runtime.Load (validated); the Plugin owns it from now on. A module
// swapped in but not yet used is released when another replaces it.
//
// The status names m from now on: the fold runs nothing else from here (a
// fold with nothing to fold would otherwise name the old module until its
// next write).
func (p *Plugin) Swap(m *Module) { p.swap(m, false) }

// swapUnlessUpcoming swaps m in as Swap does, unless it is the module the
// next batch runs already (the same bytes), and reports whether it did. The
// look and the swap are one step: two reloads of one file at once (a file
// watcher's and an operator's) swap it in, and count it, once
// (TestConcurrentReloadsOfOneFileCountOneSwap).
func (p *Plugin) swapUnlessUpcoming(m *Module) bool { return p.swap(m, true) }

// swap makes m the next batch's module and names it in the status, unless
// (with unlessUpcoming) it is that module already.
func (p *Plugin) swap(m *Module, unlessUpcoming bool) bool {
	p.mu.Lock()
	up := p.current
	if p.next != nil {
		up = p.next
	}
	if unlessUpcoming && up != nil && up.SHA256 == m.SHA256 {
		p.mu.Unlock()
		return false
	}
	old := p.next
	p.next = m
	p.status.Module = m.Identity()
	p.status.Path = m.Path
	p.mu.Unlock()
	old.Close(context.Background())
	return true
}

// ReloadFailed records a refused reload: the old module keeps running.
func (p *Plugin) ReloadFailed(err error) {
	p.mu.Lock()
	p.status.LastError = err.Error()
	p.status.ReloadFailed = true
	rl := Reload{At: time.Now(), Outcome: ReloadRefused, Reason: err.Error()}
	p.status.LastReload = &rl
	p.status.ReloadsRefused++
	p.mu.Unlock()
	p.r.opts.notifyReload(rl)
}

// reloadAccepted records an accepted reload (m swapped in at the next
// batch).
func (p *Plugin) reloadAccepted(sha string) {
	p.mu.Lock()
	rl := Reload{At: time.Now(), Outcome: ReloadAccepted, Module: sha}
	p.status.LastReload = &rl
	p.status.ReloadsAccepted++
	p.status.ReloadFailed = false
	p.mu.Unlock()
	p.r.opts.notifyReload(rl)
}

// Upcoming is the identity of the module the next batch runs: the one
// swapped in, or the current one.
func (p *Plugin) Upcoming() fold.PluginIdentity {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next != nil {
		return p.next.Identity()
	}
	return p.current.Identity()
}

// Running is the identity of the module batches run now (Upcoming's
// module takes over at the next batch boundary): the one a failed batch
// failed on.
func (p *Plugin) Running() fold.PluginIdentity {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == nil {
		return fold.PluginIdentity{}
	}
	return p.current.Identity()
}

// Release ends the Plugin and hands its module (the one the next batch
// would run) to the caller, who owns it from now on. It must not run
// concurrently with Apply; the Plugin is unusable afterwards.
func (p *Plugin) Release(ctx context.Context) *Module {
	p.closeInstance(ctx)
	p.closeQueries(ctx)
	p.mu.Lock()
	cur, next := p.current, p.next
	p.current, p.next = nil, nil
	p.mu.Unlock()
	if next != nil {
		cur.Close(ctx)
		return next
	}
	return cur
}

// Close releases the instance and the modules the Plugin owns. Queries
// in flight are cancelled and waited for first (their calls end at their
// next check of the context, within the call timeout); queries asked
// from now on fail with ErrPluginClosed. It must not run concurrently
// with Apply.
func (p *Plugin) Close(ctx context.Context) {
	p.mu.Lock()
	p.closing = true // no query starts from now on
	p.mu.Unlock()
	p.stopCancel()
	p.running.Wait() // each ends at its call's next check of its context
	p.closeInstance(ctx)
	p.closeQueries(ctx)
	p.mu.Lock()
	cur, next := p.current, p.next
	p.current, p.next = nil, nil
	p.mu.Unlock()
	cur.Close(ctx)
	next.Close(ctx)
}

// closeQueries closes the idle query instances and keeps the ones in use
// from being kept (Release and Close).
func (p *Plugin) closeQueries(ctx context.Context) { p.queries.close(ctx) }

func (p *Plugin) closeInstance(ctx context.Context) {
	if p.in != nil {
		p.in.close(ctx)
		p.in = nil
	}
}

// Apply implements fold.Plugin: one guest call for the batch, retried on a
// fresh instance up to Options.Retries times. The returned Output aliases
// buffers reused by the next Apply.
func (p *Plugin) Apply(ctx context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	p.mu.Lock()
	if p.next != nil {
		old := p.current
		p.current, p.next = p.next, nil
		p.mu.Unlock()
		p.closeInstance(ctx) // batch boundary: the old instance goes, and its module
		old.Close(ctx)
		p.state.module = p.current.Short()
		p.setStatus(p.current)
		p.r.opts.Logger.Info("wasm: plugin swapped", "module", p.current.Short(), "name", p.current.Info.Name, "version", p.current.Info.Version)
	} else {
		p.mu.Unlock()
	}
	p.enc.Reset()
	for i := range batch {
		u := &batch[i]
		p.enc.Add(opOf(u.Op), uint64(u.Rev), u.Time, u.Key, u.Value)
	}
	p.batch = batch
	defer func() { p.batch = nil }()
	var err error
	for attempt := 0; attempt <= p.r.opts.Retries; attempt++ {
		var out fold.Output
		out, err = p.try(ctx, r)
		if err == nil {
			p.mu.Lock()
			p.status.Failures = 0
			p.mu.Unlock()
			return out, nil
		}
		p.closeInstance(ctx) // never reuse an instance after a failure
		p.mu.Lock()
		p.status.Failures++
		p.status.LastError = err.Error()
		p.mu.Unlock()
		var ge *abi.GuestError
		if errors.As(err, &ge) || ctx.Err() != nil || attempt == p.r.opts.Retries {
			break // the plugin's own verdict, shutdown, or no retry left
		}
		p.r.opts.Logger.Warn("wasm: plugin call failed; retrying on a fresh instance",
			"module", p.current.Short(), "retry", attempt+1, "of", p.r.opts.Retries, "err", err)
	}
	return fold.Output{}, err
}

// opOf is the one conversion of the fold's update op into the ABI's.
func opOf(op fold.Op) byte {
	switch op {
	case fold.OpDelete:
		return abi.OpDelete
	case fold.OpPurge:
		return abi.OpPurge
	}
	return abi.OpPut
}

func (p *Plugin) try(ctx context.Context, r fold.Reader) (fold.Output, error) {
	if p.in == nil {
		p.state.start(p.r.opts.CallTimeout) // instantiation runs _initialize
		in, err := p.r.instantiate(withCallState(ctx, p.state), p.current)
		if err != nil {
			return fold.Output{}, &PluginError{Kind: KindTrap, Module: p.current.Short(), Err: fmt.Errorf("instantiate: %w", err)}
		}
		p.in = in
	}
	p.state.fold = r
	defer func() { p.state.fold = nil }() // the Reader is the caller's, for this call only
	p.state.start(p.r.opts.CallTimeout)   // one deadline for write, apply and gc
	cctx := withCallState(ctx, p.state)
	if p.r.opts.containment == containCloseOnDone {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, p.r.opts.CallTimeout)
		defer cancel()
	}
	batch := p.enc.Bytes()
	if err := p.in.write(cctx, batch); err != nil {
		return fold.Output{}, err
	}
	packed, err := p.in.call(cctx, p.in.apply, uint64(len(batch)))
	if err != nil {
		return fold.Output{}, err
	}
	raw, err := p.in.read(packed)
	if err != nil {
		return fold.Output{}, err
	}
	if err := p.checkOutput(raw); err != nil {
		return fold.Output{}, err
	}
	// Copy the mutations out of guest memory into one reusable arena: the
	// next call into the guest may overwrite or move them.
	p.views, p.spans, p.arena = p.views[:0], p.spans[:0], p.arena[:0]
	p.effs, p.espan = p.effs[:0], p.espan[:0]
	o := &p.r.opts
	rejected, err := abi.DecodeOutputEffects(raw, o.MaxErrorBytes, func(op byte, key, value []byte) error {
		// What the store would refuse is the plugin's fault, caught here:
		// a malformed output (retried on a fresh instance, then failing
		// the batch), never a commit failure.
		if len(key) == 0 {
			return errors.New("a view mutation with an empty key (view keys must not be empty)")
		}
		if len(key) > o.MaxViewKeyBytes {
			return &LimitError{What: "a view key", Size: int64(len(key)), Limit: int64(o.MaxViewKeyBytes), Unit: "bytes", Key: KeyMaxViewKey}
		}
		if len(value) > o.MaxViewValueBytes {
			return &LimitError{What: "a view value", Size: int64(len(value)), Limit: int64(o.MaxViewValueBytes), Unit: "bytes", Key: KeyMaxViewValue}
		}
		s := span{k0: len(p.arena)}
		p.arena = append(p.arena, key...)
		s.k1, s.v0 = len(p.arena), len(p.arena)
		p.arena = append(p.arena, value...)
		s.v1 = len(p.arena)
		p.spans = append(p.spans, s)
		m := fold.ViewMutation{Op: fold.ViewPut}
		if op == abi.MutDelete {
			m.Op = fold.ViewDelete
		}
		p.views = append(p.views, m)
		return nil
	}, func(e *abi.Effect) error {
		// The decoder validated the subject and headers (malformed output
		// otherwise); the bounds are the host's.
		if len(p.espan) >= o.MaxEffects {
			return &LimitError{What: "an output", Size: int64(len(p.espan) + 1), Limit: int64(o.MaxEffects), Unit: "effects", Key: KeyMaxEffects}
		}
		if n := e.Size(); n > o.MaxEffectBytes {
			return &LimitError{What: "an effect (subject, headers and payload)", Size: int64(n), Limit: int64(o.MaxEffectBytes), Unit: "bytes", Key: KeyMaxEffect}
		}
		rev, err := updateRevOf(p.batch, e)
		if err != nil {
			return err
		}
		s := effectSpan{s0: len(p.arena), h0: len(p.spans), rev: rev}
		p.arena = append(p.arena, e.Subject...)
		s.s1 = len(p.arena)
		for _, h := range e.Headers { // header spans share p.spans: k = name, v = value
			hs := span{k0: len(p.arena)}
			p.arena = append(p.arena, h.Name...)
			hs.k1, hs.v0 = len(p.arena), len(p.arena)
			p.arena = append(p.arena, h.Value...)
			hs.v1 = len(p.arena)
			p.spans = append(p.spans, hs)
		}
		s.h1 = len(p.spans)
		s.p0 = len(p.arena)
		p.arena = append(p.arena, e.Payload...)
		s.p1 = len(p.arena)
		p.espan = append(p.espan, s)
		return nil
	})
	if err != nil {
		var ge *abi.GuestError
		var le *LimitError
		switch {
		case errors.As(err, &ge):
			return fold.Output{}, &PluginError{Kind: KindGuest, Module: p.current.Short(), Err: ge, Stderr: p.in.stderr.String()}
		case errors.As(err, &le):
			return fold.Output{}, &PluginError{Kind: KindLimit, Module: p.current.Short(), Err: le}
		}
		return fold.Output{}, &PluginError{Kind: KindMalformed, Module: p.current.Short(), Err: err, Stderr: p.in.stderr.String()}
	}
	for i, s := range p.spans[:len(p.views)] { // the arena may have moved while growing
		p.views[i].Key = p.arena[s.k0:s.k1:s.k1]
		if p.views[i].Op == fold.ViewPut {
			p.views[i].Value = p.arena[s.v0:s.v1:s.v1]
		}
	}
	for _, s := range p.espan {
		e := fold.Effect{UpdateRev: s.rev, Subject: string(p.arena[s.s0:s.s1]), Payload: p.arena[s.p0:s.p1:s.p1]}
		if s.h1 > s.h0 {
			e.Headers = make([]fold.EffectHeader, 0, s.h1-s.h0)
			for _, h := range p.spans[s.h0:s.h1] {
				e.Headers = append(e.Headers, fold.EffectHeader{Name: string(p.arena[h.k0:h.k1]), Value: string(p.arena[h.v0:h.v1])})
			}
		}
		p.effs = append(p.effs, e)
	}
	p.in.batches++
	if p.in.gc != nil && p.in.batches%p.r.opts.GCEvery == 0 {
		if _, err := p.in.call(cctx, p.in.gc, 0); err != nil {
			return fold.Output{}, err
		}
	}
	return fold.Output{Views: p.views, Rejected: rejected, Effects: p.effs, Identity: p.current.identity}, nil
}

// checkOutput refuses an ok output record over MaxOutputBytes, or whose
// header counts more than MaxViewMutations, before anything of it is
// copied. An error record is not held to MaxOutputBytes: only
// MaxErrorBytes of its message are copied.
func (p *Plugin) checkOutput(raw []byte) error {
	o := &p.r.opts
	if len(raw) < 12 {
		return nil // malformed: the decoder's to judge
	}
	if st := binary.LittleEndian.Uint32(raw); st != abi.StatusOK && st != abi.StatusOKEffects && st != abi.StatusOKUpdateEffects {
		return nil // an error record, or malformed: the decoder's to judge
	}
	le := &LimitError{What: "an output record", Size: int64(len(raw)), Limit: int64(o.MaxOutputBytes), Unit: "bytes", Key: KeyMaxOutput}
	if n := binary.LittleEndian.Uint32(raw[8:]); int64(n) > int64(o.MaxViewMutations) {
		le = &LimitError{What: "an output", Size: int64(n), Limit: int64(o.MaxViewMutations), Unit: "view mutations", Key: KeyMaxViewMutations}
	} else if len(raw) <= o.MaxOutputBytes {
		return nil
	}
	return &PluginError{Kind: KindLimit, Module: p.current.Short(), Err: le}
}
