package host

import (
	"context"
	"fmt"

	"github.com/foldhost/foldhost/host/foldrun"
)

// BootstrapOptions tune Bootstrap.
type BootstrapOptions = foldrun.BootstrapOptions

// BootstrapResult is what a bootstrap installed.
type BootstrapResult = foldrun.BootstrapResult

// ErrNoArtifact: nothing is published under the fold's key.
var ErrNoArtifact = foldrun.ErrNoArtifact

// Bootstrap fills the empty fold named name from the newest artifact
// published under its key (foldrun.Bootstrap says how, and what it
// refuses).
func Bootstrap(ctx context.Context, o Options, name string, bo BootstrapOptions) (BootstrapResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return BootstrapResult{}, fmt.Errorf("host: invalid options: %w", err)
	}
	f, err := o.fold(name)
	if err != nil {
		return BootstrapResult{}, err
	}
	return foldrun.Bootstrap(ctx, f, o.Artifacts.Store, o.Artifacts.Where, o.Logger, bo)
}
