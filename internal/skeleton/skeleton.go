// Package skeleton holds the plugin skeletons `foldhost plugin new`
// writes: in Go, C, Rust and AssemblyScript, a minimal fold whose view
// mirrors the bucket (with an effect per update and a query), with the
// SDK files it needs (copied from those the binary carries) so that it
// builds outside the repository, a README.md with its build command, a
// fixture of `foldhost plugin test` and the test.sh that builds and runs
// it, and those build commands (docs/plugins.md's plugin table).
package skeleton

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	sdkfiles "github.com/foldhost/foldhost"
)

// Build commands of the skeletons: docs/plugins.md's plugin table, run in the
// skeleton's directory (each skeleton lays its SDK out so the command
// works as written).
var buildCommands = map[string]string{
	"go":             "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm .",
	"c":              "clang --target=wasm32-wasi -mexec-model=reactor -O2 -mbulk-memory -Wl,--stack-first -Wl,--strip-debug -I abi/sdk/c abi/sdk/c/foldhost.c plugin.c -o plugin.wasm",
	"rust":           "rustc --edition 2021 --target wasm32-unknown-unknown --crate-type cdylib -O -C lto=fat -C codegen-units=1 -C target-feature=+bulk-memory -C link-arg=-zstack-size=65536 -C strip=debuginfo plugin.rs -o plugin.wasm",
	"assemblyscript": "npx asc assembly/index.ts --target release",
}

// Langs are the languages of the skeletons, sorted.
func Langs() []string {
	langs := make([]string, 0, len(buildCommands))
	for l := range buildCommands {
		langs = append(langs, l)
	}
	slices.Sort(langs)
	return langs
}

// BuildCommand is lang's build command, as docs/plugins.md's plugin table
// gives it.
func BuildCommand(lang string) string { return buildCommands[lang] }

// BuildNote is what to know before lang's build, as a line in
// parentheses ending in a newline ("" when nothing): the toolchain the
// Rust build needs.
func BuildNote(lang string) string {
	if lang == "rust" {
		return "(under rustup, run 'rustup target add wasm32-unknown-unknown' first, or call Debian's " +
			"/usr/bin/rustc in place of rustc: without the wasm32 standard library rustc stops at " +
			"\"can't find crate for `std`\")\n"
	}
	return ""
}

// BuildSteps is the build as a user types it: with the npm install the
// AssemblyScript build needs first.
func BuildSteps(lang string) string {
	if lang == "assemblyscript" {
		return "npm ci && " + buildCommands[lang]
	}
	return buildCommands[lang]
}

var plainName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// Name is the skeleton's plugin name: dir's base name when it is a
// plain name (it goes into source strings, a Go module path and an npm
// package name unescaped), else "my-plugin".
func Name(dir string) string {
	if base := filepath.Base(filepath.Clean(dir)); plainName.MatchString(base) {
		return base
	}
	return "my-plugin"
}

