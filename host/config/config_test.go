package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
)

func noEnv(string) (string, bool) { return "", false }

func envOf(m map[string]string) Getenv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// parseIn parses text as dir/config.toml.
func parseIn(t *testing.T, dir, text string, env Getenv) (*Config, error) {
	t.Helper()
	return Parse([]byte(text), filepath.Join(dir, "config.toml"), env)
}

func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *Error", err, err)
	}
	return ce.Problems
}

func TestExampleConfigParsesAndValidates(t *testing.T) {
	data, err := os.ReadFile("../../config.toml.example")
	if err != nil {
		t.Fatal(err)
	}
	// From the repository's root, where its plugin path resolves.
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseIn(t, dir, string(data), noEnv)
	if err != nil {
		t.Fatalf("config.toml.example: %v", err)
	}
	if len(cfg.Folds) != 2 || cfg.Folds[0].Name != "routes" || cfg.Folds[1].Name != "inventory" {
		t.Fatalf("folds = %+v", cfg.Folds)
	}
	// The example states the defaults: a minimal config must come out the
	// same apart from what the example sets on purpose.
	min, err := parseIn(t, dir, "[[fold]]\nname = \"routes\"\nscope = [\"route.\"]\nplugin = \"plugins/example-router/embedded/router-c.wasm\"\n[[fold]]\nname = \"inventory\"\n", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, min) {
		t.Errorf("config.toml.example's values differ from the defaults:\nexample: %+v\ndefaults: %+v", cfg, min)
	}
}

// TestCreateBucketFalse: create_bucket = false refuses a missing bucket
// (host.FoldOptions.NoCreateBucket); true, or a table, creates it (the
// default). Mutation caught: the boolean form read as a table (refused).
func TestCreateBucketFalse(t *testing.T) {
	for text, want := range map[string]bool{
		"[[fold]]\nname = \"a\"\ncreate_bucket = false\n":             true,
		"[[fold]]\nname = \"a\"\ncreate_bucket = true\n":              false,
		"[[fold]]\nname = \"a\"\n":                                    false,
		"[[fold]]\nname = \"a\"\n[fold.create_bucket]\nhistory = 2\n": false,
	} {
		cfg, opts := firstFold(t, text)
		if got := opts.NoCreateBucket; got != want || cfg.NoCreateBucket != want {
			t.Errorf("%q: NoCreateBucket = %v, want %v", text, got, want)
		}
	}
}

// firstFold parses text and returns its first fold's config and host
// options.
func firstFold(t *testing.T, text string) (FoldConfig, host.FoldOptions) {
	t.Helper()
	cfg, err := parseIn(t, t.TempDir(), text, noEnv)
	if err != nil {
		t.Fatalf("%q: %v", text, err)
	}
	opts, err := cfg.HostOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Folds[0], opts.Folds[0]
}

func TestConfigDefaults(t *testing.T) {
	dir := t.TempDir()
	cfg, err := parseIn(t, dir, "[[fold]]\nname = \"a\"\n", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		File:          filepath.Join(dir, "config.toml"),
		DataDir:       filepath.Join(dir, "data"),
		ShutdownGrace: 30 * time.Second,
		NATS: NATSConfig{
			Embedded: true, EmbeddedListen: "127.0.0.1:4222", EmbeddedDir: filepath.Join(dir, "data", "nats"),
			ConnectTimeout: 5 * time.Second, RequestTimeout: natskv.DefaultRequestTimeout, HeadPollInterval: 5 * time.Second, DisconnectGrace: 10 * time.Second,
		},
		HTTP: HTTPConfig{Addr: "127.0.0.1:8080"},
		Log:  LogConfig{Level: "info", Format: "text", ProgressInterval: 5 * time.Second},
		Artifacts: ArtifactsConfig{
			Store: "local", Dir: filepath.Join(dir, "data", "artifacts"), LeaseBucket: "foldhost_export_leases",
			LeaseTTL: 5 * time.Minute, Holder: hostname(t),
			S3: S3Config{Region: "us-east-1", PartSizeMB: 8, Concurrency: 8, RequestTimeout: 2 * time.Minute},
		},
		Fleet: FleetConfig{Replicas: 1},
		Folds: []FoldConfig{{
			Name: "a", Bucket: "a", DataDir: filepath.Join(dir, "data", "folds", "a"), ArtifactKey: "a", Standbys: 1, Partitions: 1,
			BatchWindow: fold.DefaultWindow, BatchSize: fold.DefaultMaxBatch, Buffer: 256, PluginMemoryMB: 256, PluginRetries: 2,
			PluginCallTimeout: wasm.DefaultCallTimeout, PluginMaxMB: 64,
			PluginLimits: wasm.Limits{MaxOutputBytes: 16 << 20, MaxViewMutations: 100_000, MaxViewKeyBytes: 4096,
				MaxViewValueBytes: 1 << 20, MaxReadBytes: 16 << 20, MaxCallReadBytes: 256 << 20, MaxErrorBytes: 4096,
				MaxEffects: 10_000, MaxEffectBytes: 1 << 20, MaxQueryInputBytes: 1 << 20},
			OnPluginError: "stop", DeadLetterMax: 10000, DeadLetterMaxAge: 7 * 24 * time.Hour,
			Repair: protocol.RepairAuto, CreateBucket: natskv.BucketConfig{Name: "a", History: 1, Replicas: 1},
			EffectsMaxWait: 5 * time.Minute,
		}},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", cfg, want)
	}
}

