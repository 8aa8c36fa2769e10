package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// runCLIStdin runs the CLI in-process with stdin.
func runCLIStdin(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncbuf.Buffer
	c := &cli{ctx: context.Background(), stdout: &out, stderr: &errb, stdin: strings.NewReader(stdin), getenv: noEnv}
	code = c.main(args)
	return code, out.String(), errb.String()
}

// TestKVPutLines: `kv put` without KEY writes every line of stdin in one
// process: KEY=VALUE lines and NDJSON objects as foldhost's listings print
// them (text or base64 keys and values, a JSON value as its text, a
// delete, a stream's end line skipped); a bad line stops it, named. (There
// was no bulk put: 1,000 keys took 1,000 processes, 21 s.)
func TestKVPutLines(t *testing.T) {
	srv, nc := natstest.Start(t)
	var in strings.Builder
	const n = 1000
	for i := range n {
		fmt.Fprintf(&in, "route.k%04d=v%d=x\n", i, i) // the value keeps its own "="
	}
	in.WriteString("\n")
	in.WriteString(`{"key":"route.bin","key_b64":"cm91dGUuYmlu","value_b64":"/wE="}` + "\n")
	in.WriteString(`{"key_b64":"cm91dGUub2Jq","value":{"to":"10.0.0.1"},"revision":9}` + "\r\n")
	in.WriteString(`{"key":"route.k0001","op":"delete"}` + "\n")
	in.WriteString(`{"end":true,"count":1003,"cursor":1003}` + "\n")
	start := time.Now()
	code, out, errOut := runCLIStdin(t, in.String(), "kv", "--nats", srv.ClientURL(), "--bucket", "routes", "put")
	took := time.Since(start)
	if code != command.ExitOK || !strings.Contains(out, fmt.Sprintf(`"put": %d`, n+2)) || !strings.Contains(out, `"deleted": 1`) {
		t.Fatalf("kv put < lines: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("%d lines in %v, one process", n+3, took.Round(time.Millisecond))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), "routes")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"route.k0000": "v0=x", "route.k0999": "v999=x", "route.bin": "\xff\x01", "route.obj": `{"to":"10.0.0.1"}`} {
		if e, err := kv.Get(context.Background(), k); err != nil || string(e.Value()) != want {
			t.Errorf("%s: %v, want %q", k, err, want)
		}
	}
	if _, err := kv.Get(context.Background(), "route.k0001"); err == nil {
		t.Error("route.k0001 not deleted")
	}
	for _, tc := range []struct{ in, want string }{
		{"a=1\nb=2\nnot a pair\n", "stdin line 3: want KEY=VALUE"},
		{"a=1\n{\"key\":\"x\"}\n", `stdin line 2: no "value" or "value_b64" (1 lines written before it)`},
		{`{"key":"x","value":"a","value_b64":"Yg=="}` + "\n", "value and value_b64 differ"},
		{"bad key!=1\n", `stdin line 1: put "bad key!"`},
		{"a=" + strings.Repeat("v", 2<<20) + "\n", "stdin line 1: longer than"},
	} {
		code, _, errOut := runCLIStdin(t, tc.in, "kv", "--nats", srv.ClientURL(), "--bucket", "routes", "put")
		if code != command.ExitFailure || !strings.Contains(errOut, tc.want) {
			t.Errorf("input %.40q: exit %d: %s, want %q", tc.in, code, errOut, tc.want)
		}
	}
}