// Files is every file of lang's skeleton (one of Langs) for the plugin
// name, by slash-separated path.
func Files(lang, name string) (map[string][]byte, error) {
	files := map[string][]byte{}
	sdk := func(from, to string) error {
		b, err := sdkfiles.SDKFiles.ReadFile(from)
		files[to] = b
		return err
	}
	// sdkDir copies the SDK files under dir (not its tests) to under to.
	sdkDir := func(dir, to string) error {
		return fs.WalkDir(sdkfiles.SDKFiles, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
				return err
			}
			return sdk(p, path.Join(to, strings.TrimPrefix(p, dir+"/")))
		})
	}
	r := strings.NewReplacer("NAME", name, "BUILD", BuildSteps(lang))
	text := func(to, s string) { files[to] = []byte(r.Replace(s)) }
	var err error
	switch lang {
	case "go":
		text("go.mod", goMod)
		text("main.go", goMain)
		text("foldhost-sdk/go.mod", goSDKMod)
		// abi holds abi/sdk/go too: one walk copies both (and nothing
		// else: the embed holds no other Go files under abi).
		err = sdkDir("abi", "foldhost-sdk/abi")
		for p := range files {
			if strings.HasPrefix(p, "foldhost-sdk/abi/sdk/") && !strings.HasPrefix(p, "foldhost-sdk/abi/sdk/go/") {
				delete(files, p)
			}
		}
	case "c":
		text("plugin.c", cMain)
		err = errors.Join(sdk("abi/sdk/c/foldhost.c", "abi/sdk/c/foldhost.c"), sdk("abi/sdk/c/foldhost.h", "abi/sdk/c/foldhost.h"))
	case "rust":
		text("plugin.rs", rustMain)
		err = sdk("abi/sdk/rust/foldhost.rs", "foldhost.rs")
	case "assemblyscript":
		text("assembly/index.ts", asMain)
		text("assembly/tsconfig.json", asTSConfig)
		text("asconfig.json", asConfig)
		err = errors.Join(sdkDir("abi/sdk/assemblyscript", "foldhost-sdk"), asPackage(files, name))
	default:
		return nil, fmt.Errorf("unknown language %q: want one of %s", lang, strings.Join(Langs(), ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("plugin new: the SDK files this binary carries: %w", err)
	}
	text(".gitignore", "plugin.wasm\nnode_modules/\n")
	text("README.md", readmeHead+readmeOf[lang]+readmeTail)
	text("fixture.jsonl", fixture)
	files["test.sh"] = []byte(strings.ReplaceAll(testScript, "BUILD", buildCommands[lang]))
	return files, nil
}

// asPackage writes package.json and package-lock.json: the example
// plugin's lock, with the SDK where the skeleton keeps it, so 'npm ci'
// installs the compiler version this repository builds with.
func asPackage(files map[string][]byte, name string) error {
	lock, err := sdkfiles.SDKFiles.ReadFile("plugins/example-router/assemblyscript/package-lock.json")
	if err != nil {
		return err
	}
	var l struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	if err := json.Unmarshal(lock, &l); err != nil {
		return err
	}
	version := l.Packages["node_modules/assemblyscript"].Version
	if version == "" {
		return errors.New("the example's package-lock.json names no assemblyscript version")
	}
	s := strings.ReplaceAll(string(lock), "../../../abi/sdk/assemblyscript", "foldhost-sdk")
	s = strings.ReplaceAll(s, `"example-router-assemblyscript"`, fmt.Sprintf("%q", name))
	files["package-lock.json"] = []byte(s)
	files["package.json"] = []byte(strings.NewReplacer("NAME", name, "VERSION", version).Replace(asPackageJSON))
	return nil
}

// Executable are the skeleton files Write makes executable.
var Executable = []string{"test.sh"}

// Write writes files (Files') under dir, which must exist.
func Write(dir string, files map[string][]byte) error {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if slices.Contains(Executable, name) {
			mode = 0o755
		}
		if err := os.WriteFile(p, files[name], mode); err != nil {
			return err
		}
	}
	return nil
}

// The skeletons. Every one folds the same way: the view mirrors the
// bucket, each key's value under the same key; a delete or purge removes
// it. NAME is the plugin's name, BUILD its build command.

const goMod = `module NAME

go 1.24

require github.com/foldhost/foldhost v0.0.0

// The SDK, copied in (see README.md): no download, no network.
replace github.com/foldhost/foldhost => ./foldhost-sdk
`

const goSDKMod = `// A copy of the foldhost Go SDK (abi/sdk/go) and the ABI package it
// imports (abi), standard library only, under the foldhost module's path.
module github.com/foldhost/foldhost

go 1.24
`

