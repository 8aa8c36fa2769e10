package host

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/foldhost/foldhost/host/httpapi"
)

// AdminOptions configure the host's admin service over NATS: a NATS micro
// service ("foldhost", `nats micro ls`) with the HTTP API's actions.
type AdminOptions struct {
	// NATS serves the service on the host's NATS connection.
	NATS bool
	// Subject is the endpoints' prefix; default DefaultAdminSubject. The
	// endpoints are <Subject>.<Node>.<action>.
	Subject string
	// Node names this host in the subjects and the service's metadata;
	// default Artifacts.Holder, else "node". NATS subject tokens only.
	Node string
	// AllowAnonymous serves mutating actions to requests that carry no
	// caller identity (see the README's "Admin over NATS"). Off, they are
	// refused: the caller's identity comes from the transport only.
	AllowAnonymous bool
}

// DefaultAdminSubject prefixes the admin service's endpoints.
const DefaultAdminSubject = "foldhost.admin"

// adminRequest is an admin endpoint's request body (JSON; empty for the
// host-wide ones).
type adminRequest struct {
	Fold  string `json:"fold"`
	Force bool   `json:"force,omitempty"` // export
	Key   string `json:"key,omitempty"`   // replay (of dead letters)
}

// callerInfo is the part of the server's Nats-Request-Info header the
// audit needs: set by the server on a request that crossed a service
// import with share: true, never taken from a request field.
type callerInfo struct {
	Account string `json:"acc"`
	User    string `json:"user"`
	Name    string `json:"name"`
	Host    string `json:"host"`
}

// requestInfoHeader is the header the NATS server stamps (server.ClientInfoHdr).
const requestInfoHeader = "Nats-Request-Info"

// serveAdmin starts the admin service; the returned func stops it.
func (h *Host) serveAdmin(ctx context.Context) (func(), error) {
	o := h.o.Admin
	node := o.Node
	svc, err := micro.AddService(h.nc, micro.Config{
		Name:        "foldhost",
		Version:     "0.1.0",
		Description: "foldhost admin: fold status and actions (pause, resume, reload, rebuild, export, dead letters)",
		Metadata:    map[string]string{"node": node, "subject": o.Subject + "." + node},
		// Every node answers its own subjects: no load balancing.
		QueueGroupDisabled: true,
	})
	if err != nil {
		return nil, fmt.Errorf("admin service: %w", err)
	}
	g := svc.AddGroup(o.Subject + "." + node)
	type endpoint struct {
		name     string
		mutating bool
		do       func(ctx context.Context, f *Fold, req adminRequest) (any, error)
	}
	status := func(_ context.Context, f *Fold, _ adminRequest) (any, error) { return f.Status(), nil }
	ok := func(action string) func(*Fold, error) (any, error) {
		return func(f *Fold, err error) (any, error) {
			if err != nil {
				return nil, err
			}
			st := f.Status()
			return map[string]any{"fold": f.o.Name, "action": action, "state": st.State, "cursor": st.Cursor}, nil
		}
	}
	endpoints := []endpoint{
		{"status", false, status},
		{"deadletter", false, func(_ context.Context, f *Fold, _ adminRequest) (any, error) { return f.DeadLetters() }},
		{"pause", true, func(_ context.Context, f *Fold, _ adminRequest) (any, error) { return ok("pause")(f, f.Pause()) }},
		{"resume", true, func(_ context.Context, f *Fold, _ adminRequest) (any, error) { return ok("resume")(f, f.Resume()) }},
		{"reload", true, func(ctx context.Context, f *Fold, _ adminRequest) (any, error) { return ok("reload")(f, f.Reload(ctx)) }},
		{"rebuild", true, func(ctx context.Context, f *Fold, _ adminRequest) (any, error) {
			return ok("rebuild")(f, f.Rebuild(ctx))
		}},
		{"export", true, func(ctx context.Context, f *Fold, req adminRequest) (any, error) { return f.Export(ctx, req.Force) }},
		{"replay", true, func(ctx context.Context, f *Fold, req adminRequest) (any, error) {
			return f.ReplayDeadLetters(ctx, req.Key)
		}},
	}
	for _, ep := range endpoints {
		err := g.AddEndpoint(ep.name, micro.HandlerFunc(func(r micro.Request) {
			h.adminRequest(ctx, r, ep.name, ep.mutating, ep.do)
		}))
		if err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("admin service: endpoint %s: %w", ep.name, err)
		}
	}
	if err := g.AddEndpoint("folds", micro.HandlerFunc(func(r micro.Request) {
		out := make([]httpapi.Status, 0, len(h.folds))
		for _, f := range h.folds {
			out = append(out, f.Status())
		}
		_ = r.RespondJSON(map[string]any{"node": node, "folds": out})
	})); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("admin service: endpoint folds: %w", err)
	}
	h.log.Info("admin service on NATS", "subject", o.Subject+"."+node+".>", "allow_anonymous", o.AllowAnonymous)
	return func() { _ = svc.Stop() }, nil
}

// adminRequest serves one request of a fold endpoint: it decodes the body,
// finds the fold, checks the caller for a mutating action, runs it and
// answers (errors as micro errors: 400, 403, 404, 409, 422, 500), auditing
// every mutating one.
func (h *Host) adminRequest(ctx context.Context, r micro.Request, action string, mutating bool,
	do func(context.Context, *Fold, adminRequest) (any, error)) {
	var req adminRequest
	if len(r.Data()) > 0 {
		if err := json.Unmarshal(r.Data(), &req); err != nil {
			_ = r.Error("400", "the request body must be JSON like {\"fold\":\"NAME\"}: "+err.Error(), nil)
			return
		}
	}
	f := h.Fold(req.Fold)
	if f == nil {
		_ = r.Error("404", fmt.Sprintf("no fold %q on this node", req.Fold), nil)
		return
	}
	var who callerInfo
	if raw := r.Headers().Get(requestInfoHeader); raw != "" {
		_ = json.Unmarshal([]byte(raw), &who)
	}
	if mutating {
		if who.Account == "" && !h.o.Admin.AllowAnonymous {
			h.log.Warn("admin action refused: the request carries no caller identity", "action", action, "fold", req.Fold, "subject", r.Subject())
			_ = r.Error("403", "admin actions need a caller identity from the NATS server (a service import with share: true), or allow_anonymous", nil)
			return
		}
	}
	res, err := do(ctx, f, req)
	if mutating {
		args := []any{"action", action, "fold", f.o.Name, "via", "nats", "account", who.Account, "user", who.User, "client", who.Name}
		if err != nil {
			h.log.Warn("admin action failed", append(args, "err", err)...)
		} else {
			h.log.Info("admin action", args...)
		}
	}
	if err != nil {
		code := httpapi.AdminStatus(err, action == "reload" || action == "rebuild")
		_ = r.Error(strconv.Itoa(code), strings.TrimSpace(err.Error()), nil)
		return
	}
	_ = r.RespondJSON(res)
}
