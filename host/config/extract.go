package config

import (
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/protocol"
)

// extract copies the document into c, recording type errors and unknown
// keys.
func (c *Config) extract(root *table) {
	root.str("data_dir", &c.DataDir)
	if root.duration("shutdown_grace", &c.ShutdownGrace) && c.ShutdownGrace < time.Second {
		root.problem("shutdown_grace", "must be at least 1s, got %v", c.ShutdownGrace)
	}

	n := root.sub("nats")
	n.str("url", &c.NATS.URL)
	n.str("embedded_listen", &c.NATS.EmbeddedListen)
	n.str("embedded_dir", &c.NATS.EmbeddedDir)
	n.boolean("embedded_logs", &c.NATS.EmbeddedLogs)
	n.str("creds", &c.NATS.Creds)
	n.str("creds_file", &c.NATS.CredsFile)
	n.str("tls_ca_file", &c.NATS.TLSCAFile)
	n.str("tls_cert_file", &c.NATS.TLSCertFile)
	n.str("tls_key_file", &c.NATS.TLSKeyFile)
	n.duration("connect_timeout", &c.NATS.ConnectTimeout)
	n.duration("request_timeout", &c.NATS.RequestTimeout)
	n.duration("head_poll_interval", &c.NATS.HeadPollInterval)
	n.duration("disconnect_grace", &c.NATS.DisconnectGrace)
	n.done()

	h := root.sub("http")
	h.str("addr", &c.HTTP.Addr)
	h.done()

	a := root.sub("admin")
	a.boolean("nats", &c.Admin.NATS)
	a.str("subject", &c.Admin.Subject)
	a.str("node", &c.Admin.Node)
	a.boolean("allow_anonymous", &c.Admin.AllowAnonymous)
	a.done()

	l := root.sub("log")
	l.str("level", &c.Log.Level)
	l.str("format", &c.Log.Format)
	l.duration("progress_interval", &c.Log.ProgressInterval)
	l.done()

	c.extractArtifacts(root.sub("artifacts"))

	fl := root.sub("fleet")
	fl.str("name", &c.Fleet.Name)
	fl.str("advertise", &c.Fleet.Advertise)
	if fl.duration("heartbeat", &c.Fleet.Heartbeat) && c.Fleet.Heartbeat < 10*time.Millisecond {
		fl.problem("heartbeat", "must be at least 10ms, got %v", c.Fleet.Heartbeat)
	}
	if fl.duration("node_ttl", &c.Fleet.NodeTTL) && c.Fleet.NodeTTL < 100*time.Millisecond {
		fl.problem("node_ttl", "must be at least 100ms, got %v", c.Fleet.NodeTTL)
	}
	var replicas int64 = 1
	if fl.integer("replicas", &replicas) && (replicas < 1 || replicas > 5) {
		fl.problem("replicas", "must be between 1 and 5, got %d", replicas)
	}
	c.Fleet.Replicas = int(replicas)
	fl.done()

	for _, f := range root.array("fold") {
		c.Folds = append(c.Folds, extractFold(f))
	}
	root.done()
}