const goMain = `//go:build wasip1

// Command NAME is a foldhost plugin whose view mirrors the bucket: each
// key's value under the same key; a delete removes it. Each update emits
// an effect naming it, and the query "get" answers a key's value. Build:
//
//	BUILD
package main

import (
	"errors"

	"github.com/foldhost/foldhost/abi"
	foldhost "github.com/foldhost/foldhost/abi/sdk/go"
)

// record is what Apply needs of one update. The SDK reuses records from
// batch to batch: Parse sets every field.
type record struct {
	key, value []byte
	remove     bool
}

type plugin struct{}

// Info names the plugin. Bump ViewSchema whenever the layout or meaning
// of the view keys changes: the host then rebuilds the views.
func (plugin) Info() abi.Info { return abi.Info{Name: "NAME", Version: "0.1.0", ViewSchema: 1} }

// Parse keeps what Apply needs of u, copied (u's bytes are valid during
// Parse only). Returning false rejects u: counted, never fatal.
func (plugin) Parse(u *foldhost.Update, rec *record) bool {
	rec.key = append(rec.key[:0], u.Key...)
	rec.value = append(rec.value[:0], u.Value...)
	rec.remove = u.Removes()
	return true
}

// changed is the subject of the effects.
var changed = []byte("changed")

// Apply turns the batch's records, in revision order, into view
// mutations, and emits for each an effect naming its update (subject
// "changed", the key as payload), which the host publishes once the batch
// is committed. An error fails the batch: nothing of it is committed.
func (plugin) Apply(b *foldhost.Batch, recs []record) error {
	for i := range recs {
		r := &recs[i]
		if r.remove {
			b.Delete(r.key)
		} else {
			b.Put(r.key, r.value)
		}
		b.EmitFor(i, changed, r.key)
	}
	return nil
}

// get is the query "get": the view value of the key given as input; it
// fails (the caller sees the message) for a key the view does not hold.
func get(q *foldhost.Query, key []byte) error {
	v, found, err := q.View(key)
	if err != nil {
		return err
	}
	if !found {
		return errors.New("no such key")
	}
	q.Answer(v)
	return nil
}

func init() {
	foldhost.Register[record](plugin{})
	foldhost.RegisterQueries(foldhost.QueryDef{Name: "get", Run: get})
}

func main() {}
`

const cMain = `/* NAME: a foldhost plugin whose view mirrors the bucket: each key's
 * value under the same key; a delete or purge removes it. Each update
 * emits an effect naming it, and the query "get" answers a key's value.
 * Build:
 *
 *   BUILD
 */
#include "foldhost.h"

/* What apply needs of one update. Its bytes point into the batch, valid
 * until apply returns. */
struct rec {
	uint8_t op;
	fh_bytes key, value;
};

/* parse: update -> record; FH_REJECT rejects it (counted, never fatal). */
static int parse(const fh_update *u, struct rec *r) {
	r->op = u->op;
	r->key = u->key;
	r->value = u->value;
	return FH_ACCEPT;
}

/* apply: the batch's records, in revision order -> view mutations, and
 * for each an effect naming its update (subject "changed", the key as
 * payload), which the host publishes once the batch is committed.
 * return fh_fail("why") fails the batch: nothing of it is committed. */
static int apply(struct rec *rs, uint32_t n) {
	for (uint32_t i = 0; i < n; i++) {
		struct rec *r = &rs[i];
		if (r->op == FH_OP_PUT)
			fh_put(r->key.ptr, r->key.len, r->value.ptr, r->value.len);
		else
			fh_delete(r->key.ptr, r->key.len);
		fh_emit_for(i, "changed", 7, 0, 0, r->key.ptr, r->key.len);
	}
	return FH_OK;
}

/* name, version, view schema (bump it whenever the layout or meaning of
 * the view keys changes: the host then rebuilds the views). */
FOLDHOST_PLUGIN("NAME", "0.1.0", 1, struct rec, parse, apply);

/* get, the query "get": the view value of the key given as input; it
 * fails (the caller sees the message) for a key the view does not hold. */
static int get(fh_bytes key) {
	fh_bytes v;
	int found = fh_get_view(key.ptr, key.len, &v);
	if (found == FH_FAIL)
		return FH_FAIL;
	if (!found)
		return fh_fail("no such key");
	fh_answer(v.ptr, v.len);
	return FH_OK;
}

FOLDHOST_QUERIES({"get", "", get});
`