func TestConfigValues(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "router.wasm"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.creds"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseIn(t, dir, `
data_dir = "/var/lib/foldhost"
[nats]
url = "nats://a:4222,nats://b:4222"
creds_file = "app.creds"
[http]
addr = ":9090"
[log]
level = "debug"
format = "json"
[[fold]]
name = "r"
bucket = "routes"
scope = ["route.", "tenant.a."]
plugin = "router.wasm"
on_plugin_error = "skip"
deadletter_max = 50
deadletter_max_age = "1h"
plugin_max_output_mb = 32
plugin_max_view_mutations = 5000
plugin_max_view_key_bytes = 512
plugin_max_view_value_kb = 64
plugin_max_read_mb = 2
plugin_max_call_read_mb = 8
plugin_max_error_bytes = 100
plugin_max_effects = 7
plugin_max_effect_kb = 2
plugin_max_query_input_kb = 4
plugin_query_instances = 3
effects_stream = "ROUTE_EVENTS"
effects_subjects = ["route.changed"]
effects_max_wait = "90s"
data_dir = "r-data"
batch_window = "25ms"
batch_size = 1024
buffer = 4096
repair = "relist"
sync = true
[fold.create_bucket]
history = 5
max_age = "24h"
max_bytes = 1048576
replicas = 3
storage = "memory"
limit_marker_ttl = "1m"
`, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATS.Embedded || cfg.NATS.URL != "nats://a:4222,nats://b:4222" || cfg.NATS.CredsFile != filepath.Join(dir, "app.creds") {
		t.Errorf("nats = %+v", cfg.NATS)
	}
	f := cfg.Folds[0]
	want := FoldConfig{
		Name: "r", Bucket: "routes", Scope: []string{"route.", "tenant.a."},
		Plugin: filepath.Join(dir, "router.wasm"), DataDir: filepath.Join(dir, "r-data"), ArtifactKey: "r", Standbys: 1, Partitions: 1,
		BatchWindow: 25 * time.Millisecond, BatchSize: 1024, Buffer: 4096, Repair: protocol.RepairRelist, Sync: true, PluginMemoryMB: 256, PluginRetries: 2,
		OnPluginError: "skip", DeadLetterMax: 50, DeadLetterMaxAge: time.Hour,
		PluginCallTimeout: wasm.DefaultCallTimeout, PluginMaxMB: 64,
		PluginLimits: wasm.Limits{MaxOutputBytes: 32 << 20, MaxViewMutations: 5000, MaxViewKeyBytes: 512,
			MaxViewValueBytes: 64 << 10, MaxReadBytes: 2 << 20, MaxCallReadBytes: 8 << 20, MaxErrorBytes: 100,
			MaxEffects: 7, MaxEffectBytes: 2 << 10, MaxQueryInputBytes: 4 << 10},
		PluginQueryInstances: 3,
		CreateBucket: natskv.BucketConfig{Name: "routes", History: 5, MaxAge: 24 * time.Hour, MaxBytes: 1 << 20,
			Replicas: 3, Memory: true, LimitMarkerTTL: time.Minute},
		EffectsStream: "ROUTE_EVENTS", EffectsSubjects: []string{"route.changed"}, EffectsMaxWait: 90 * time.Second,
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("fold:\n got %+v\nwant %+v", f, want)
	}
	if cfg.DataDir != "/var/lib/foldhost" || cfg.HTTP.Addr != ":9090" || cfg.Log.Format != "json" {
		t.Errorf("cfg = %+v", cfg)
	}
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "foldhost"
	}
	return h
}

func TestConfigArtifacts(t *testing.T) {
	dir := t.TempDir()
	cfg, err := parseIn(t, dir, `
[artifacts]
store = "s3"
lease_bucket = "leases"
lease_ttl = "90s"
holder = "edge-7"
[artifacts.s3]
endpoint = "http://127.0.0.1:7070"
region = "eu-west-1"
bucket = "folds"
prefix = "prod/"
path_style = true
part_size_mb = 16
concurrency = 4
request_timeout = "30s"
[[fold]]
name = "a"
export_interval = "10m"
artifact_key = "a-v2"
[[fold]]
name = "b"
`, envOf(map[string]string{EnvS3AccessKey: "AKIA", EnvS3SecretKey: "s3cr3t", EnvS3SessionToken: "tok", "AWS_ACCESS_KEY_ID": "left-to-the-sdk"}))
	if err != nil {
		t.Fatal(err)
	}
	want := ArtifactsConfig{Store: "s3", LeaseBucket: "leases", LeaseTTL: 90 * time.Second, Holder: "edge-7",
		S3: S3Config{Endpoint: "http://127.0.0.1:7070", Region: "eu-west-1", Bucket: "folds", Prefix: "prod/", PathStyle: true,
			AccessKey: "AKIA", SecretKey: "s3cr3t", SessionToken: "tok", PartSizeMB: 16, Concurrency: 4, RequestTimeout: 30 * time.Second}}
	if !reflect.DeepEqual(cfg.Artifacts, want) {
		t.Errorf("artifacts:\n got %+v\nwant %+v", cfg.Artifacts, want)
	}
	if f := cfg.Folds[0]; f.ExportInterval != 10*time.Minute || f.ArtifactKey != "a-v2" || cfg.Folds[1].ArtifactKey != "b" {
		t.Errorf("folds = %+v", cfg.Folds)
	}
	// FOLDHOST_S3_* win over the file.
	cfg, err = parseIn(t, dir, "[artifacts]\nstore = \"s3\"\n[artifacts.s3]\nbucket = \"x\"\naccess_key = \"file\"\nsecret_key = \"file\"\n[[fold]]\nname = \"a\"\n",
		envOf(map[string]string{EnvS3AccessKey: "env", EnvS3SecretKey: "envs"}))
	if err != nil || cfg.Artifacts.S3.AccessKey != "env" || cfg.Artifacts.S3.SecretKey != "envs" {
		t.Errorf("env keys: %v %+v", err, cfg)
	}

	_, err = parseIn(t, dir, `
[artifacts]                # 2
store = "s3"               # 3
dir = "x"                  # 4
lease_ttl = "10ms"         # 5
lease_bucket = "a.b"       # 6
[artifacts.s3]             # 7
access_key = "only"        # 8
part_size_mb = 1           # 9
concurrency = 0            # 10
request_timeout = "6m"
[[fold]]                   # 11
name = "a"                 # 12
export_interval = "10ms"   # 13
artifact_key = "a/b"       # 14
[[fold]]                   # 15
name = "b"                 # 16
artifact_key = "c"         # 17
[[fold]]                   # 18
name = "c"                 # 19
`, noEnv)
	ps := problemsOf(t, err)
	wantPs := []struct{ key, msg string }{
		{"artifacts.lease_ttl", "at least 1s"},
		{"artifacts.s3.part_size_mb", "between 5"},
		{"artifacts.s3.concurrency", "between 1 and 64"},
		{"artifacts.s3.request_timeout", "look abandoned"},
		{"fold[0].export_interval", "at least 1s"},
		{"artifacts.s3.bucket", "required"},
		{"artifacts.dir", "local store's"},
		{"artifacts.s3.secret_key", "go together"},
		{"artifacts.lease_bucket", "not a valid KV bucket name"},
		{"fold[0].artifact_key", `"a/b"`},
		{"fold[2].artifact_key", "also the artifact key of fold[1]"},
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Key+": "+p.Msg)
	}
	for _, w := range wantPs {
		found := false
		for _, p := range ps {
			found = found || (p.Key == w.key && strings.Contains(p.Msg, w.msg))
		}
		if !found {
			t.Errorf("no problem %s: ...%s...; got:\n%s", w.key, w.msg, strings.Join(got, "\n"))
		}
	}
	if len(ps) != len(wantPs) {
		t.Errorf("%d problems, want %d:\n%s", len(ps), len(wantPs), strings.Join(got, "\n"))
	}
	_, err = parseIn(t, dir, "[artifacts]\nstore = \"ftp\"\n[[fold]]\nname = \"a\"\n", noEnv)
	if ps := problemsOf(t, err); len(ps) != 1 || ps[0].Key != "artifacts.store" {
		t.Errorf("bad store: %v", err)
	}
}

func TestConfigReportsEveryProblemAtOnce(t *testing.T) {
	dir := t.TempDir()
	text := `data_dir = 5                       # 1
[nats]                                # 2
url = "embedded"                      # 3
creds = "secret"                      # 4
embedded_listen = "0.0.0.0:4222"      # 5
connect_timeout = "-1s"               # 6
[http]                                # 7
addr = "nohost"                       # 8
[log]                                 # 9
level = "loud"                        # 10
[[fold]]                              # 11
name = "a b"                          # 12
batch_size = 0                        # 13
batch_window = 10                     # 14
repair = "sometimes"                  # 15
scope = ["route"]                     # 16
buffer = "big"                        # 17
sync = "yes"                          # 18
[fold.create_bucket]                  # 19
history = 100                         # 20
storage = "ssd"                       # 21
max_age = "soon"                      # 22
replicas = 0                          # 23
[[fold]]                              # 24
name = "b"                            # 25
plugin = "missing.wasm"               # 26
[[fold]]                              # 27
name = "b"                            # 28
`
	_, err := parseIn(t, dir, text, noEnv)
	ps := problemsOf(t, err)
	want := []struct {
		line int
		key  string
		msg  string
	}{
		{1, "data_dir", "want a string, got an integer"},
		{4, "nats.creds", "embedded server"},
		{5, "nats.embedded_listen", "not a loopback address"},
		{6, "nats.connect_timeout", "must not be negative"},
		{8, "http.addr", "want host:port"},
		{10, "log.level", `"loud"`},
		{12, "fold[0].name", `"a b"`},
		{13, "fold[0].batch_size", "between 1 and"},
		{14, "fold[0].batch_window", "want a duration string"},
		{15, "fold[0].repair", "not a repair mode"},
		{16, "fold[0].scope", `must end with "."`},
		{17, "fold[0].buffer", "want an integer, got a string"},
		{18, "fold[0].sync", "want true or false"},
		{20, "fold[0].create_bucket.history", "between 1 and 64"},
		{21, "fold[0].create_bucket.storage", `"ssd"`},
		{22, "fold[0].create_bucket.max_age", "not a duration"},
		{23, "fold[0].create_bucket.replicas", "between 1 and 5"},
		{26, "fold[1].plugin", "no such file"},
		{28, "fold[2].name", "also the name of fold[1]"},
	}
	if len(ps) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(ps), len(want), err)
	}
	for i, w := range want {
		if i >= len(ps) {
			break
		}
		p := ps[i]
		if p.Line != w.line || p.Key != w.key || !strings.Contains(p.Msg, w.msg) {
			t.Errorf("problem %d = %s, want line %d: %s: ...%s...", i, p, w.line, w.key, w.msg)
		}
	}
	// The message names the file and lists them all.
	msg := err.Error()
	if !strings.Contains(msg, "config.toml: 19 problems:") || !strings.Contains(msg, "line 23: fold[0].create_bucket.replicas") {
		t.Errorf("message:\n%s", msg)
	}
}

func TestConfigUnknownKeys(t *testing.T) {
	text := `colour = "blue"
[nats]
embeded_listen = "127.0.0.1:1"
[https]
addr = "x"
[[fold]]
name = "a"
Bucket = "a"
[fold.create_bucket]
histroy = 2
[[fold]]
name = "b"
bufer = 10
`
	_, err := parseIn(t, t.TempDir(), text, noEnv)
	ps := problemsOf(t, err)
	want := []Problem{
		{Line: 1, Key: "colour", Msg: "unknown key"},
		{Line: 3, Key: "nats.embeded_listen", Msg: `unknown key (did you mean "embedded_listen"?)`},
		{Line: 4, Key: "https", Msg: `unknown key (did you mean "http"?)`},
		{Line: 8, Key: "fold[0].Bucket", Msg: `unknown key (did you mean "bucket"?)`},
		{Line: 10, Key: "fold[0].create_bucket.histroy", Msg: `unknown key (did you mean "history"?)`},
		{Line: 13, Key: "fold[1].bufer", Msg: `unknown key (did you mean "buffer"?)`},
	}
	if !reflect.DeepEqual(ps, want) {
		t.Fatalf("problems:\n%v\nwant:\n%v", err, &Error{File: "config.toml", Problems: want})
	}
}

func TestConfigStructureErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"no folds", "", "fold: no [[fold]] section"},
		{"fold as table", "[fold]\nname = \"a\"\n", "write [[fold]], not [fold]"},
		{"nats not a table", "nats = \"x\"\n[[fold]]\nname = \"a\"\n", "nats: want a table"},
		{"missing name", "[[fold]]\nbucket = \"b\"\n", "fold[0].name: is required"},
		{"bad bucket", "[[fold]]\nname = \"a\"\nbucket = \"a.b\"\n", "not a valid KV bucket name"},
		{"overlapping scope", "[[fold]]\nname = \"a\"\nscope = [\"a.\", \"a.b.\"]\n", "overlap"},
		{"scope not strings", "[[fold]]\nname = \"a\"\nscope = [1]\n", "element 0: want a string"},
		{"same data dir", "[[fold]]\nname = \"a\"\ndata_dir = \"d\"\n[[fold]]\nname = \"b\"\ndata_dir = \"d\"\n", "is also the data dir of fold[0]"},
		{"create_bucket disagrees", "[[fold]]\nname = \"a\"\nbucket = \"x\"\n[[fold]]\nname = \"b\"\nbucket = \"x\"\n[fold.create_bucket]\nhistory = 3\n", "differs from fold[0]"},
		{"creds twice", "[nats]\nurl = \"nats://x\"\ncreds = \"a\"\ncreds_file = \"/etc/passwd\"\n[[fold]]\nname = \"a\"\n", "both set"},
		{"half a client cert", "[nats]\nurl = \"nats://x\"\ntls_cert_file = \"/etc/passwd\"\n[[fold]]\nname = \"a\"\n", "set both or neither"},
		{"window too long", "[[fold]]\nname = \"a\"\nbatch_window = \"2m\"\n", "at most 1m0s"},
		{"short marker ttl", "[[fold]]\nname = \"a\"\n[fold.create_bucket]\nlimit_marker_ttl = \"10ms\"\n", "at least 1s"},
		{"create_bucket a string", "[[fold]]\nname = \"a\"\ncreate_bucket = \"no\"\n", "create_bucket: want false (never create the bucket), true, or a table"},
		{"create_bucket false disagrees", "[[fold]]\nname = \"a\"\nbucket = \"x\"\ncreate_bucket = false\n[[fold]]\nname = \"b\"\nbucket = \"x\"\n", "differs from fold[0]"},
		{"plugin memory", "[[fold]]\nname = \"a\"\nplugin_memory_mb = 0\n", "plugin_memory_mb: must be between 1 and 4096"},
		{"plugin retries", "[[fold]]\nname = \"a\"\nplugin_retries = -1\n", "plugin_retries: must be between 0 and 100"},
		{"query instances", "[[fold]]\nname = \"a\"\nplugin_query_instances = 0\n", "plugin_query_instances: must be between 1 and 64"},
		{"plugin output", "[[fold]]\nname = \"a\"\nplugin_max_output_mb = 0\n", "plugin_max_output_mb: must be between 1 and 1024"},
		{"plugin view mutations", "[[fold]]\nname = \"a\"\nplugin_max_view_mutations = 10000001\n", "plugin_max_view_mutations: must be between 1 and 10000000"},
		{"plugin effects", "[[fold]]\nname = \"a\"\nplugin_max_effects = 0\n", "plugin_max_effects: must be between 1 and 1000000"},
		{"effects subjects alone", "[[fold]]\nname = \"a\"\neffects_subjects = [\"x\"]\n", "effects_subjects: needs effects_stream"},
		{"plugin view key", "[[fold]]\nname = \"a\"\nplugin_max_view_key_bytes = 0\n", "plugin_max_view_key_bytes: must be between 1 and 1048576"},
		{"plugin view value", "[[fold]]\nname = \"a\"\nplugin_max_view_value_kb = 1048577\n", "plugin_max_view_value_kb: must be between 1 and 1048576"},
		{"plugin read", "[[fold]]\nname = \"a\"\nplugin_max_read_mb = 1025\n", "plugin_max_read_mb: must be between 1 and 1024"},
		{"plugin call read", "[[fold]]\nname = \"a\"\nplugin_max_call_read_mb = 2048\n", "plugin_max_call_read_mb: must be between 1 and 2047"},
		{"plugin error", "[[fold]]\nname = \"a\"\nplugin_max_error_bytes = \"4k\"\n", "plugin_max_error_bytes: want an integer"},
		{"on plugin error", "[[fold]]\nname = \"a\"\non_plugin_error = \"ignore\"\n", "on_plugin_error: must be \"stop\" or \"skip\""},
		{"dead letters", "[[fold]]\nname = \"a\"\ndeadletter_max = 0\n", "deadletter_max: must be between 1 and 1000000"},
		{"plugin timeout", "[[fold]]\nname = \"a\"\nplugin_call_timeout = \"-1s\"\n", "plugin_call_timeout: must be >= 0"},
		{"syntax", "[[fold]]\nname = \"a\"\nbatch_size = = 3\n", "line 3: syntax:"},
		{"duplicate key", "[[fold]]\nname = \"a\"\nname = \"b\"\n", "line 3: syntax:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseIn(t, t.TempDir(), tc.text, noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestConfigEnvOverrides(t *testing.T) {
	dir := t.TempDir()
	base := "[nats]\nurl = \"nats://file:4222\"\ncreds_file = \"/etc/passwd\"\n[[fold]]\nname = \"a\"\n"
	cfg, err := parseIn(t, dir, base, envOf(map[string]string{
		EnvNATSURL:   "nats://env:4222",
		EnvNATSCreds: "-----BEGIN NATS USER JWT-----",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATS.URL != "nats://env:4222" || cfg.NATS.Creds != "-----BEGIN NATS USER JWT-----" || cfg.NATS.CredsFile != "" {
		t.Errorf("nats = %+v", cfg.NATS)
	}
	// The creds file from the environment replaces inline creds.
	cfg, err = parseIn(t, dir, "[nats]\nurl = \"nats://x\"\ncreds = \"inline\"\n[[fold]]\nname = \"a\"\n",
		envOf(map[string]string{EnvNATSCredsFile: "/etc/passwd"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATS.Creds != "" || cfg.NATS.CredsFile != "/etc/passwd" {
		t.Errorf("nats = %+v", cfg.NATS)
	}
	// Empty variables do not override.
	cfg, err = parseIn(t, dir, base, envOf(map[string]string{EnvNATSURL: ""}))
	if err != nil || cfg.NATS.URL != "nats://file:4222" {
		t.Errorf("empty env: %v, %+v", err, cfg)
	}
	// The environment can select the embedded server.
	cfg, err = parseIn(t, dir, "[nats]\nurl = \"nats://file:4222\"\n[[fold]]\nname = \"a\"\n", envOf(map[string]string{EnvNATSURL: "embedded"}))
	if err != nil || !cfg.NATS.Embedded {
		t.Errorf("embedded from env: %v, %+v", err, cfg)
	}
	// Problems name the variable, not a line.
	_, err = parseIn(t, dir, "[[fold]]\nname = \"a\"\n", envOf(map[string]string{EnvNATSCreds: "x"}))
	ps := problemsOf(t, err)
	if len(ps) != 1 || ps[0].Env != EnvNATSCreds || ps[0].Line != 0 || !strings.Contains(ps[0].String(), "nats.creds (from $FOLDHOST_NATS_CREDS)") {
		t.Errorf("problems = %v", ps)
	}
	_, err = parseIn(t, dir, base, envOf(map[string]string{EnvNATSCreds: "x", EnvNATSCredsFile: "y"}))
	if err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("both creds variables: %v", err)
	}
	_, err = parseIn(t, dir, base, envOf(map[string]string{EnvNATSCredsFile: filepath.Join(dir, "nope.creds")}))
	if ps := problemsOf(t, err); len(ps) != 1 || ps[0].Env != EnvNATSCredsFile {
		t.Errorf("missing creds file from env: %v", err)
	}
}

func TestLocateKeys(t *testing.T) {
	text := `top = 1
desc = """
fake = 2
[fake]
"""
list = [
  "a = b",
  "[x]",
]
[nats]
url = "u"   # comment = x
"quoted.key" = 3
[[fold]]
name = "a"
[fold.create_bucket]
history = 1
[[fold]]
name = "b"
a.b = 1
`
	got := locateKeys(text)
	want := map[string]int{
		"top": 1, "desc": 2, "list": 6, "nats": 10, "nats.url": 11, "nats.quoted.key": 12,
		"fold[0]": 13, "fold[0].name": 14, "fold[0].create_bucket": 15, "fold[0].create_bucket.history": 16,
		"fold[1]": 17, "fold[1].name": 18, "fold[1].a": 19, "fold[1].a.b": 19,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("locateKeys:\n got %v\nwant %v", got, want)
	}
}

// TestConfigRefusesSharedDirectories: stores that resolve to one directory,
// or lie inside one another, are refused naming both (two folds whose data
// dirs were one directory through a symlink used to be accepted, and the
// second wiped the first), and so are a fold store shared with the local
// artifact store, the embedded NATS server or the plugin cache.
func TestConfigRefusesSharedDirectories(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ text, want string }{
		"symlink": {`
[[fold]]
name = "a"
data_dir = "real"
[[fold]]
name = "b"
data_dir = "link"
`, "fold[0].data_dir: " + filepath.Join(dir, "real") + " is the same directory as fold[1].data_dir (" + filepath.Join(dir, "link") + ")"},
		"nested, through a symlink": {`
[[fold]]
name = "a"
data_dir = "real"
[[fold]]
name = "b"
data_dir = "link/inner"
`, "fold[0].data_dir: " + filepath.Join(dir, "real") + " overlaps fold[1].data_dir"},
		"artifacts": {`
[artifacts]
dir = "store"
[[fold]]
name = "a"
data_dir = "store"
`, "fold[0].data_dir: " + filepath.Join(dir, "store") + " is the same directory as artifacts.dir"},
		"the whole data dir": {`
[[fold]]
name = "a"
data_dir = "data"
`, "fold[0].data_dir: " + filepath.Join(dir, "data") + " overlaps artifacts.dir"},
		"embedded NATS": {`
[nats]
embedded_dir = "link/nats"
[[fold]]
name = "a"
data_dir = "real"
`, "overlaps nats.embedded_dir"},
	} {
		_, err := parseIn(t, dir, c.text, noEnv)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant a problem saying %q", name, err, c.want)
		}
	}
}

// TestConfigPluginMustBeARegularFile: /dev/zero (read without a limit, it
// ran the machine out of memory), a FIFO (blocked forever) and a module
// over plugin_max_mb are refused at config time.
func TestConfigPluginMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.wasm")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.wasm")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/dev/zero": "not a regular file (a device)",
		fifo:        "not a regular file (a FIFO)",
		dir:         "not a regular file (a directory)",
		big:         "file too large: 2097152 bytes, the limit is 1048576",
	} {
		_, err := parseIn(t, dir, fmt.Sprintf("[[fold]]\nname = \"a\"\nplugin = %q\nplugin_max_mb = 1\n", path), noEnv)
		if err == nil || !strings.Contains(err.Error(), "fold[0].plugin") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a fold[0].plugin problem saying %q", path, err, want)
		}
	}
}

func TestFoldPicksByNameOrTheOnlyOne(t *testing.T) {
	dir := t.TempDir()
	two, err := parseIn(t, dir, "[[fold]]\nname = \"a\"\n[[fold]]\nname = \"b\"\n", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := two.Fold("b"); err != nil || f.Name != "b" {
		t.Errorf(`Fold("b") = %q, %v`, f.Name, err)
	}
	if _, err := two.Fold(""); err == nil || !strings.Contains(err.Error(), "2 folds") {
		t.Errorf(`Fold("") with two folds: err = %v, want one naming the count`, err)
	}
	if _, err := two.Fold("c"); err == nil || !strings.Contains(err.Error(), `"c"`) {
		t.Errorf(`Fold("c"): err = %v, want one naming "c"`, err)
	}
	one, err := parseIn(t, dir, "[[fold]]\nname = \"only\"\n", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := one.Fold(""); err != nil || f.Name != "only" {
		t.Errorf(`Fold("") with one fold = %q, %v`, f.Name, err)
	}
}

// TestLoadBoundsTheFile: Load reads only a regular file of at most
// MaxFileSize; a FIFO is refused without blocking.
func TestLoadBoundsTheFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, append([]byte("[[fold]]\nname = \"a\"\n#"), bytes.Repeat([]byte("x"), MaxFileSize)...), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]error{fifo: files.ErrNotRegular, big: files.ErrTooLarge, dir: files.ErrNotRegular} {
		done := make(chan error, 1)
		go func() { _, err := Load(path, noEnv); done <- err }()
		select {
		case err := <-done:
			var ce *Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), want.Error()) {
				t.Errorf("Load(%s) = %v, want a *Error saying %q", filepath.Base(path), err, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("Load(%s) blocked", filepath.Base(path))
		}
	}
}

// disk_reserve_mb reaches the fold's store in bytes: -1 is none, 0 the
// store's default; anything below -1 is refused.
func TestConfigDiskReserve(t *testing.T) {
	for text, want := range map[string]int64{"": 0, "disk_reserve_mb = 0": 0, "disk_reserve_mb = 16": 16 << 20, "disk_reserve_mb = -1": -1} {
		if got := foldOptionsOf(t, text).DiskReserve; got != want {
			t.Errorf("%q: DiskReserve %d, want %d", text, got, want)
		}
	}
	refuseFoldKey(t, "disk_reserve_mb", "disk_reserve_mb = -2")
}

// foldOptionsOf is the host options of the only fold of a config whose
// fold table holds text.
func foldOptionsOf(t *testing.T, text string) host.FoldOptions {
	t.Helper()
	cfg, err := parseIn(t, t.TempDir(), "[nats]\nurl = \"embedded\"\n[[fold]]\nname = \"a\"\n"+text+"\n", noEnv)
	if err != nil {
		t.Fatalf("%q: %v", text, err)
	}
	o, err := cfg.HostOptions(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return o.Folds[0]
}

// refuseFoldKey checks that each of texts in the fold table is one
// problem naming the fold's key.
func refuseFoldKey(t *testing.T, key string, texts ...string) {
	t.Helper()
	for _, text := range texts {
		_, err := parseIn(t, t.TempDir(), "[nats]\nurl = \"embedded\"\n[[fold]]\nname = \"a\"\n"+text+"\n", noEnv)
		if ps := problemsOf(t, err); len(ps) != 1 || ps[0].Key != "fold[0]."+key {
			t.Errorf("%s: %v", text, err)
		}
	}
}

// TestConfigRefusesANonNATSURL: nats.url with an http:// (or any non-NATS)
// scheme is a config problem, from the file or the environment; it was
// accepted and dialled as a NATS server.
func TestConfigRefusesANonNATSURL(t *testing.T) {
	dir := t.TempDir()
	_, err := parseIn(t, dir, "[nats]\nurl = \"http://127.0.0.1:8080\"\n[[fold]]\nname = \"a\"\n", noEnv)
	if ps := problemsOf(t, err); len(ps) != 1 || ps[0].Line != 2 || !strings.Contains(ps[0].String(), "nats.url") || !strings.Contains(ps[0].String(), "is not a NATS scheme") {
		t.Errorf("an http:// nats.url: %v", err)
	}
	_, err = parseIn(t, dir, "[[fold]]\nname = \"a\"\n", envOf(map[string]string{EnvNATSURL: "http://127.0.0.1:8080"}))
	if ps := problemsOf(t, err); len(ps) != 1 || ps[0].Env != EnvNATSURL {
		t.Errorf("an http:// $FOLDHOST_NATS_URL: %v", err)
	}
}

// TestConfigMemTable: memtable_mb reaches the fold's options in bytes; 0 or
// absent leaves the store's default; out of range is a problem naming it.
func TestConfigMemTable(t *testing.T) {
	for text, want := range map[string]uint64{"": 0, "memtable_mb = 0": 0, "memtable_mb = 8": 8 << 20} {
		if got := foldOptionsOf(t, text).MemTableSize; got != want {
			t.Errorf("%q: MemTableSize %d, want %d", text, got, want)
		}
	}
	refuseFoldKey(t, "memtable_mb", "memtable_mb = 2", "memtable_mb = -1", "memtable_mb = 2048")
}

// TestConfigEffectsMaxWait: effects_max_wait reaches the fold's options
// (default 5m; "0s": never, a negative EffectsMaxWait there); a negative
// duration is a problem naming it.
func TestConfigEffectsMaxWait(t *testing.T) {
	for text, want := range map[string]time.Duration{"": host.DefaultEffectsMaxWait, `effects_max_wait = "0s"`: -1, `effects_max_wait = "90s"`: 90 * time.Second} {
		if got := foldOptionsOf(t, text).EffectsMaxWait; got != want {
			t.Errorf("%q: EffectsMaxWait %v, want %v", text, got, want)
		}
	}
	refuseFoldKey(t, "effects_max_wait", `effects_max_wait = "-1s"`, `effects_max_wait = "soon"`)
}

// TestConfigEffectsFence: effects_fence reaches the fold's options and
// needs effects_stream; a wildcard is not a fence.
func TestConfigEffectsFence(t *testing.T) {
	if fo := foldOptionsOf(t, "effects_stream = \"EV\"\neffects_fence = \"ev.fence\""); fo.EffectsFence != "ev.fence" {
		t.Errorf("effects_fence: %q", fo.EffectsFence)
	}
	refuseFoldKey(t, "effects_fence", "effects_fence = \"ev.fence\"")
	if _, err := host.New(host.Options{Folds: []host.FoldOptions{{Name: "a", DataDir: t.TempDir(), Plugin: "/p.wasm", EffectsStream: "EV", EffectsFence: "ev.*"}}}); err == nil || !strings.Contains(err.Error(), `EffectsFence "ev.*" is not a subject`) {
		t.Error("a wildcard fence was accepted")
	}
}

// TestCreateEffectsStream: create_effects_stream = true, or a table of
// settings, asks the host to create a missing effects stream
// (FoldOptions.CreateEffectsStream); absent or false, never. It needs
// effects_stream and effects_subjects (the stream's subjects), and its
// settings are checked like create_bucket's.
func TestCreateEffectsStream(t *testing.T) {
	const base = "[[fold]]\nname = \"a\"\neffects_stream = \"FX\"\neffects_subjects = [\"a.changed\"]\n"
	for text, want := range map[string]*host.EffectsStreamConfig{
		base:                                     nil,
		base + "create_effects_stream = false\n": nil,
		base + "create_effects_stream = true\n":  {},
		base + "[fold.create_effects_stream]\nreplicas = 3\nstorage = \"memory\"\nmax_age = \"1h\"\n": {Replicas: 3, Memory: true, MaxAge: time.Hour},
	} {
		_, opts := firstFold(t, text)
		if got := opts.CreateEffectsStream; (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("%q: CreateEffectsStream = %+v, want %+v", text, got, want)
		}
	}
	for text, want := range map[string]string{
		"[[fold]]\nname = \"a\"\ncreate_effects_stream = true\n":                          "create_effects_stream: needs effects_stream",
		"[[fold]]\nname = \"a\"\neffects_stream = \"FX\"\ncreate_effects_stream = true\n": "create_effects_stream: needs effects_subjects",
		base + "create_effects_stream = 1\n":                                              "want true, false or a table",
		base + "[fold.create_effects_stream]\nreplicas = 9\n":                             "fold[0].create_effects_stream.replicas: must be between 1 and 5",
		base + "[fold.create_effects_stream]\nstorage = \"disk\"\n":                       `"disk": want "file" or "memory"`,
		base + "[fold.create_effects_stream]\nhistory = 2\n":                              "unknown key",
	} {
		_, err := parseIn(t, t.TempDir(), text, noEnv)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