// extractFold reads one [[fold]] table, range-checking the values whose
// type was right (a wrong type is one problem, not two).
func extractFold(f *table) FoldConfig {
	var fc FoldConfig
	var repair string
	var batch, buffer int64
	f.str("name", &fc.Name)
	f.str("bucket", &fc.Bucket)
	f.strings("scope", &fc.Scope)
	f.str("plugin", &fc.Plugin)
	fc.PluginCallTimeout = wasm.DefaultCallTimeout
	if f.duration("plugin_call_timeout", &fc.PluginCallTimeout) && fc.PluginCallTimeout < 0 {
		f.problem("plugin_call_timeout", "must be >= 0 (0: no deadline), got %v", fc.PluginCallTimeout)
	}
	var memMB, maxMB, retries int64 = wasm.DefaultMemoryLimitMB, defaultPluginMaxMB, wasm.DefaultRetries
	if f.integer("plugin_memory_mb", &memMB) && (memMB < 1 || memMB > 4096) {
		f.problem("plugin_memory_mb", "must be between 1 and 4096, got %d", memMB)
	}
	if f.integer("plugin_max_mb", &maxMB) && (maxMB < 1 || maxMB > 1024) {
		f.problem("plugin_max_mb", "must be between 1 and 1024, got %d", maxMB)
	}
	fc.PluginMaxMB = clampInt(maxMB)
	if f.integer("plugin_retries", &retries) && (retries < 0 || retries > 100) {
		f.problem("plugin_retries", "must be between 0 and 100, got %d", retries)
	}
	fc.PluginMemoryMB, fc.PluginRetries = clampInt(memMB), clampInt(retries)
	var queryInstances int64
	if f.integer("plugin_query_instances", &queryInstances) && (queryInstances < 1 || queryInstances > 64) {
		f.problem("plugin_query_instances", "must be between 1 and 64, got %d", queryInstances)
		queryInstances = 0
	}
	fc.PluginQueryInstances = clampInt(queryInstances)
	fc.PluginLimits = extractLimits(f)
	fc.OnPluginError = host.PluginErrorStop
	f.str("on_plugin_error", &fc.OnPluginError)
	if fc.OnPluginError != host.PluginErrorStop && fc.OnPluginError != host.PluginErrorSkip {
		f.problem("on_plugin_error", "must be %q or %q, got %q", host.PluginErrorStop, host.PluginErrorSkip, fc.OnPluginError)
	}
	dlMax := int64(host.DefaultDeadLetterMax)
	if f.integer("deadletter_max", &dlMax) && (dlMax < 1 || dlMax > 1_000_000) {
		f.problem("deadletter_max", "must be between 1 and 1000000, got %d", dlMax)
	}
	fc.DeadLetterMax = clampInt(dlMax)
	fc.DeadLetterMaxAge = host.DefaultDeadLetterMaxAge
	if f.duration("deadletter_max_age", &fc.DeadLetterMaxAge) && fc.DeadLetterMaxAge < time.Minute {
		f.problem("deadletter_max_age", "must be at least 1m, got %v", fc.DeadLetterMaxAge)
	}
	f.str("data_dir", &fc.DataDir)
	if f.duration("export_interval", &fc.ExportInterval) && fc.ExportInterval != 0 && fc.ExportInterval < time.Second {
		f.problem("export_interval", "must be 0 (no periodic export) or at least 1s, got %v", fc.ExportInterval)
	}
	f.str("artifact_key", &fc.ArtifactKey)
	var standbys, partitions int64 = 1, 1
	if f.integer("standbys", &standbys) && (standbys < 0 || standbys > 8) {
		f.problem("standbys", "must be between 0 and 8, got %d", standbys)
	}
	if f.integer("partitions", &partitions) && (partitions < 1 || partitions > protocol.MaxPartitions) {
		f.problem("partitions", "must be 1 to %d, got %d", protocol.MaxPartitions, partitions)
	}
	fc.Standbys, fc.Partitions = int(standbys), int(partitions)
	if f.duration("batch_window", &fc.BatchWindow) && (fc.BatchWindow <= 0 || fc.BatchWindow > maxWindow) {
		f.problem("batch_window", "must be > 0 and at most %v, got %v", maxWindow, fc.BatchWindow)
	}
	if f.integer("batch_size", &batch) && (batch < 1 || batch > maxBatchSize) {
		f.problem("batch_size", "must be between 1 and %d, got %d", maxBatchSize, batch)
	}
	if f.integer("buffer", &buffer) && (buffer < 1 || buffer > maxBuffer) {
		f.problem("buffer", "must be between 1 and %d, got %d", maxBuffer, buffer)
	}
	fc.BatchSize, fc.Buffer = clampInt(batch), clampInt(buffer)
	f.str("repair", &repair)
	fc.Repair = protocol.RepairAuto
	if repair != "" {
		if err := fc.Repair.UnmarshalText([]byte(repair)); err != nil {
			f.problem("repair", "%q is not a repair mode: want none, relist, restore or auto", repair)
		}
	}
	f.boolean("sync", &fc.Sync)
	f.str("effects_stream", &fc.EffectsStream)
	f.strings("effects_subjects", &fc.EffectsSubjects)
	f.str("effects_fence", &fc.EffectsFence)
	if fc.EffectsFence != "" && fc.EffectsStream == "" {
		f.problem("effects_fence", "needs effects_stream (the stream that captures it)")
	}
	if len(fc.EffectsSubjects) > 0 && fc.EffectsStream == "" {
		f.problem("effects_subjects", "needs effects_stream (the stream that captures them)")
	}
	fc.EffectsMaxWait = host.DefaultEffectsMaxWait
	if f.duration("effects_max_wait", &fc.EffectsMaxWait) && fc.EffectsMaxWait < 0 {
		f.problem("effects_max_wait", "must be 0s (readiness ignores the outbox) or a positive duration, got %v", fc.EffectsMaxWait)
	}
	if f.integer("disk_reserve_mb", &fc.DiskReserveMB) && (fc.DiskReserveMB < -1 || fc.DiskReserveMB > 1<<20) {
		f.problem("disk_reserve_mb", "must be -1 (none), 0 (the default: 256) or up to %d, got %d", 1<<20, fc.DiskReserveMB)
		fc.DiskReserveMB = 0
	}
	if f.integer("memtable_mb", &fc.MemTableMB) && fc.MemTableMB != 0 && (fc.MemTableMB < 4 || fc.MemTableMB > 1024) {
		f.problem("memtable_mb", "must be 0 (the default: 64) or from 4 to 1024, got %d", fc.MemTableMB)
		fc.MemTableMB = 0
	}

	// create_bucket is a table of settings, or false: never create.
	var cb *table
	switch v, _ := f.get("create_bucket"); v := v.(type) {
	case bool:
		fc.NoCreateBucket = !v
		cb = &table{path: f.key("create_bucket"), m: map[string]any{}, ps: f.ps}
	case nil, map[string]any:
		cb = f.sub("create_bucket")
	default:
		f.problem("create_bucket", "want false (never create the bucket), true, or a table [fold.create_bucket] of settings, got %s", tomlType(v))
		cb = &table{path: f.key("create_bucket"), m: map[string]any{}, ps: f.ps}
	}
	var history, maxBytes, replicas int64
	var storage string
	if cb.integer("history", &history) {
		if history < 1 || history > 64 {
			cb.problem("history", "must be between 1 and 64 (NATS KV limit), got %d", history)
		} else {
			fc.CreateBucket.History = uint8(history)
		}
	}
	if cb.duration("max_age", &fc.CreateBucket.MaxAge) && fc.CreateBucket.MaxAge < 0 {
		cb.problem("max_age", "must not be negative")
	}
	if cb.integer("max_bytes", &maxBytes) && maxBytes < 0 {
		cb.problem("max_bytes", "must be >= 0 (0 = unlimited), got %d", maxBytes)
	}
	fc.CreateBucket.MaxBytes = max(0, maxBytes)
	if cb.integer("replicas", &replicas) && (replicas < 1 || replicas > 5) {
		cb.problem("replicas", "must be between 1 and 5, got %d", replicas)
	}
	fc.CreateBucket.Replicas = int(max(0, min(replicas, 5)))
	cb.str("storage", &storage)
	switch storage {
	case "", "file":
	case "memory":
		fc.CreateBucket.Memory = true
	default:
		cb.problem("storage", "%q: want \"file\" or \"memory\"", storage)
	}
	if cb.duration("limit_marker_ttl", &fc.CreateBucket.LimitMarkerTTL) {
		if d := fc.CreateBucket.LimitMarkerTTL; d < 0 || (d > 0 && d < time.Second) {
			cb.problem("limit_marker_ttl", "must be 0 (off) or at least 1s, got %v", d)
		}
	}
	cb.done()
	fc.extractEffectsStream(f)
	f.done()
	return fc
}

