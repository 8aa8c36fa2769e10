package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/host/wasm"
)

// configPage is the page that documents every key, from this package's
// directory.
var configPage = filepath.Join("..", "..", "docs", "configuration.md")

// TestConfigurationPageDocumentsEveryKey: docs/configuration.md has a row
// for every key the config file takes, in the section's table it belongs
// to, and no row for a key the file does not take. The keys are walked
// from the Config struct, the type a file decodes into (its fields carry
// no TOML tags, so a field's key is its name in snake case, unless
// fieldKeys says otherwise), and each is confirmed by Parse, which must
// not call it an unknown key: a field added without a row fails, and so
// does a row left behind for a key that is gone. Mutations caught: a row
// removed from the page; a row for a key Parse does not read; a field
// added to a section's struct.
func TestConfigurationPageDocumentsEveryKey(t *testing.T) {
	code := structKeys(t)
	if len(code) < 50 {
		t.Fatalf("the struct walk found %d keys: %v", len(code), code)
	}
	for _, k := range code {
		if why := unknownToParse(t, k); why != "" {
			t.Errorf("the Config struct's key %s is not one Parse reads (%s): say in fieldKeys which key the field is", k, why)
		}
	}
	doc := pageKeys(t)
	for _, k := range code {
		if !slices.Contains(doc, k) {
			t.Errorf("docs/configuration.md does not document the key %s (a row of the `%s` section's table)", k, k.sectionName())
		}
	}
	for _, k := range doc {
		if slices.Contains(code, k) {
			continue
		}
		if why := unknownToParse(t, k); why != "" {
			t.Errorf("docs/configuration.md documents %s, a key Parse does not read (%s)", k, why)
		} else {
			t.Errorf("docs/configuration.md documents %s, which Parse reads but the struct walk does not find: say in fieldKeys which field it is", k)
		}
	}
}

// tomlKey is one key of the config file: its section ("" at the top,
// "nats", "artifacts.s3", "fold", "fold.create_bucket") and its name.
type tomlKey struct{ section, name string }

func (k tomlKey) String() string {
	if k.section == "" {
		return k.name
	}
	return k.section + "." + k.name
}

func (k tomlKey) sectionName() string {
	switch k.section {
	case "":
		return "top-level"
	case "fold":
		return "[[fold]]"
	}
	return "[" + k.section + "]"
}

// fieldKeys says what a field of the Config structs is in the file where
// its name in snake case does not: "-" for a field no key sets, a key's
// name, "[name]" for a sub-table, "" for a struct whose fields are keys of
// the section the field is in.
var fieldKeys = map[string]string{
	"Config.File":                      "-", // the file's own path
	"Config.Folds":                     "[fold]",
	"NATSConfig.Embedded":              "-", // url = "embedded"
	"NATSConfig.TLSCAFile":             "tls_ca_file",
	"S3Config.SessionToken":            "-", // $FOLDHOST_S3_SESSION_TOKEN only
	"FoldConfig.PluginLimits":          "",
	"FoldConfig.DeadLetterMax":         "deadletter_max",
	"FoldConfig.DeadLetterMaxAge":      "deadletter_max_age",
	"FoldConfig.MemTableMB":            "memtable_mb",
	"FoldConfig.CreateBucket":          "[create_bucket]",
	"FoldConfig.NoCreateBucket":        "create_bucket", // create_bucket = false
	"BucketConfig.Name":                "-",             // the fold's bucket
	"BucketConfig.Memory":              "storage",       // storage = "memory"
	"BucketConfig.FirstRevision":       "-",             // a fleet's own bucket only
	"FoldConfig.EffectsStreamSettings": "[create_effects_stream]",
	"EffectsStreamConfig.Memory":       "storage", // storage = "memory"
	"Limits.MaxOutputBytes":            wasm.KeyMaxOutput,
	"Limits.MaxViewMutations":          wasm.KeyMaxViewMutations,
	"Limits.MaxViewKeyBytes":           wasm.KeyMaxViewKey,
	"Limits.MaxViewValueBytes":         wasm.KeyMaxViewValue,
	"Limits.MaxReadBytes":              wasm.KeyMaxRead,
	"Limits.MaxCallReadBytes":          wasm.KeyMaxCallRead,
	"Limits.MaxErrorBytes":             wasm.KeyMaxError,
	"Limits.MaxEffects":                wasm.KeyMaxEffects,
	"Limits.MaxEffectBytes":            wasm.KeyMaxEffect,
	"Limits.MaxQueryInputBytes":        wasm.KeyMaxQueryInput,
}

