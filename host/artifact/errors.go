package artifact

import (
	"errors"
	"fmt"
)

var (
	// ErrArtifactInvalid is wrapped by every refusal of an artifact's
	// content: a malformed or mismatched manifest, an unexpected or tampered
	// tar entry, a hash mismatch, a truncated tar, a wrong backend or format
	// version, or a staged copy whose cursor differs from the manifest's.
	// Such an artifact must not be retried as is.
	ErrArtifactInvalid = errors.New("invalid artifact")

	// ErrDestNotEmpty: Import refuses to overwrite a non-empty directory.
	ErrDestNotEmpty = errors.New("artifact: destination is not empty")

	// ErrNoOrigin: Export refuses a store that does not record what it
	// folds ([fold.Store.SetOrigin]): its manifest could not say.
	ErrNoOrigin = errors.New("the store does not record what it folds")

	// ErrRepairPending: Export refuses a store a repair began on and has
	// not finished (fold.Store.RepairPending): some of its data is newer
	// than its cursor, and no artifact may carry that. The fold's next
	// repair finishes it.
	ErrRepairPending = errors.New("a repair of the store began and has not finished")

	// ErrTransport: the artifact store could not be reached, or a transfer
	// broke off (a refused or cut connection, a stall, a timeout, a server
	// error). Nothing is known to be wrong with the artifact: retry.
	ErrTransport = errors.New("artifact store unreachable or transfer cut")

	// ErrStoreRefused: the artifact store refused the request for a reason
	// a retry does not fix: its bucket does not exist, or the credentials
	// are unknown, wrong or not allowed. Fix the store's configuration.
	ErrStoreRefused = errors.New("artifact store refused the request (check its bucket and credentials)")

	// ErrNoPointer: the transport holds no pointer for the key.
	ErrNoPointer = errors.New("artifact: no pointer")

	// ErrCursorMoved: the staged checkpoint's cursor differs from the live
	// cursor read before the checkpoint, so the caller committed during
	// Export (a broken contract; see [Export]).
	ErrCursorMoved = errors.New("artifact: cursor moved during export")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrArtifactInvalid, fmt.Sprintf(format, args...))
}
