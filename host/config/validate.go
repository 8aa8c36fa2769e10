package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/s3store"
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
)

// validate checks cross-key rules and applies defaults.
func (c *Config) validate(ps *problems) {
	base := filepath.Dir(c.File)
	resolve := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(base, p)
	}
	if c.DataDir == "" {
		c.DataDir = defaultDataDir
	}
	c.DataDir = resolve(c.DataDir)
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}

	// NATS.
	n := &c.NATS
	n.Embedded = n.URL == "" || n.URL == "embedded"
	if n.Embedded {
		n.URL = ""
		if n.EmbeddedListen == "" {
			n.EmbeddedListen = DefaultEmbeddedListen
		}
		if err := checkLoopback(n.EmbeddedListen); err != nil {
			ps.add("nats.embedded_listen", "%v (the embedded server has no authentication, so it listens on loopback only)", err)
		}
		if n.EmbeddedDir == "" {
			n.EmbeddedDir = filepath.Join(c.DataDir, "nats")
		}
		n.EmbeddedDir = resolve(n.EmbeddedDir)
		for _, kv := range [][2]string{
			{"nats.creds", n.Creds}, {"nats.creds_file", n.CredsFile},
			{"nats.tls_ca_file", n.TLSCAFile}, {"nats.tls_cert_file", n.TLSCertFile}, {"nats.tls_key_file", n.TLSKeyFile},
		} {
			if kv[1] != "" {
				ps.add(kv[0], "is set, but nats.url selects the embedded server, which takes no credentials or TLS")
			}
		}
	} else {
		if err := natskv.CheckURL(n.URL); err != nil {
			ps.add("nats.url", "%v", err)
		}
		if n.Creds != "" && n.CredsFile != "" {
			ps.add("nats.creds_file", "nats.creds and nats.creds_file are both set: set at most one")
		}
		if (n.TLSCertFile == "") != (n.TLSKeyFile == "") {
			ps.add("nats.tls_cert_file", "nats.tls_cert_file and nats.tls_key_file go together: set both or neither")
		}
		n.CredsFile = resolve(n.CredsFile)
		n.TLSCAFile = resolve(n.TLSCAFile)
		n.TLSCertFile = resolve(n.TLSCertFile)
		n.TLSKeyFile = resolve(n.TLSKeyFile)
		for _, f := range []struct{ key, path string }{
			{"nats.creds_file", n.CredsFile}, {"nats.tls_ca_file", n.TLSCAFile},
			{"nats.tls_cert_file", n.TLSCertFile}, {"nats.tls_key_file", n.TLSKeyFile},
		} {
			if f.path != "" {
				if _, err := os.Stat(f.path); err != nil {
					ps.add(f.key, "%v", errors.Unwrap(err))
				}
			}
		}
	}
	for _, d := range []struct {
		key string
		v   *time.Duration
		def time.Duration
	}{
		{"nats.connect_timeout", &n.ConnectTimeout, defaultConnectTimeout},
		{"nats.request_timeout", &n.RequestTimeout, natskv.DefaultRequestTimeout},
		{"nats.head_poll_interval", &n.HeadPollInterval, host.DefaultHeadPollInterval},
		{"nats.disconnect_grace", &n.DisconnectGrace, host.DefaultDisconnectGrace},
		{"log.progress_interval", &c.Log.ProgressInterval, host.DefaultProgressInterval},
	} {
		if *d.v < 0 {
			ps.add(d.key, "must not be negative")
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}

	// HTTP.
	if c.HTTP.Addr == "" {
		c.HTTP.Addr = defaultHTTPAddr
	}
	if err := checkHostPort(c.HTTP.Addr); err != nil {
		ps.add("http.addr", "%v", err)
	}

	// Log.
	switch c.Log.Level {
	case "":
		c.Log.Level = "info"
	case "debug", "info", "warn", "error":
	default:
		ps.add("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "":
		c.Log.Format = "text"
	case "text", "json":
	default:
		ps.add("log.format", "%q: want text or json", c.Log.Format)
	}

	c.validateArtifacts(ps, resolve)
	c.validateFleet(ps)

	// Folds.
	if len(c.Folds) == 0 {
		ps.add("fold", "no [[fold]] section: configure at least one fold")
	}
	names := map[string]int{}
	dirs := map[string]int{}
	keys := map[string]int{}
	for i := range c.Folds {
		f := &c.Folds[i]
		key := func(k string) string { return "fold[" + strconv.Itoa(i) + "]." + k }
		nameDup := false
		switch {
		case f.Name == "":
			ps.add(key("name"), "is required")
		case !nameRE.MatchString(f.Name):
			ps.add(key("name"), "%q: use 1 to 64 of A-Z a-z 0-9 _ - (it appears in URLs, metrics and directory names)", f.Name)
		default:
			if j, dup := names[f.Name]; dup {
				ps.add(key("name"), "%q is also the name of fold[%d]", f.Name, j)
				nameDup = true
			}
			names[f.Name] = i
		}
		if f.Bucket == "" && nameRE.MatchString(f.Name) {
			f.Bucket = f.Name // a valid name is a valid bucket name
		} else if f.Bucket != "" && !bucketRE.MatchString(f.Bucket) {
			ps.add(key("bucket"), "%q is not a valid KV bucket name (A-Z a-z 0-9 _ -)", f.Bucket)
		}
		if err := (natskv.Scope{Prefixes: f.Scope, Partition: protocol.Partition{Count: f.Partitions}}).Validate(); err != nil {
			ps.add(key("scope"), "%v", err)
		}
		if pluginobj.IsRef(f.Plugin) {
			if _, err := pluginobj.ParseRef(f.Plugin); err != nil {
				ps.add(key("plugin"), "%v", err)
			}
		} else if f.Plugin != "" {
			f.Plugin = resolve(f.Plugin)
			if pf, _, err := files.OpenRegular(f.Plugin, int64(f.PluginMaxMB)<<20); err != nil {
				ps.add(key("plugin"), "%v", err)
			} else {
				pf.Close()
			}
		}
		defaultDir := f.DataDir == ""
		if defaultDir && f.Name != "" {
			f.DataDir = filepath.Join(c.DataDir, "folds", f.Name)
		}
		f.DataDir = filepath.Clean(resolve(f.DataDir))
		if j, dup := dirs[f.DataDir]; dup && f.DataDir != "." && !(defaultDir && nameDup) {
			ps.add(key("data_dir"), "%s is also the data dir of fold[%d]", f.DataDir, j)
		}
		dirs[f.DataDir] = i
		if f.ArtifactKey == "" {
			f.ArtifactKey = f.Name
		} else if !nameRE.MatchString(f.ArtifactKey) {
			ps.add(key("artifact_key"), "%q: use 1 to 64 of A-Z a-z 0-9 _ - (it names objects and a NATS KV key)", f.ArtifactKey)
		}
		if j, dup := keys[f.ArtifactKey]; dup && f.ArtifactKey != "" && !nameDup {
			ps.add(key("artifact_key"), "%q is also the artifact key of fold[%d]: their artifacts would replace each other", f.ArtifactKey, j)
		}
		keys[f.ArtifactKey] = i
		if f.BatchWindow == 0 {
			f.BatchWindow = fold.DefaultWindow
		}
		if f.BatchSize == 0 {
			f.BatchSize = fold.DefaultMaxBatch
		}
		if f.Buffer == 0 {
			f.Buffer = host.DefaultBuffer
		}
		f.CreateBucket.Name = f.Bucket
		if f.CreateBucket.History == 0 {
			f.CreateBucket.History = 1
		}
		if f.CreateBucket.Replicas == 0 {
			f.CreateBucket.Replicas = 1
		}
	}
	c.checkDirs(ps)
	// Folds sharing a bucket must agree on how to create it.
	first := map[string]int{}
	for i, f := range c.Folds {
		if j, ok := first[f.Bucket]; ok {
			if c.Folds[j].CreateBucket != f.CreateBucket || c.Folds[j].NoCreateBucket != f.NoCreateBucket {
				ps.add("fold["+strconv.Itoa(i)+"].create_bucket", "differs from fold[%d], which uses the same bucket %q", j, f.Bucket)
			}
			continue
		}
		first[f.Bucket] = i
	}
}

// checkDirs refuses directories that are one, or lie inside one another,
// once symlinks are resolved: two stores in one directory wipe each other,
// and foreign files inside a store's directory are not the store's. Fold
// data dirs are checked against each other, the local artifact store, the
// embedded NATS server's directory and the compiled-plugin cache. (A
// literal duplicate data_dir is reported where it is found.)
func (c *Config) checkDirs(ps *problems) {
	type owned struct{ key, path, real string }
	var ds []owned
	add := func(key, path string) {
		if path != "" {
			ds = append(ds, owned{key, path, realPath(path)})
		}
	}
	for i, f := range c.Folds {
		add("fold["+strconv.Itoa(i)+"].data_dir", f.DataDir)
	}
	folds := len(ds)
	if c.Artifacts.Store == "local" {
		add("artifacts.dir", c.Artifacts.Dir)
	}
	if c.NATS.Embedded {
		add("nats.embedded_dir", c.NATS.EmbeddedDir)
	}
	add("data_dir (its wasm-cache)", c.wasmCacheDir())
	for i := 0; i < folds; i++ {
		for j := i + 1; j < len(ds); j++ {
			a, b := ds[i], ds[j]
			if a.path == b.path && j < folds {
				continue // the same literal path: reported as a duplicate
			}
			if fold.Overlap(a.real, b.real) {
				how := "is the same directory as"
				if a.real != b.real {
					how = "overlaps"
				}
				ps.add(a.key, "%s %s %s (%s): a fold's store must have its directory to itself", a.path, how, b.key, b.path)
			}
		}
	}
}

// realPath resolves the symlinks of path's longest existing ancestor (the
// rest does not exist yet, so it cannot be a link).
func realPath(path string) string {
	path = filepath.Clean(path)
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(path); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(path)
		if parent == path {
			return filepath.Join(path, rest)
		}
		rest = filepath.Join(filepath.Base(path), rest)
		path = parent
	}
}

