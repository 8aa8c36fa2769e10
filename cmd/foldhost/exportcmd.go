package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/files"
)

const exportAbout = `Runs an export round now for each selected fold (every fold of the
config when no --fold is given): the fold's store is checkpointed, verified,
uploaded to the [artifacts] store under the fold's artifact_key, and
published as the key's pointer unless the store already holds a newer
artifact ("superseded", a normal outcome); payloads older than 4 x lease_ttl
that the pointer no longer needs are pruned.

When 'foldhost run' is running the fold, the round runs inside it, on the
live fold, through its HTTP API (POST /v1/folds/NAME/export on http.addr).
Otherwise the stopped fold's store is exported as it is.

Rounds take the fleet-wide export lease (NATS KV bucket
artifacts.lease_bucket), so one node exports a key per lease_ttl; a round
that finds the lease held is "skipped" and names the holder. --force exports
without the lease: safe, since the pointer never moves backward. A stopped
fold on the embedded NATS server (a single node) is exported without the
lease.

Prints one line per fold (--json: one JSON object per fold, "outcome":
"failed" with "error" for a failed round) and exits 1 if any round failed.`

func cmdExport(c *cli, args []string) error {
	fs := c.flagSet("export", "export [--config FILE] [--fold NAME]... [--force] [--json]", exportAbout)
	configPath := fs.String("config", "config.toml", "config `file`")
	var names multiFlag
	fs.Var(&names, "fold", "export only the fold `name` (repeatable)")
	force := fs.Bool("force", false, "export without the fleet's lease")
	asJSON := fs.Bool("json", false, "print each result as a JSON object")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	folds := cfg.Folds
	if len(names) > 0 {
		folds = nil
		for _, n := range names {
			f, err := pickFold(cfg, n)
			if err != nil {
				return err
			}
			folds = append(folds, f)
		}
	}
	ctx := c.ctx
	log := newLogger(cfg.Log, c.stderr)

	x := &offlineExport{cfg: cfg, log: log}
	defer x.close()
	var failed []error
	for _, f := range folds {
		res, err := x.export(ctx, f, *force)
		if err != nil {
			failed = append(failed, fmt.Errorf("fold %s: %w", f.Name, err))
			if *asJSON {
				b, _ := json.Marshal(roundResult{Fold: f.Name, Key: f.ArtifactKey, Outcome: "failed", Error: err.Error(), Forced: *force})
				fmt.Fprintf(c.stdout, "%s\n", b)
			}
			continue
		}
		if *asJSON {
			b, _ := json.Marshal(res)
			fmt.Fprintf(c.stdout, "%s\n", b)
		} else {
			fmt.Fprintln(c.stdout, res.String())
		}
	}
	return errors.Join(failed...)
}

// offlineExport exports folds from `foldhost export`: through the running
// daemon when it holds the store, else from the stopped store.
type offlineExport struct {
	cfg *Config
	log *slog.Logger
	nc  *nats.Conn
	exp *exporter
}

func (x *offlineExport) close() {
	if x.nc != nil {
		x.nc.Close()
	}
}

func (x *offlineExport) export(ctx context.Context, f FoldConfig, force bool) (roundResult, error) {
	store, err := openExisting(f.DataDir)
	if err != nil {
		if errors.Is(err, fold.ErrLocked) {
			return x.viaDaemon(ctx, f, force)
		}
		var ue *usageError
		if errors.As(err, &ue) { // no store: a failed round, not a usage error
			return roundResult{}, errors.New(ue.msg)
		}
		return roundResult{}, err
	}
	defer store.Close()
	if err := resetStageDir(f); err != nil {
		return roundResult{}, err
	}
	if x.exp == nil {
		switch {
		case force: // no lease, so no NATS
		case x.cfg.NATS.Embedded:
			x.log.Info("the embedded NATS server runs only inside 'foldhost run': exporting without the fleet lease (a single node)")
		default:
			nc, err := natskv.Connect(x.cfg.NATS.connOptions(x.cfg.NATS.URL))
			if err != nil {
				return roundResult{}, fmt.Errorf("%w (the export lease lives in NATS; --force exports without it)", err)
			}
			x.nc = nc
		}
		if x.exp, err = newExporter(x.cfg, x.nc, x.log); err != nil {
			return roundResult{}, err
		}
	}
	return x.exp.round(ctx, f, store, nil, force)
}