const rustMain = `//! NAME: a foldhost plugin whose view mirrors the bucket: each key's value
//! under the same key; a delete or purge removes it. Each update emits an
//! effect naming it, and the query "get" answers a key's value. Build:
//!
//!     BUILD

mod foldhost; // the SDK, foldhost.rs

use foldhost::{Batch, Fail, Op, Parsed, Query, Update};

/// What apply needs of one update; it borrows the batch, valid until
/// apply returns.
struct Rec<'a> {
    key: &'a [u8],
    value: &'a [u8],
    remove: bool,
}

/// update -> record, or Ok(Parsed::Reject) (counted, never fatal).
fn parse<'a>(u: &Update<'a>) -> Result<Parsed<Rec<'a>>, Fail> {
    Ok(Parsed::Accept(Rec { key: u.key, value: u.value, remove: u.op != Op::Put }))
}

/// The batch's records, in revision order -> view mutations, and for each
/// an effect naming its update (subject "changed", the key as payload),
/// which the host publishes once the batch is committed.
/// Err(Fail::new("why")) fails the batch: nothing of it is committed.
fn apply(rs: &mut [Rec], b: &mut Batch) -> Result<(), Fail> {
    for (i, r) in rs.iter().enumerate() {
        if r.remove {
            b.delete(r.key);
        } else {
            b.put(r.key, r.value);
        }
        b.emit_for(i, b"changed", &[], r.key);
    }
    Ok(())
}

// name, version, view schema (bump it whenever the layout or meaning of
// the view keys changes: the host then rebuilds the views).
foldhost_plugin!("NAME", "0.1.0", 1, parse, apply);

/// The query "get": the view value of the key given as input; it fails
/// (the caller sees the message) for a key the view does not hold.
fn get<'a>(key: &'a [u8], q: &mut Query<'a>) -> Result<(), Fail> {
    match q.get_view(key)? {
        Some(v) => {
            q.answer(v);
            Ok(())
        }
        None => Err(Fail::new("no such key")),
    }
}

foldhost_queries!(("get", "", get));
`

const asMain = `// NAME: a foldhost plugin whose view mirrors the bucket: each key's value
// under the same key; a delete or purge removes it. Each update emits an
// effect naming it, and the query "get" answers a key's value. Build:
//
//   BUILD

import { Plugin, Update, Bytes, register, put, del, emitFor, getView, registerQuery, answer, fail, OP_PUT } from "@foldhost/sdk-assemblyscript";

// AssemblyScript exports only what the entry file exports: re-export the
// ABI, and the query exports.
export * from "@foldhost/sdk-assemblyscript/assembly/exports";
export * from "@foldhost/sdk-assemblyscript/assembly/queries";

// What apply needs of one update: pointers into the batch, valid until
// apply returns.
class Rec {
  constructor(public keyPtr: usize, public keyLen: u32,
              public valuePtr: usize, public valueLen: u32, public remove: bool) {}
}

// The subject of the effects, "changed".
const CHANGED = memory.data<u8>([0x63, 0x68, 0x61, 0x6e, 0x67, 0x65, 0x64]);

class Mirror extends Plugin<Rec> {
  // update -> record, or null to reject it (counted, never fatal)
  parse(u: Update): Rec | null {
    return new Rec(u.keyPtr, u.keyLen, u.valuePtr, u.valueLen, u.op != OP_PUT);
  }
  // the batch's records, in revision order -> view mutations, and for each
  // an effect naming its update (subject "changed", the key as payload),
  // which the host publishes once the batch is committed
  apply(rs: Array<Rec>): void {
    for (let i = 0; i < rs.length; i++) {
      const r = rs[i];
      if (r.remove) del(r.keyPtr, r.keyLen);
      else put(r.keyPtr, r.keyLen, r.valuePtr, r.valueLen);
      emitFor(<u32>i, CHANGED, 7, r.keyPtr, r.keyLen);
    }
  }
}

// name, version, view schema (bump it whenever the layout or meaning of
// the view keys changes: the host then rebuilds the views)
register(new Mirror("NAME", "0.1.0", 1));

// The query "get": the view value of the key given as input; it fails (the
// caller sees the message) for a key the view does not hold.
function get(key: Bytes): void {
  const v = new Bytes();
  const found = getView(key.ptr, key.len, v);
  if (found == 0) fail("no such key");
  else if (found > 0) answer(v.ptr, v.len);
}

registerQuery("get", "", get);
`