// extractEffectsStream reads create_effects_stream: true, or a table of
// settings; absent or false: never create the stream.
func (fc *FoldConfig) extractEffectsStream(f *table) {
	es := &table{path: f.key("create_effects_stream"), m: map[string]any{}, ps: f.ps}
	switch v, _ := f.get("create_effects_stream"); v := v.(type) {
	case nil:
	case bool:
		fc.CreateEffectsStream = v
	case map[string]any:
		fc.CreateEffectsStream, es = true, f.sub("create_effects_stream")
	default:
		f.problem("create_effects_stream", "want true, false or a table [fold.create_effects_stream] of settings, got %s", tomlType(v))
	}
	s := &fc.EffectsStreamSettings
	var replicas int64
	if es.integer("replicas", &replicas) && (replicas < 1 || replicas > 5) {
		es.problem("replicas", "must be between 1 and 5, got %d", replicas)
	}
	s.Replicas = int(max(0, min(replicas, 5)))
	var storage string
	es.str("storage", &storage)
	switch storage {
	case "", "file":
	case "memory":
		s.Memory = true
	default:
		es.problem("storage", "%q: want \"file\" or \"memory\"", storage)
	}
	if es.duration("max_age", &s.MaxAge) && s.MaxAge < 0 {
		es.problem("max_age", "must not be negative")
	}
	if es.integer("max_bytes", &s.MaxBytes) && s.MaxBytes < 0 {
		es.problem("max_bytes", "must be >= 0 (0 = unlimited), got %d", s.MaxBytes)
		s.MaxBytes = 0
	}
	es.done()
	switch {
	case fc.CreateEffectsStream && fc.EffectsStream == "":
		f.problem("create_effects_stream", "needs effects_stream (the stream to create)")
	case fc.CreateEffectsStream && len(fc.EffectsSubjects) == 0:
		f.problem("create_effects_stream", "needs effects_subjects (the subjects the stream captures, besides the fence)")
	}
}