// validateArtifacts checks [artifacts] and applies its defaults.
func (c *Config) validateArtifacts(ps *problems, resolve func(string) string) {
	a := &c.Artifacts
	switch a.Store {
	case "", "local":
		a.Store = "local"
		if a.Dir == "" {
			a.Dir = filepath.Join(c.DataDir, "artifacts")
		}
		a.Dir = resolve(a.Dir)
	case "s3":
		if a.S3.Bucket == "" {
			ps.add("artifacts.s3.bucket", "is required with artifacts.store = \"s3\"")
		}
		if a.Dir != "" {
			ps.add("artifacts.dir", "is set, but artifacts.store is \"s3\": dir is the local store's")
		}
		if (a.S3.AccessKey == "") != (a.S3.SecretKey == "") {
			ps.add("artifacts.s3.secret_key", "access_key and secret_key go together: set both or neither (or %s and %s)", EnvS3AccessKey, EnvS3SecretKey)
		}
	default:
		ps.add("artifacts.store", "%q: want \"local\" or \"s3\"", a.Store)
	}
	if a.S3.Region == "" {
		a.S3.Region = defaultS3Region
	}
	if a.S3.PartSizeMB == 0 {
		a.S3.PartSizeMB = s3store.DefaultPartSize >> 20
	}
	if a.S3.Concurrency == 0 {
		a.S3.Concurrency = s3store.DefaultPartConcurrency
	}
	if a.S3.RequestTimeout == 0 {
		a.S3.RequestTimeout = s3store.DefaultOpTimeout
	}
	if a.LeaseBucket == "" {
		a.LeaseBucket = host.DefaultLeaseBucket
	} else if !bucketRE.MatchString(a.LeaseBucket) {
		ps.add("artifacts.lease_bucket", "%q is not a valid KV bucket name (A-Z a-z 0-9 _ -)", a.LeaseBucket)
	}
	if a.LeaseTTL == 0 {
		a.LeaseTTL = host.DefaultLeaseTTL
	}
	if a.Holder == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "foldhost"
		}
		a.Holder = h
	}
}

