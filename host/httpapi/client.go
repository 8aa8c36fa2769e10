package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Export asks the API at base (http://host:port) to run an export round of
// the fold now (force: without the fleet's lease) and decodes the result
// into out. An error answer is returned with its message.
func Export(ctx context.Context, base, fold string, force bool, out any) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	u = u.JoinPath("v1", "folds", fold, "export")
	if force {
		u.RawQuery = "force=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return err
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
			return fmt.Errorf("%s: %s", u, e.Error)
		}
		return fmt.Errorf("%s: %s: %s", u, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: bad response: %w", u, err)
	}
	return nil
}
