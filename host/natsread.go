package host

import (
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

// readHeader carries a read's cursor in the reply (the HTTP API's
// X-Foldhost-Cursor).
const readHeader = "Foldhost-Cursor"

// natsReads serves the read endpoints through the HTTP API's own handler:
// one implementation of every read rule (key forms, paging of one
// snapshot, min_revision and wait, errors), so a read over NATS answers
// exactly what the same read over HTTP does (RATIONALE.md, "Reads over
// NATS").
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
	rec := httptest.NewRecorder()
	n.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	body := rec.Body.Bytes()
	hdr := micro.Headers{}
	if c := rec.Header().Get(httpapi.CursorHeader); c != "" {
		hdr[readHeader] = []string{c}
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
