package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Exporter is implemented by folds that can export an artifact on demand.
type Exporter interface {
	// Export runs an export round now and returns its JSON-encodable
	// result. force runs it without the fleet's lease. An error that
	// wraps ErrExportNotConfigured answers 501.
	Export(ctx context.Context, force bool) (any, error)
}

// ErrExportNotConfigured: the fold has no artifact store to export to.
var ErrExportNotConfigured = errors.New("artifact export is not configured")

func (s *server) export(w http.ResponseWriter, r *http.Request) {
	f, q, how, ok := s.adminFold(w, r, "force")
	if !ok {
		return
	}
	force, err := parseBool(q.Get("force"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "force: %v", err)
		return
	}
	ex, ok := f.(Exporter)
	if !ok {
		writeError(w, http.StatusNotImplemented, "fold %q: %v", f.Name(), ErrExportNotConfigured)
		return
	}
	res, err := ex.Export(r.Context(), force)
	action := "export"
	if force {
		action = "export --force"
	}
	s.audit(r, how, action, f.Name(), err)
	switch {
	case errors.Is(err, ErrExportNotConfigured):
		writeError(w, http.StatusNotImplemented, "fold %q: %v", f.Name(), err)
	case err != nil:
		s.log.Warn("export round failed", "fold", f.Name(), "err", err)
		writeError(w, http.StatusInternalServerError, "fold %q: export: %v", f.Name(), err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

func parseBool(v string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, fmt.Errorf("%q: want true or false", v)
}