func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port: %v", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: port must be a number between 0 and 65535", addr)
	}
	return nil
}

func checkLoopback(addr string) error {
	if err := checkHostPort(addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", addr)
	}
	return nil
}

// validateFleet checks [fleet]: a name for the fleet's bucket, a node
// name of its own (the one the config has: artifacts.holder, which
// admin.node defaults to; with a fleet the two may not differ), a NATS
// the nodes share, and a beat well within the TTL.
func (c *Config) validateFleet(ps *problems) {
	fl := &c.Fleet
	if fl.Name == "" {
		for k, set := range map[string]bool{"advertise": fl.Advertise != "", "heartbeat": fl.Heartbeat != 0, "node_ttl": fl.NodeTTL != 0} {
			if set {
				ps.add("fleet."+k, "is set, but fleet.name is not: without a name there is no fleet")
			}
		}
		return
	}
	if !ValidName(fl.Name) {
		ps.add("fleet.name", "%q: 1 to 64 of A-Z a-z 0-9 _ - (it names the fleet's KV bucket)", fl.Name)
	}
	if c.NATS.Embedded {
		ps.add("fleet.name", "a fleet's nodes share one NATS: set nats.url (each node's embedded server would be a fleet of its own)")
	}
	node := c.Artifacts.Holder
	if c.Admin.Node != "" && c.Admin.Node != node {
		ps.add("admin.node", "%q differs from artifacts.holder %q: in a fleet a node has one name; set artifacts.holder (admin.node defaults to it)", c.Admin.Node, node)
	}
	if !ValidName(node) {
		ps.add("artifacts.holder", "%q: a fleet's node name is 1 to 64 of A-Z a-z 0-9 _ - (a key of the fleet's bucket)", node)
	}
	if fl.Heartbeat == 0 {
		fl.Heartbeat = fleet.DefaultHeartbeat
	}
	if fl.NodeTTL == 0 {
		fl.NodeTTL = fleet.DefaultNodeTTL
	}
	if fl.NodeTTL <= 2*fl.Heartbeat {
		ps.add("fleet.node_ttl", "%v must be more than twice fleet.heartbeat (%v): a node must miss two beats before the others take its folds", fl.NodeTTL, fl.Heartbeat)
	}
	if fl.Advertise == "" {
		fl.Advertise = c.HTTP.Addr
	} else if err := checkHostPort(fl.Advertise); err != nil {
		ps.add("fleet.advertise", "%v", err)
	}
}