const asTSConfig = `{
  "extends": "assemblyscript/std/assembly.json",
  "include": ["./**/*.ts"]
}
`

const asConfig = `{
  "targets": {
    "release": { "outFile": "plugin.wasm", "optimizeLevel": 3, "shrinkLevel": 0 }
  },
  "options": {
    "runtime": "incremental",
    "use": ["abort=~lib/@foldhost/sdk-assemblyscript/assembly/index/abort"]
  }
}
`

const asPackageJSON = `{
  "name": "NAME",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "dependencies": {
    "@foldhost/sdk-assemblyscript": "file:foldhost-sdk"
  },
  "devDependencies": {
    "assemblyscript": "VERSION"
  },
  "scripts": {
    "build": "asc assembly/index.ts --target release"
  }
}
`

const readmeHead = "# NAME\n\nA foldhost plugin (ABI v1) whose view mirrors the bucket: each key's\nvalue under the same key; a delete or purge removes it. Each update emits\nan effect naming it (subject `changed`, the key as payload), and the\nquery `get` answers a key's value. Change parse, apply and the query to\nfold what you need, and `fixture.jsonl` to say what it must fold.\n\n"

var readmeOf = map[string]string{
	"go": "Go, with the foldhost Go SDK. `foldhost-sdk/` is a copy of the SDK\n" +
		"(`abi/sdk/go`) and of the ABI package it imports (`abi`), standard\n" +
		"library only, as a module of the foldhost module's path; `go.mod`\n" +
		"requires that module and replaces it with the copy. So the build needs\n" +
		"no network and downloads nothing: requiring the published foldhost\n" +
		"module instead would fetch its whole dependency graph (NATS, pebble,\n" +
		"wazero, ...) for two standard-library packages. To follow a newer SDK,\n" +
		"copy a newer `foldhost-sdk/` in (`foldhost plugin new go` writes one).\n\n" +
		"Build (Go 1.24 or newer; `-buildmode=c-shared` makes the WASI reactor a\n" +
		"plugin must be: without it Go makes a command module, which the host\n" +
		"refuses):\n\n    BUILD\n",
	"c": "C, with the foldhost C SDK (`abi/sdk/c/foldhost.c`, `foldhost.h`).\n" +
		"Toolchain: clang with wasi-libc (Debian: `clang lld wasi-libc\n" +
		"libclang-rt-14-dev-wasm32`). Keep binaryen's `wasm-opt` off `PATH`\n" +
		"while clang runs (clang 14 runs it after linking).\n\nBuild:\n\n    BUILD\n",
	"rust": "Rust, std only, no cargo: `plugin.rs` includes the foldhost Rust SDK\n" +
		"(`foldhost.rs`) as a module. Toolchain: rustc 1.63 or newer with the\n" +
		"wasm32-unknown-unknown standard library. Either Debian's (`apt install\n" +
		"rustc libstd-rust-dev-wasm32 lld-14`): when a rustup `rustc` comes\n" +
		"first on `PATH`, call `/usr/bin/rustc` in place of `rustc` below; or\n" +
		"rustup's, after `rustup target add wasm32-unknown-unknown`. Without\n" +
		"that standard library rustc stops at \"can't find crate for `std`\".\n\n" +
		"Build:\n\n    BUILD\n",
	"assemblyscript": "AssemblyScript, with the foldhost AssemblyScript SDK in\n" +
		"`foldhost-sdk/` (a `file:` dependency). `npm ci` installs the\n" +
		"compiler version `package-lock.json` pins (Node 20 or newer).\n\n" +
		"Build:\n\n    BUILD\n",
}

