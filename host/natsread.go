package host

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/foldhost/foldhost/host/httpapi"
)

// readRequest is the body of the admin service's read endpoints (get,
// range): the HTTP API's read parameters as JSON.
type readRequest struct {
	Fold  string `json:"fold"`
	Space string `json:"space,omitempty"` // "view" (the default) or "raw"
	// get: the key, as text or base64.
	Key    string `json:"key,omitempty"`
	KeyB64 string `json:"key_b64,omitempty"`
	// range: the prefix (as text or base64), the page size and the
	// previous page's continuation token.
	Prefix    string `json:"prefix,omitempty"`
	PrefixB64 string `json:"prefix_b64,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	Next      string `json:"next,omitempty"`
	// Read your writes: answer once the cursor reached MinRevision,
	// waiting up to Wait (a Go duration), else 504.
	MinRevision uint64 `json:"min_revision,omitempty"`
	Wait        string `json:"wait,omitempty"`
}

// Reply headers of the reads and queries over NATS: the HTTP API's
// answer headers without their X- prefix (the cursor read at, the module
// that answered a query, a repair's mark) and the content type.
var replyHeaders = map[string]string{
	httpapi.CursorHeader:        "Foldhost-Cursor",
	httpapi.ModuleHeader:        "Foldhost-Module",
	httpapi.RepairPendingHeader: "Foldhost-Repair-Pending",
	"Content-Type":              "Content-Type",
}

// Request headers of a query over NATS: read your writes, as a read's
// min_revision and wait (the payload is the query's input).
const (
	minRevisionHeader = "Foldhost-Min-Revision"
	waitHeader        = "Foldhost-Wait"
)

// natsReads serves the read and query endpoints through the HTTP API's
// own handler: one implementation of every read rule (key forms, paging
// of one snapshot, min_revision and wait, query limits, errors), so a
// read or query over NATS answers exactly what the same one over HTTP
// does (RATIONALE.md, "Reads over NATS go through the HTTP API's
// handler").
type natsReads struct {
	h          http.Handler // a handler of its own: its page tokens are its own
	maxPayload int64        // the connection's: a larger answer is refused, not cut
}

// serve answers one read request: get (one key) or range (a page).
func (n *natsReads) serve(r micro.Request, endpoint string) {
	var req readRequest
	if err := json.Unmarshal(r.Data(), &req); err != nil {
		_ = r.Error("400", `the request body must be JSON like {"fold":"NAME","key":"K"}: `+err.Error(), nil)
		return
	}
	target, err := req.path(endpoint)
	if err != nil {
		_ = r.Error("400", err.Error(), nil)
		return
	}
	n.forward(r, httptest.NewRequest(http.MethodGet, target, nil))
}

// serveQuery answers one query of fold: the query is the subject's rest
// after prefix, its input the payload, as a POST over HTTP takes it;
// min_revision and wait are headers.
func (n *natsReads) serveQuery(r micro.Request, fold, prefix string) {
	q := url.Values{}
	for hdr, param := range map[string]string{minRevisionHeader: "min_revision", waitHeader: "wait"} {
		if v := r.Headers().Values(hdr); len(v) > 0 {
			q[param] = v // more than one: the handler's 400
		}
	}
	target := "/v1/folds/" + url.PathEscape(fold) + "/query/" + url.PathEscape(strings.TrimPrefix(r.Subject(), prefix))
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	n.forward(r, httptest.NewRequest(http.MethodPost, target, bytes.NewReader(r.Data())))
}

// forward answers r with the HTTP API's answer to req: its body, and its
// status as the micro error code when it is not 200.
func (n *natsReads) forward(r micro.Request, req *http.Request) {
	rec := httptest.NewRecorder()
	n.h.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	hdr := micro.Headers{}
	for from, to := range replyHeaders {
		if v := rec.Header().Get(from); v != "" {
			hdr[to] = []string{v}
		}
	}
	if rec.Code != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		_ = r.Error(strconv.Itoa(rec.Code), msg, body, micro.WithHeaders(hdr))
		return
	}
	if n.maxPayload > 0 && int64(len(body)) > n.maxPayload-1024 {
		_ = r.Error("413", fmt.Sprintf("the answer of %d bytes is over the connection's max payload (%d): ask for a smaller limit", len(body), n.maxPayload), nil, micro.WithHeaders(hdr))
		return
	}
	_ = r.Respond(body, micro.WithHeaders(hdr))
}

// path is the HTTP API's URL of the read req asks for.
func (req readRequest) path(endpoint string) (string, error) {
	if req.Fold == "" {
		return "", fmt.Errorf("no fold: the body needs {\"fold\":\"NAME\", …}")
	}
	space := req.Space
	switch space {
	case "":
		space = "view"
	case "view", "raw":
	default:
		return "", fmt.Errorf("space must be \"view\" or \"raw\", got %q", req.Space)
	}
	q := url.Values{}
	switch endpoint {
	case "get":
		switch {
		case req.Key != "" && req.KeyB64 != "":
			return "", fmt.Errorf("key and key_b64 are one key: give one")
		case req.KeyB64 != "":
			q.Set("key_b64", req.KeyB64)
		case req.Key != "":
			q.Set("key", req.Key)
		default:
			return "", fmt.Errorf("get needs key (or key_b64)")
		}
	case "range":
		if req.Prefix != "" && req.PrefixB64 != "" {
			return "", fmt.Errorf("prefix and prefix_b64 are one prefix: give one")
		}
		if req.PrefixB64 != "" {
			q.Set("prefix_b64", req.PrefixB64)
		} else {
			q.Set("prefix", req.Prefix)
		}
		if req.Limit != 0 {
			q.Set("limit", strconv.Itoa(req.Limit))
		}
		if req.Next != "" {
			q.Set("next", req.Next)
		}
	}
	if req.MinRevision != 0 {
		q.Set("min_revision", strconv.FormatUint(req.MinRevision, 10))
	}
	if req.Wait != "" {
		q.Set("wait", req.Wait)
	}
	return "/v1/folds/" + url.PathEscape(req.Fold) + "/" + space + "?" + q.Encode(), nil
}
