package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Export asks the API at base (http://host:port) to run an export round of
// the fold now (force: without the fleet's lease) and decodes the result
// into out. token, if not empty, is sent as the admin bearer token. An
// error answer is returned with its message.
func Export(ctx context.Context, base, fold string, force bool, token string, out any) error {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return Admin(ctx, base, fold, "export", q, token, out)
}

// Admin POSTs the admin action (pause, resume, reload, rebuild, release-effects, export,
// deadletter/replay) of fold to the API at base, with query and the bearer
// token (if not empty), and decodes the answer into out. An error answer
// is returned with its message and status.
func Admin(ctx context.Context, base, fold, action string, query url.Values, token string, out any) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	u = u.JoinPath(append([]string{"v1", "folds", fold}, strings.Split(action, "/")...)...)
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s (%s)", u, e.Error, resp.Status)
		}
		return fmt.Errorf("%s: %s: %s", u, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: bad response: %w", u, err)
	}
	return nil
}