// structKeys walks config.Config into the keys of the file.
func structKeys(t *testing.T) []tomlKey {
	t.Helper()
	var out []tomlKey
	pkg := reflect.TypeOf(config.Config{}).PkgPath()
	var walk func(typ reflect.Type, section string)
	walk = func(typ reflect.Type, section string) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			ft := f.Type
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				ft = ft.Elem()
			}
			rule, ruled := fieldKeys[typ.Name()+"."+f.Name]
			switch {
			case rule == "-":
			case ruled && rule == "":
				walk(ft, section)
			case strings.HasPrefix(rule, "["):
				walk(ft, join(section, strings.Trim(rule, "[]")))
			case rule != "":
				out = append(out, tomlKey{section, rule})
			case ft.Kind() == reflect.Struct && ft.PkgPath() == pkg:
				walk(ft, join(section, snake(f.Name)))
			case ft.Kind() == reflect.Struct && ft.PkgPath() != "time":
				t.Errorf("%s.%s is a %s: say in fieldKeys what it is in the file", typ.Name(), f.Name, ft)
			default:
				out = append(out, tomlKey{section, snake(f.Name)})
			}
		}
	}
	walk(reflect.TypeOf(config.Config{}), "")
	return out
}

func join(section, sub string) string {
	if section == "" {
		return sub
	}
	return section + "." + sub
}

// snake is a Go field name in snake case: ShutdownGrace shutdown_grace,
// PluginMemoryMB plugin_memory_mb, LeaseTTL lease_ttl, URL url.
func snake(name string) string {
	rs := []rune(name)
	var b strings.Builder
	for i, r := range rs {
		if i > 0 && unicode.IsUpper(r) &&
			(unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// unknownToParse parses a file that sets k (to a string: the value's type
// does not matter here) and returns why Parse does not take k: the unknown
// key problem, or the file's syntax error; "" when it takes it.
func unknownToParse(t *testing.T, k tomlKey) string {
	t.Helper()
	var text string
	switch k.section {
	case "":
		text = k.name + " = \"x\"\n"
	case "fold":
		text = "[[fold]]\n" + k.name + " = \"x\"\n"
	case "fold.create_bucket", "fold.create_effects_stream":
		text = "[[fold]]\n[" + k.section + "]\n" + k.name + " = \"x\"\n"
	default:
		text = "[" + k.section + "]\n" + k.name + " = \"x\"\n"
	}
	_, err := config.Parse([]byte(text), filepath.Join(t.TempDir(), "config.toml"), func(string) (string, bool) { return "", false })
	var ce *config.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, p := range ce.Problems {
		if strings.HasPrefix(p.Msg, "unknown key") || strings.HasPrefix(p.Msg, "syntax") {
			return p.String()
		}
	}
	return ""
}

var (
	pageHeading = regexp.MustCompile("^#{2,6} ")
	pageSection = regexp.MustCompile("`\\[\\[?([a-z0-9_.]+)\\]\\]?`")
	codeSpan    = regexp.MustCompile("`([a-z0-9_]+)[^`]*`")
)

// pageKeys returns the keys docs/configuration.md documents: the code
// spans of the first cell of every row of its "| key | default | meaning
// |" tables, each in the section its heading names (`[nats]`, `[[fold]]`,
// `[fold.create_bucket]`; a heading without one is the top level).
func pageKeys(t *testing.T) []tomlKey {
	t.Helper()
	b, err := os.ReadFile(configPage)
	if err != nil {
		t.Fatal(err)
	}
	var out []tomlKey
	section, inTable := "", false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case pageHeading.MatchString(line):
			section = ""
			if m := pageSection.FindStringSubmatch(line); m != nil {
				section = m[1]
			}
			inTable = false
		case line == "| key | default | meaning |":
			inTable = true
		case inTable && strings.HasPrefix(line, "|---"):
		case inTable && strings.HasPrefix(line, "| "):
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
			for _, m := range codeSpan.FindAllStringSubmatch(first, -1) {
				out = append(out, tomlKey{section, m[1]})
			}
		default:
			inTable = false
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no key table (| key | default | meaning |)", configPage)
	}
	return out
}