// viaDaemon asks the running daemon to run the round on its live fold.
func (x *offlineExport) viaDaemon(ctx context.Context, f FoldConfig, force bool) (roundResult, error) {
	host, port, _ := net.SplitHostPort(x.cfg.HTTP.Addr) // validated
	if port == "0" {
		return roundResult{}, fmt.Errorf("the fold's store is held by a running foldhost whose HTTP port is not configured (http.addr %s): POST /v1/folds/%s/export to the address it printed", x.cfg.HTTP.Addr, f.Name)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: "/v1/folds/" + f.Name + "/export"}
	if force {
		u.RawQuery = "force=true"
	}
	x.log.Info("the fold is running: exporting through the daemon's HTTP API", "url", u.String())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return roundResult{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return roundResult{}, fmt.Errorf("the fold's store is held by another process, and its HTTP API does not answer: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return roundResult{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return roundResult{}, fmt.Errorf("daemon: %s", e.Error)
		}
		return roundResult{}, fmt.Errorf("daemon: %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	var res roundResult
	if err := json.Unmarshal(body, &res); err != nil {
		return roundResult{}, fmt.Errorf("daemon: bad response: %w", err)
	}
	return res, nil
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

const bootstrapAbout = `Fills an empty fold from the newest artifact published in the
[artifacts] store under the fold's artifact_key (or --key): downloads the
payload named by the published manifest, verifies every file's BLAKE3 hash
and the manifest, opens the staged copy and checks its cursor, then moves it
into the fold's data_dir in one rename. A following 'foldhost run' resumes
from the artifact's cursor and receives only the updates written since.

Refuses (and downloads nothing) when the fold's data_dir is not empty, or
when the artifact was exported from another bucket or scope. A failed or
interrupted bootstrap leaves the data_dir as it was. Progress goes to stderr.`

func cmdBootstrap(c *cli, args []string) error {
	fs := c.flagSet("bootstrap", "bootstrap [--config FILE] [--fold NAME] [--key KEY]", bootstrapAbout)
	configPath := fs.String("config", "config.toml", "config `file`")
	name := fs.String("fold", "", "the fold `name` (may be omitted when the config has one fold)")
	key := fs.String("key", "", "the artifact `key` (default: the fold's artifact_key)")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	f, err := pickFold(cfg, *name)
	if err != nil {
		return err
	}
	if *key != "" {
		if !nameRE.MatchString(*key) {
			return usagef("--key %q: use 1 to 64 of A-Z a-z 0-9 _ -", *key)
		}
		f.ArtifactKey = *key
	}
	return bootstrap(c.ctx, cfg, f, c.stdout, c.stderr)
}

func bootstrap(ctx context.Context, cfg *Config, f FoldConfig, stdout, stderr io.Writer) error {
	parent := filepath.Dir(f.DataDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	lk, err := files.TryLock(filepath.Join(parent, "."+filepath.Base(f.DataDir)+".bootstrap.lock"))
	if err != nil {
		return fmt.Errorf("another bootstrap of fold %s is running: %w", f.Name, err)
	}
	defer lk.Unlock()
	// Leftovers of an import that died mid-way (we hold the lock, so no
	// import of this fold is running).
	staleImport := "." + filepath.Base(f.DataDir) + ".import-"
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), staleImport) {
			_ = os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
	if entries, err := os.ReadDir(f.DataDir); err == nil && len(entries) > 0 {
		return fmt.Errorf("fold %s already has data in %s: bootstrap only fills an empty fold (to replace it, stop foldhost and move the directory aside)", f.Name, f.DataDir)
	}

	tr, where, err := openArtifactStore(cfg.Artifacts)
	if err != nil {
		return fmt.Errorf("artifacts: %w", err)
	}
	p := newProgress(stderr)
	start := time.Now()
	var total atomic.Int64
	m, err := artifact.Download(ctx, tr, f.ArtifactKey, f.DataDir, artifact.DownloadOptions{
		Check: func(m artifact.Manifest) error {
			if m.Bucket != "" && m.Bucket != f.Bucket {
				return fmt.Errorf("the artifact %q was exported from bucket %q, fold %s folds bucket %q", f.ArtifactKey, m.Bucket, f.Name, f.Bucket)
			}
			want, got := slices.Sorted(slices.Values(f.Scope)), slices.Sorted(slices.Values(m.Scope))
			if !slices.Equal(got, want) { // the order of prefixes does not matter
				return fmt.Errorf("the artifact %q was exported with scope %q, fold %s has scope %q", f.ArtifactKey, m.Scope, f.Name, want)
			}
			c, _ := m.DecodeCursor() // ParseManifest checked it
			fmt.Fprintf(stderr, "foldhost bootstrap: fold %s from %s key %q: artifact at cursor %d, %d files\n",
				f.Name, where, f.ArtifactKey, c.Rev, len(m.Files))
			return nil
		},
		Progress: func(read, size int64) {
			total.Store(read)
			p.update(read, size)
		},
	})
	p.done()
	if errors.Is(err, artifact.ErrNoPointer) {
		return fmt.Errorf("no artifact published under key %q in %s: run 'foldhost export' (or an export_interval) on a node that has the fold", f.ArtifactKey, where)
	}
	if err != nil {
		return err
	}
	c, _ := m.DecodeCursor()
	took := time.Since(start)
	n := total.Load()
	fmt.Fprintf(stdout, "bootstrapped fold %s from %s key %q: cursor %d, %s in %s (%s/s), verified; 'foldhost run' resumes from cursor %d\n",
		f.Name, where, f.ArtifactKey, c.Rev, humanBytes(n), took.Round(time.Millisecond), humanBytes(int64(float64(n)/max(took.Seconds(), 1e-9))), c.Rev)
	warnPluginMismatch(stderr, f, m)
	return nil
}

// warnPluginMismatch tells the operator when the artifact's views were made
// by another plugin build than the fold's: the views come across as they
// are, and the fold's plugin applies every update from now on.
func warnPluginMismatch(w io.Writer, f FoldConfig, m artifact.Manifest) {
	var theirs struct {
		SHA256, Name, Version string
	}
	if m.PluginIdentity != nil {
		if b, err := hex.DecodeString(*m.PluginIdentity); err == nil {
			_ = json.Unmarshal(b, &theirs)
		}
	}
	ours := ""
	if f.Plugin != "" {
		if b, err := files.ReadRegular(f.Plugin, int64(f.PluginMaxMB)<<20); err == nil {
			ours = wasm.ModuleHash(b)
		}
	}
	switch {
	case theirs.SHA256 == "" && ours == "":
	case theirs.SHA256 == ours:
	case theirs.SHA256 == "":
		fmt.Fprintf(w, "foldhost bootstrap: warning: the artifact has no plugin views (a raw-only fold); fold %s's plugin starts from empty views\n", f.Name)
	case ours == "":
		fmt.Fprintf(w, "foldhost bootstrap: warning: the artifact's views were made by plugin %s %s (sha256 %.12s); fold %s runs no plugin, so they will not be updated\n",
			theirs.Name, theirs.Version, theirs.SHA256, f.Name)
	default:
		fmt.Fprintf(w, "foldhost bootstrap: warning: the artifact's views were made by plugin %s %s (sha256 %.12s), fold %s runs sha256 %.12s; the views come across as they are\n",
			theirs.Name, theirs.Version, theirs.SHA256, f.Name, ours)
	}
}

// progress draws a download's progress: a bar on a terminal, else a line
// every few seconds.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w), start: time.Now()}
}

func (p *progress) update(read, size int64) {
	every := 3 * time.Second
	if p.tty {
		every = 100 * time.Millisecond
	}
	if time.Since(p.last) < every && read != size {
		return
	}
	p.last = time.Now()
	pct := 100.0
	if size > 0 {
		pct = 100 * float64(read) / float64(size)
	}
	rate := int64(float64(read) / max(time.Since(p.start).Seconds(), 1e-9))
	if p.tty {
		const width = 30
		n := min(width, int(pct/100*width))
		fmt.Fprintf(p.w, "\r  [%s%s] %5.1f%%  %s / %s  %s/s", strings.Repeat("#", n), strings.Repeat(".", width-n),
			pct, humanBytes(read), humanBytes(size), humanBytes(rate))
		p.drawn = true
		return
	}
	fmt.Fprintf(p.w, "foldhost bootstrap: downloaded %s / %s (%.0f%%, %s/s)\n", humanBytes(read), humanBytes(size), pct, humanBytes(rate))
}

// humanBytes formats n bytes in B, KiB, MiB or GiB.
func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