func (c *Config) extractArtifacts(a *table) {
	ac := &c.Artifacts
	a.str("store", &ac.Store)
	a.str("dir", &ac.Dir)
	a.str("lease_bucket", &ac.LeaseBucket)
	if a.duration("lease_ttl", &ac.LeaseTTL) && ac.LeaseTTL < time.Second {
		a.problem("lease_ttl", "must be at least 1s, got %v", ac.LeaseTTL)
	}
	a.str("holder", &ac.Holder)
	s := a.sub("s3")
	s.str("endpoint", &ac.S3.Endpoint)
	s.str("region", &ac.S3.Region)
	s.str("bucket", &ac.S3.Bucket)
	s.str("prefix", &ac.S3.Prefix)
	s.boolean("path_style", &ac.S3.PathStyle)
	s.str("access_key", &ac.S3.AccessKey)
	s.str("secret_key", &ac.S3.SecretKey)
	var part, conc int64
	if s.integer("part_size_mb", &part) && (part < 5 || part > 5120) {
		s.problem("part_size_mb", "must be between 5 (S3's minimum part) and 5120, got %d", part)
	}
	if s.integer("concurrency", &conc) && (conc < 1 || conc > 64) {
		s.problem("concurrency", "must be between 1 and 64, got %d", conc)
	}
	ac.S3.PartSizeMB, ac.S3.Concurrency = clampInt(part), clampInt(conc)
	if s.duration("request_timeout", &ac.S3.RequestTimeout) && (ac.S3.RequestTimeout < 0 || ac.S3.RequestTimeout > artifact.MaxRequestTimeout) {
		s.problem("request_timeout", "must be between 0 (the default) and %v, got %v (an upload part that could take longer would look abandoned to another node's prune)",
			artifact.MaxRequestTimeout, ac.S3.RequestTimeout)
	}
	s.done()
	a.done()
}

