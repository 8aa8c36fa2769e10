// Package census holds the census of foldhost's inputs: every file, network
// or guest input the process reads, the bound that keeps a hostile or broken
// one from taking the process down, and the test that proves the bound (a
// test that fails when the bound is removed). TestCensus checks that every
// named test exists, so the table cannot point at nothing; rows without a
// test say why in Gap, and are the list of work left.
package census

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type input struct {
	What, Bound string
	// Tests are "dir: TestName" (dir relative to the repository root).
	Tests []string
	// Gap says what is unbounded or untested, when something is.
	Gap string
}

var census = []input{
	{"config file", "regular file only, at most 1 MiB, opened without blocking",
		[]string{"host/config: TestLoadBoundsTheFile", "internal/files: TestReadRegular"}, ""},
	{"config values", "unknown keys refused; every number and duration range-checked; every problem reported at once",
		[]string{"host/config: TestConfigReportsEveryProblemAtOnce", "host/config: TestConfigStructureErrors", "host/config: FuzzParse"},
		"the plugin_max_mb range and plugin_memory_mb's upper limit have no case of their own"},
	{"FOLDHOST_* environment", "only non-empty values count; creds and creds_file exclusive", []string{"host/config: TestConfigEnvOverrides"}, ""},
	{"plugin module file (load and hot reload)", "regular file only, at most plugin_max_mb (default 64 MiB)",
		[]string{"host/wasm: TestModuleFileBounds", "host/config: TestConfigPluginMustBeARegularFile"}, ""},
	{"plugin module object (nats-object://)", "size from the object's info checked against plugin_max_mb before the download (and the bytes after); bytes checked against the object's digest by the client; an optional sha256 pin; then validated as a file's module is; missing at the start: its fold waits (state waiting, not ready), the rest of the host runs",
		[]string{"host/foldrun: TestPluginObjectSizeBound", "host/foldrun: TestPinnedPluginObject", "host/foldrun: TestPluginRolloutThroughNATS", "host/foldrun: TestPluginObjectAwaited"}, "the digest check is the client's (nats.go), not tested here"},
	{"plugin records (foldhost plugins)", "entries that do not parse are skipped and counted; the listing bounded by --timeout",
		[]string{"cmd/foldhost: TestPluginPushAndList"}, "an unparseable record has no case of its own"},
	{"plugin check FILE (foldhost plugin check)", "read by the host's loader (regular file only, at most --max-mb, default 64 MiB), then validated and run as a node runs a module, with a node's limits",
		[]string{"cmd/foldhost: TestPluginCheckFailsClearly"}, ""},
	{"plugin module content", "WebAssembly 2.0 only, required exports and signatures, an import allow-list, memory within the limit",
		[]string{"host/wasm/internal/meter: TestRefusals", "host/wasm: TestInvalidModulesAreRefusedWithTheReason", "host/wasm/internal/meter: FuzzInstrument"}, ""},
	{"plugin custom sections", "dropped at load (all but \"name\"): swaps do not accumulate memory", []string{"host/wasm: TestSwapsDoNotAccumulateMemory"}, ""},
	{"guest call time", "plugin_call_timeout on every guest entry (default 10s; 0 turns it off, on purpose)",
		[]string{"host/wasm: TestEveryGuestEntryHasADeadline", "host/wasm: TestSpinningGuestDoesNotFreezeTheProcess"}, ""},
	{"guest memory", "plugin_memory_mb (default 256 MiB), each instance's reserved in a mapping of its own (Linux) and released when it ends; an allocation past it is out-of-memory; the host's peak RSS under every hostile plugin stays within it plus 192 MiB",
		[]string{"host/wasm: TestFailingPluginsCommitNothing", "host: TestHostilePluginsStayWithinMemory"}, ""},
	{"guest output", "length-checked decode, no trailing bytes, empty view keys refused; plugin_max_output_mb (16), plugin_max_view_mutations (100,000), plugin_max_view_key_bytes (4096), plugin_max_view_value_kb (1024), checked before anything is copied: over one, the batch fails as after a trap",
		[]string{"abi: FuzzDecodeOutput", "host/wasm: TestEmptyViewKeyIsMalformedOutput", "host/wasm: TestLimitsArePluginErrors", "host: TestHostilePluginsStayWithinMemory"}, "a result pointer outside guest memory has no test"},
	{"guest error message (status 1)", "cut to plugin_max_error_bytes (4096) as it is copied out of guest memory", []string{"host/wasm: TestGuestErrorMessageIsCut"}, ""},
	{"guest reads (read answers)", "plugin_max_read_mb (16) per read, never more than the plugin's memory, plugin_max_call_read_mb (256) per call: over one, the call ends as a trap",
		[]string{"host/wasm: TestLimitsArePluginErrors", "host: TestHostilePluginsStayWithinMemory"}, ""},
	{"guest info", "length-checked decode; name and version at most 256 bytes", []string{"abi: FuzzDecodeInfo", "abi: TestDecodeInfoBoundsItsFields"}, ""},
	{"guest log lines", "cut to 4 KiB; a runtime passes 100 at once, then 50 a second, and counts what it drops", []string{"host/wasm: TestGuestLogIsBounded"}, ""},
	{"guest stdout/stderr", "a 2 KiB tail is kept; a larger write is never copied whole; logged a line at a time, each cut to 4 KiB (at most 4 KiB of a line held), within the guest log lines' rate limit", []string{"host/wasm: TestStderrTailIsBounded", "host/wasm: TestGuestOutputReachesTheLog"}, ""},
	{"KV entries", "commit validation (no empty key, no cursor regression); the floor guard and resume check on revisions",
		[]string{"host/fold: TestCommitValidationIsAtomic", "host/fold: TestCommitRefusesCursorRegression", "host/natskv: TestFloorGuardTripsWhenRetentionOverrunsAStalledWatch"},
		"value size is the server's max_payload; batch bytes are not capped (batch_size counts updates)"},
	{"the fold's bucket (its existence)", "a missing bucket is created with the fold's create_bucket settings and logged at WARN with them, or refused with create_bucket = false (the start fails naming it)",
		[]string{"host: TestMissingBucketCreatedLoudly", "host: TestMissingBucketRefused", "host/config: TestCreateBucketFalse", "cmd/foldhost: TestKVPutCreatesLoudly"}, ""},
	{"the bucket's stream", "its creation time must equal the store's record, at every (re-)arm and after 2s of silence",
		[]string{"host/foldrun: TestLiveStreamReplacementStopsTheFold", "host/foldrun: TestRecreatedStreamIsRefused"}, ""},
	{"lease record", "strict JSON, consistent fields", []string{"host/artifact/lease: TestLeaseCorruptIsStolen", "host/artifact/lease: FuzzParseRecord"}, ""},
	{"artifact pointer (local)", "regular file only, at most 16 MiB", []string{"host/artifact/dirstore: TestLocalRefusesNonRegularFiles"}, ""},
	{"artifact pointer (S3)", "read through a 16 MiB limit (more is corrupt); per-request timeout", []string{"host/artifact/s3store: TestContract"},
		"an oversized pointer object has no case of its own"},
	{"artifact payload (local)", "regular file only, also an existing one compared on re-upload", []string{"host/artifact/dirstore: TestLocalRefusesNonRegularFiles"},
		"no size cap beyond the manifest's sizes, checked as the tar streams"},
	{"artifact payload (S3)", "a stall (no byte for request_timeout) fails; a cut stream is a transport error",
		[]string{"host/artifact/s3store: TestS3DownloadStallFails", "host/artifact/s3store: TestS3DownloadCutIsTransport"}, ""},
	{"payload tar entries", "regular files under data/ only, no duplicates, every size and BLAKE3 as the manifest says, origin and cursor re-checked",
		[]string{"host/artifact: TestImportRefusesBadInput", "host/artifact: FuzzImport"}, ""},
	{"manifest", "strict JSON (unknown fields refused), schema, formats, sorted clean paths", []string{"host/artifact: FuzzParseManifest", "host/artifact: TestManifestCanonical"}, ""},
	{"artifact store listing (foldhost artifacts)", "keys and payloads read a directory or S3 list pages (per-request timeout, --timeout for the whole); each pointer read as a pointer is (16 MiB)",
		[]string{"host/artifact/dirstore: TestContract", "host/artifact/s3store: TestContract", "cmd/foldhost: TestArtifactsCommand"},
		"the listing holds one entry per key and payload in memory, however many the store has (a CLI command over a store that prune keeps small)"},
	{"S3 answers", "a missing bucket or refused credentials is ErrStoreRefused, no answer is ErrTransport", []string{"host/artifact/s3store: TestS3ErrorsAreTyped"},
		"the prune's ranged tail read has no byte limit beyond the range"},
	{"fold store directory", "locked per directory process-wide and across processes; never inside or around another store's directory (a foldhost.lock above or below); format marker; origin record",
		[]string{"host/fold: TestOpenRefusesAStoreInUse", "host/fold: TestOpenRefusesAStoreAnotherProcessHas", "host/fold: TestOpenRefusesNestedStores", "host/fold: TestOpenRefusesUnknownFormat", "host/foldrun: TestUnreadableOriginRecord", "host/foldrun: TestStoreRecordsWhatItFolds"}, ""},
	{"a killed bootstrap's leftovers", "cleared by every command that opens the fold", []string{"host/foldrun: TestKilledBootstrapLeftoversAreCleared"}, ""},
	{"the store's filesystem (free space, write errors)", "every store write checks the free space against its size plus the reserve (fold.Options.DiskReserve) and is refused, nothing written, the fold failed until space is back; a log write error breaks that store (its writes refused, the log dropped from there), never the process",
		[]string{"host/fold: TestEveryWriteChecksSpace", "host/foldrun: TestFullDiskFailsTheFoldNotTheProcess", "host/foldrun: TestWriteErrorBreaksTheStoreNotTheProcess"},
		"a manifest write error (pebble's own flush or compaction) is only logged as pebble's fatal; pebble's open (at start or a reopen) retries a failing flush without end, so a disk that fails again right after the reopen's probe hangs that fold; the repair's scratch store has the space check but not the guard"},
	{"a killed repair --reset's swap marker", "a regular file of at most 64 KiB, JSON naming the fold's data dir; every command that opens the fold completes the recorded swap (forward) first; a state the swap cannot leave is refused, naming the marker",
		[]string{"host: TestResetKilledAtEveryStep", "host: TestResetMarkerOfAnotherDirIsRefused"}, ""},
	{"HTTP requests", "clean paths only, methods (405), parameter allow-list without repeats, limit 1..10000, JSON answers",
		[]string{"host/httpapi: TestBadParameters", "host/httpapi: TestWrongMethodIs405", "host/httpapi: FuzzReadRequests"},
		"the header and idle timeouts and the write deadline are set but untested; answers are not capped in bytes (10000 items of any size)"},
	{"HTTP admin actions (POST)", "served on a loopback-only listener (the server's bound address, not the connection's), or with the configured bearer token; audited, refusals with their reason",
		[]string{"host/httpapi: TestAdminActionsAreGated", "cmd/foldhost: TestAdminOnAWildcardListener"}, ""},
	{"HTTP range paging token (next)", "base64url of a key, never empty; a seek past it, bounded by the prefix",
		[]string{"host/httpapi: TestRangePaging"}, "no fuzz target yet"},
	{"NATS admin requests", "a JSON body of the server's max_payload; mutating actions only with an identity the server must have stamped: a Nats-Request-Info header naming another account than the host's own (learned from $SYS.REQ.USER.INFO), never in the global account (or allow_anonymous)",
		[]string{"host: TestAdminOverNATS", "host: TestAdminOverNATSAnonymous", "host: TestAdminOverNATSUnknownAccount"},
		"the body decode has no fuzz target; a client of the host's own account may claim another account (closed by NATS permissions, not by foldhost)"},
	{"a poison record (an update the plugin always fails on)", "on_plugin_error = \"skip\": isolated by bisection, committed raw only as a dead letter; dead letters bounded by count and age, pruned without being loaded",
		[]string{"host/fold: TestPoisonIsSkipped", "host/fold: TestPruneDeadLettersHoldsNone", "host/foldrun: TestPoisonRecordsAreSkipped", "host/foldrun: TestRebuildSkipsPoisonRecords", "host/foldrun: TestRepairSkipsPoisonRecords", "host/fold: TestShutdownDoesNotIsolate"}, "a hanging plugin costs plugin_call_timeout per failing call of the bisection"},
	{"the fleet's bucket (node records, claim registers)", "JSON within the server's max_payload; a node record that does not parse counts its node dead, a claim that does not parse counts its unit unowned (the next claim replaces it: never a wedge); a record of this node's name by another process stops this one (ErrSuperseded)",
		[]string{"host/fleet: TestFleetReplacesACorruptClaim", "host/fleet: TestFleetRefusesASecondProcessWithOneName"}, ""},
	{"NATS creds and TLS files", "regular files of at most 1 MiB before the client reads them", []string{"host/natskv: TestConnectErrorsNameTheProblem"},
		"the client re-reads a creds file on reconnect without the check"},
	{"NATS connection", "drops visible in status, metrics and logs; not ready past disconnect_grace", []string{"host: TestNATSOutageIsVisible"}, ""},
	{"a repair's bucket listing (NATS state-sync)", "matched by revision against the fold's entries, sorted beside it by an external merge sort (4 MiB chunks, 16-way merges: memory flat in the bucket's size); complete only at the Synced marker, else nothing is written; retention re-read before the first write",
		[]string{"host/repair: TestIncompleteListingDeletesNothing", "host/repair: TestVerifyRefusalWritesNothing", "host/repair: TestRelistCrashAtEveryCommitConverges", "host/repair: TestRepairScaling", "host/repair: TestSorterMatchesModel", "host/repair: TestRelistedKeyTakesItsNewestEntry"},
		"its disk use grows with the bucket: the fold's index by revision (each key and 33 bytes), what the state-sync delivers before that index is ready (values included) and the difference"},
	{"an artifact chosen for a restore", "bucket, covering scope, stream identity, strictly ahead and resumable before any download; the imported copy's origin re-checked; retention re-read before the cursor moves; payload verified as for a bootstrap",
		[]string{"host/repair: TestCheckArtifact", "host/foldrun: TestRestoreFromANewerArtifact"}, ""},
	{"compiled-plugin cache directory", "trusted (wazero's own checksum)", nil, "a tampered cache is trusted"},
	{"kv put value from stdin", "none", nil, "read whole (a CLI convenience; the server's max_payload refuses big ones)"},
	{"plugin test fixture files (foldhost plugin test, plugin call --fixture)", "regular file only, at most 256 MiB; every line parsed strictly (an expectation's unknown field, a line of two kinds, a line out of place refused, named by file and line); the module runs under a node's limits, as plugin check's",
		[]string{"cmd/foldhost: TestPluginTestChecksEachKind", "host/plugincheck: TestFixtureParseErrors", "host/plugincheck: FuzzFixtures"}, ""},
	{"plugin call input (--input-file, stdin)", "at most 64 MiB read (the largest plugin_max_query_input_kb); the module's own bound (plugin_max_query_input_kb, 1 MiB by default) refuses more before it runs",
		[]string{"cmd/foldhost: TestPluginCall"}, "the 64 MiB read bound has no case of its own"},
	{"kv put lines from stdin (no KEY)", "read a line at a time, each at most the server's max payload x 4/3 + 64 KiB (a value in base64 in JSON); the first bad line stops it, named",
		[]string{"cmd/foldhost: TestKVPutLines"}, ""},
}

// TestCensus: every test the census names exists in the directory it
// names, and every row has a test or says what is missing.
func TestCensus(t *testing.T) {
	root := filepath.Join("..", "..")
	funcs := map[string]map[string]bool{} // dir -> test and fuzz functions
	for _, in := range census {
		if len(in.Tests) == 0 && in.Gap == "" {
			t.Errorf("%s: no test and no gap named", in.What)
		}
		for _, ref := range in.Tests {
			dir, name, ok := strings.Cut(ref, ": ")
			if !ok {
				t.Errorf("%s: malformed test reference %q", in.What, ref)
				continue
			}
			if funcs[dir] == nil {
				funcs[dir] = testFuncs(t, filepath.Join(root, dir))
			}
			if !funcs[dir][name] {
				t.Errorf("%s: %s names %s, which does not exist in %s", in.What, ref, name, dir)
			}
		}
	}
	var gaps int
	for _, in := range census {
		if in.Gap != "" {
			gaps++
			t.Logf("gap: %s: %s", in.What, in.Gap)
		}
	}
	t.Logf("%d inputs, %d with a gap", len(census), gaps)
}

func testFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				out[fd.Name.Name] = true
			}
		}
	}
	return out
}
