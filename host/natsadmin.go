package host

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/textfmt"
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
	// caller identity the NATS server vouches for (see callerOf and the
	// docs/api.md, "Who may act"): none at all, or a Nats-Request-Info
	// header the host cannot tell from one a client wrote. Off, they are
	// refused (403), and the refusal is logged with its reason.
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

// callerInfo is the part of the Nats-Request-Info header the audit needs:
// the server sets it on a request that crossed an account's service
// import (account always; user, client name and host with share: true),
// replacing any header of that name the client wrote. Within one account
// the server sets nothing and the header is whatever the client wrote.
type callerInfo struct {
	Account string `json:"acc"`
	User    string `json:"user"`
	Name    string `json:"name"`
	Host    string `json:"host"`
}

// requestInfoHeader is the header the NATS server stamps (server.ClientInfoHdr).
const requestInfoHeader = "Nats-Request-Info"

// globalAccount is the NATS server's account for clients of a server
// without accounts (with or without authentication). It cannot export,
// so no request reaches it across an import: every Nats-Request-Info
// header there is a client's.
const globalAccount = "$G"

// userInfoSubject answers a client with its own user and account (every
// account imports it from the system account).
const userInfoSubject = "$SYS.REQ.USER.INFO"

// ownAccount asks the server which account the host's connection is in,
// "" with the reason when it cannot tell (no system account, an old
// server, a timeout).
func (h *Host) ownAccount() (string, string) {
	msg, err := h.nc.Request(userInfoSubject, nil, h.o.NATS.RequestTimeout)
	if err != nil {
		return "", fmt.Sprintf("%s: %v", userInfoSubject, err)
	}
	var resp struct {
		Data struct {
			Account string `json:"account"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return "", fmt.Sprintf("%s: unreadable answer: %v", userInfoSubject, err)
	}
	if resp.Error != nil {
		return "", fmt.Sprintf("%s: error %d %s", userInfoSubject, resp.Error.Code, resp.Error.Description)
	}
	if resp.Data.Account == "" {
		return "", userInfoSubject + ": no account in the answer"
	}
	return resp.Data.Account, ""
}

// callerOf reads a request's caller identity and whether it is the NATS
// server's word; when it is not, why says so (for the refusal, or the
// audit of an anonymous action). The header is trusted only when the
// server must have written it: the host's account is known and not the
// global one, and the header names another account (a request from
// another account reaches the host only across an import, where the
// server replaces the header). A header naming the host's own account, or
// any header in the global account, is a client's. RATIONALE.md, "Admin
// over NATS", on who may act.
func (h *Host) callerOf(hdr map[string][]string) (who callerInfo, trusted bool, why string) {
	raw := ""
	if v := hdr[requestInfoHeader]; len(v) > 0 {
		raw = v[0]
	}
	switch {
	case raw == "":
		return who, false, "the request carries no caller identity (no " + requestInfoHeader + " header)"
	case json.Unmarshal([]byte(raw), &who) != nil || who.Account == "":
		return callerInfo{}, false, "the " + requestInfoHeader + " header names no account"
	case h.adminAccount == "":
		return who, false, "the host could not learn its own NATS account (" + h.adminAccountErr + "), so it cannot tell the server's " + requestInfoHeader + " from a client's"
	case h.adminAccount == globalAccount:
		return who, false, "the host's NATS account is the global one (a server without accounts): the server stamps no identity there, so the " + requestInfoHeader + " header is the client's own"
	case who.Account == h.adminAccount:
		return who, false, "the " + requestInfoHeader + " header names the host's own account " + strconv.Quote(who.Account) + ": the server stamps no identity within an account, so it is the client's own"
	}
	return who, true, ""
}

// serveAdmin starts the admin service; the returned func stops it.
func (h *Host) serveAdmin(ctx context.Context) (func(), error) {
	o := h.o.Admin
	node := o.Node
	h.adminAccount, h.adminAccountErr = h.ownAccount()
	switch {
	case h.adminAccount == "":
		h.log.Warn("admin service: could not learn the host's NATS account; no caller identity is trusted (mutating actions need allow_anonymous)", "err", h.adminAccountErr)
	case h.adminAccount == globalAccount:
		h.log.Info("admin service: the host's NATS account is the global one (a server without accounts): no request carries an identity the server vouches for (mutating actions need allow_anonymous)")
	}
	svc, err := micro.AddService(h.nc, micro.Config{
		Name:        "foldhost",
		Version:     "0.1.0",
		Description: "foldhost admin: fold status, reads, queries and actions (pause, resume, reload, rebuild, release-effects, export, dead letters)",
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
			return map[string]any{"fold": f.Name(), "action": action, "state": st.State, "cursor": st.Cursor}, nil
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
		{"release-effects", true, func(_ context.Context, f *Fold, _ adminRequest) (any, error) {
			return ok("release-effects")(f, f.ReleaseEffects())
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
	reads := &natsReads{h: h.Handler(), maxPayload: h.nc.MaxPayload()}
	for _, name := range []string{"get", "range"} {
		if err := g.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) { reads.serve(r, name) })); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("admin service: endpoint %s: %w", name, err)
		}
	}
	// Queries: an endpoint per fold (its own stats), the query's name the
	// subject's rest (a name may hold dots).
	for _, f := range h.folds {
		prefix := o.Subject + "." + node + ".query." + f.Name() + "."
		name := f.Name()
		if err := g.AddEndpoint("query-"+name, micro.HandlerFunc(func(r micro.Request) { reads.serveQuery(r, name, prefix) }),
			micro.WithEndpointSubject("query."+name+".>")); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("admin service: endpoint query-%s: %w", name, err)
		}
	}
	h.log.Info("admin service on NATS", "subject", o.Subject+"."+node+".>", "account", h.adminAccount, "allow_anonymous", o.AllowAnonymous)
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
		names := make([]string, len(h.folds))
		for i, f := range h.folds {
			names[i] = f.Name()
		}
		_ = r.Error("404", fmt.Sprintf("no fold %q on this node: %s", req.Fold, textfmt.NoSuch("its folds", req.Fold, names)), nil)
		return
	}
	var args []any // the audit's: the action and how the caller was admitted
	if mutating {
		who, trusted, why := h.callerOf(r.Headers())
		args = []any{"action", action, "fold", f.Name(), "via", "nats"}
		switch {
		case trusted:
			args = append(args, "admitted_by", "server_identity", "account", who.Account, "user", who.User, "client", who.Name)
		case !h.o.Admin.AllowAnonymous:
			refused := append(args[:len(args):len(args)], "subject", r.Subject(), "reason", why)
			if who.Account != "" {
				refused = append(refused, "claimed_account", who.Account, "claimed_user", who.User)
			}
			h.log.Warn("admin action refused: no caller identity the NATS server vouches for", refused...)
			_ = r.Error("403", "admin actions need a caller identity stamped by the NATS server (a request from another account, through a service import with share: true), or allow_anonymous: "+why, nil)
			return
		default:
			args = append(args, "admitted_by", "allow_anonymous", "untrusted", why)
			if who.Account != "" {
				args = append(args, "claimed_account", who.Account, "claimed_user", who.User)
			}
		}
	}
	res, err := do(ctx, f, req)
	if mutating {
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
