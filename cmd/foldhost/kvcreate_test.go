package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/internal/natstest"
)

// TestKVPutCreatesLoudly: `kv put` creates a fold's missing bucket with its
// create_bucket settings and says so on stderr (once: the bucket exists
// after), and refuses to create the bucket of a fold with create_bucket =
// false. Mutation caught: NoCreate not passed (the refused bucket made).
func TestKVPutCreatesLoudly(t *testing.T) {
	srv, _ := natstest.Start(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf("[nats]\nurl = %q\n"+
		"[[fold]]\nname = \"fresh\"\n[fold.create_bucket]\nhistory = 4\n"+
		"[[fold]]\nname = \"strict\"\ncreate_bucket = false\n", srv.ClientURL()))
	code, _, errOut := runCLI(t, nil, "kv", "--config", cfg, "--fold", "fresh", "put", "k", "v")
	if code != 0 || !strings.Contains(errOut, `bucket "fresh" did not exist: created it (history 4,`) {
		t.Errorf("the first put: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "kv", "--config", cfg, "--fold", "fresh", "put", "k", "v2"); code != 0 || errOut != "" {
		t.Errorf("the second put: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "kv", "--config", cfg, "--fold", "strict", "put", "k", "v"); code != 1 || !strings.Contains(errOut, `bucket "strict" does not exist, and its fold's create_bucket = false`) {
		t.Errorf("a put to a create_bucket = false fold's missing bucket: exit %d: %s", code, errOut)
	}
	// The bulk put (lines on stdin) follows the same rule.
	if code, _, errOut := runCLIStdin(t, "k=v\n", "kv", "--config", cfg, "--fold", "strict", "put"); code != 1 || !strings.Contains(errOut, `bucket "strict" does not exist, and its fold's create_bucket = false`) {
		t.Errorf("a bulk put to a create_bucket = false fold's missing bucket: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "kv", "--config", cfg, "--fold", "strict", "get", "k"); code != 1 || !strings.Contains(errOut, `bucket "strict" does not exist`) {
		t.Errorf("the refused bucket exists after all: exit %d: %s", code, errOut)
	}
}