const readmeTail = `
The output is ` + "`plugin.wasm`" + `. Check it as a foldhost node would run it:

    foldhost plugin check plugin.wasm

## Test

` + "`fixture.jsonl`" + ` says what the plugin must fold: batches of updates and,
after each, the views, the effects and the answers of queries expected
(the format: docs/plugins.md, "Fixtures", in the foldhost repository).
` + "`sh test.sh`" + ` builds the plugin, checks it, and folds the fixture through
it as a node would (the host's loader, limits and commit), in its own
batches and in batches of one (replicas batch as they please): it exits
1, with a diff, when a view, an effect or an answer differs. Run it in CI
(` + "`FOLDHOST`" + ` names the foldhost binary, by default the one on ` + "`PATH`" + `).

After a change that is meant to fold otherwise, rewrite the expectations
from what the plugin produces, and review them before committing:

    foldhost plugin test --update plugin.wasm fixture.jsonl
    git diff fixture.jsonl

To try a query without a daemon (over the fixture's updates):

    foldhost plugin call plugin.wasm get --input count --fixture fixture.jsonl

## Run it

Name it in a fold of the config (` + "`plugin = \"path/to/plugin.wasm\"`" + `;
the fold reloads it when the file changes) or push it to a fold that loads
its module from NATS (` + "`foldhost plugin push plugin.wasm --fold FOLD`" + `).
The ABI the SDK implements is abi/ABI.md in the foldhost repository.
`

// fixture is every skeleton's fixture.jsonl: what the mirror folds, the
// same in every language (docs/plugins.md, "Fixtures").
const fixture = `# What this plugin must fold, for 'foldhost plugin test plugin.wasm fixture.jsonl'
# (test.sh runs it). Each line is one thing: an update (as 'foldhost kv put'
# reads it), a batch line ending the updates above it, then what is expected
# after that batch: the whole view, the effects of its updates, the answers
# of queries. 'foldhost plugin test --update' rewrites the expectations.
{"key":"greeting","value":"hello"}
{"key":"bin","value_b64":"AP8="}
{"batch":"two puts"}
{"view":"bin","value_b64":"AP8="}
{"view":"greeting","value":"hello"}
{"effect":"changed","update":1,"payload":"greeting"}
{"effect":"changed","update":2,"payload":"bin"}
{"query":"get","input":"greeting","answer":"hello"}
{"key":"greeting","op":"delete"}
{"key":"count","value":"1"}
{"batch":"a delete and a put"}
{"view":"bin","value_b64":"AP8="}
{"view":"count","value":"1"}
{"effect":"changed","update":3,"payload":"greeting"}
{"effect":"changed","update":4,"payload":"count"}
{"query":"get","input":"greeting","refused":"no such key"}
{"query":"get","input":"count","answer":"1"}
`

// testScript is every skeleton's test.sh; BUILD is its build command.
const testScript = `#!/bin/sh
# Builds the plugin, checks it as a foldhost node runs it, and folds
# fixture.jsonl through it (the views, effects and query answers it must
# produce), in the fixture's batches and in batches of one: exit 1, with a
# diff, when anything differs. FOLDHOST names the foldhost binary (default:
# foldhost on PATH).
set -eu
cd "$(dirname "$0")"
fh=${FOLDHOST:-foldhost}
BUILD
"$fh" plugin check plugin.wasm
"$fh" plugin test plugin.wasm fixture.jsonl
"$fh" plugin test --batch-size 1 plugin.wasm fixture.jsonl
`