// extractLimits reads the plugin_max_* keys of a [[fold]] table: each an
// integer in a range, scaled to bytes (or a count).
func extractLimits(f *table) wasm.Limits {
	var l wasm.Limits
	for _, k := range []struct {
		key         string
		dst         *int
		def, lo, hi int64
		unit        int64
	}{
		{wasm.KeyMaxOutput, &l.MaxOutputBytes, wasm.DefaultMaxOutputBytes >> 20, 1, 1024, 1 << 20},
		{wasm.KeyMaxViewMutations, &l.MaxViewMutations, wasm.DefaultMaxViewMutations, 1, 10_000_000, 1},
		{wasm.KeyMaxViewKey, &l.MaxViewKeyBytes, wasm.DefaultMaxViewKeyBytes, 1, 1 << 20, 1},
		{wasm.KeyMaxViewValue, &l.MaxViewValueBytes, wasm.DefaultMaxViewValueBytes >> 10, 1, 1 << 20, 1 << 10},
		{wasm.KeyMaxRead, &l.MaxReadBytes, wasm.DefaultMaxReadBytes >> 20, 1, 1024, 1 << 20},
		{wasm.KeyMaxCallRead, &l.MaxCallReadBytes, wasm.DefaultMaxCallReadBytes >> 20, 1, 2047, 1 << 20},
		{wasm.KeyMaxError, &l.MaxErrorBytes, wasm.DefaultMaxErrorBytes, 1, 1 << 20, 1},
		{wasm.KeyMaxEffects, &l.MaxEffects, wasm.DefaultMaxEffects, 1, 1_000_000, 1},
		{wasm.KeyMaxEffect, &l.MaxEffectBytes, wasm.DefaultMaxEffectBytes >> 10, 1, 64 << 10, 1 << 10},
		{wasm.KeyMaxQueryInput, &l.MaxQueryInputBytes, wasm.DefaultMaxQueryInputBytes >> 10, 1, 64 << 10, 1 << 10},
	} {
		v := k.def
		if f.integer(k.key, &v) && (v < k.lo || v > k.hi) {
			f.problem(k.key, "must be between %d and %d, got %d", k.lo, k.hi, v)
			v = k.def
		}
		*k.dst = clampInt(v * k.unit)
	}
	return l
}

func clampInt(v int64) int { return int(max(0, min(v, 1<<31-1))) }

// applyEnv applies the environment overrides. A credential from the
// environment replaces both credential keys of the file.
func (c *Config) applyEnv(getenv Getenv, ps *problems) {
	if getenv == nil {
		return
	}
	get := func(name string) (string, bool) {
		v, ok := getenv(name)
		return v, ok && v != ""
	}
	if v, ok := get(EnvNATSURL); ok {
		c.NATS.URL = v
		ps.fromEnv["nats.url"] = EnvNATSURL
	}
	creds, hasCreds := get(EnvNATSCreds)
	file, hasFile := get(EnvNATSCredsFile)
	switch {
	case hasCreds && hasFile:
		ps.add("", "%s and %s are both set: set at most one", EnvNATSCreds, EnvNATSCredsFile)
	case hasCreds:
		c.NATS.Creds, c.NATS.CredsFile = creds, ""
		ps.fromEnv["nats.creds"] = EnvNATSCreds
	case hasFile:
		c.NATS.Creds, c.NATS.CredsFile = "", file
		ps.fromEnv["nats.creds_file"] = EnvNATSCredsFile
	}
	// Without keys from the file or here, the AWS SDK's default chain
	// applies (AWS_* variables, shared files, roles).
	s3 := &c.Artifacts.S3
	ak, hasAK := get(EnvS3AccessKey)
	sk, hasSK := get(EnvS3SecretKey)
	if hasAK || hasSK {
		s3.AccessKey, s3.SecretKey = ak, sk
		ps.fromEnv["artifacts.s3.access_key"] = EnvS3AccessKey
	}
	s3.SessionToken, _ = get(EnvS3SessionToken)
}
