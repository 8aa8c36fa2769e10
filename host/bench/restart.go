package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/plugins/example-router/workload"
)

// restart folds the bucket raw-only (the full replay), writes the delta,
// and resumes the same store (the resume).
func (b *bench) restart(ctx context.Context, w *workload.Writer) (*Restart, error) {
	dir := b.nextDir()
	o := b.hostOptions(dir, "")
	replay, err := b.runHost(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := w.Delta(ctx, b.delta); err != nil {
		return nil, err
	}
	if err := b.readHead(ctx); err != nil {
		return nil, err
	}
	resume, err := b.runHost(ctx, o)
	if err != nil {
		return nil, err
	}
	res := &Restart{Delta: b.delta, ResumeSeconds: resume.Seconds(), ReplaySeconds: replay.Seconds(),
		Ratio: resume.Seconds() / replay.Seconds()}

	// The same fold as an artifact; a new node bootstrapped from it.
	b.prog.Status("bootstrap: exporting the fold, then a new node from the artifact")
	arts, err := dirstore.New(filepath.Join(b.dir, "artifacts"))
	if err != nil {
		return nil, err
	}
	o.Artifacts = host.ArtifactOptions{Store: arts, Where: "bench", Holder: "bench"}
	if _, err := host.ExportStopped(ctx, o, "bench", true); err != nil { // force: no lease bucket on the server
		return nil, fmt.Errorf("export: %w", err)
	}
	o2 := o
	o2.Folds = slices.Clone(o.Folds)
	o2.Folds[0].DataDir = b.nextDir()
	t0 := time.Now()
	br, err := host.Bootstrap(ctx, o2, "bench", host.BootstrapOptions{})
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	boot := time.Since(t0)
	caughtUp, err := b.runHost(ctx, o2) // to the head, as the replay is timed
	if err != nil {
		return nil, err
	}
	res.BootstrapSeconds = (boot + caughtUp).Seconds()
	res.ArtifactBytes = br.Bytes
	res.BootstrapRatio = res.BootstrapSeconds / res.ReplaySeconds
	return res, errors.Join(os.RemoveAll(dir), os.RemoveAll(o2.Folds[0].DataDir))
}
