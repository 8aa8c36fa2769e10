package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/natstest"
)

// TestFleetStatus: two `foldhost run` processes of one fleet (a config
// [fleet] each, one shared NATS) place two folds; `foldhost fleet status`
// against either node prints each fold's partition with the same owner,
// epoch and standby, as a table and as JSON. Mutations caught: the
// partitions endpoint answering this node's own view of a fold it does not
// fold (no owner); the table dropping the epoch.
func TestFleetStatus(t *testing.T) {
	srv, _ := natstest.Start(t)
	var bases []string
	for _, node := range []string{"n1", "n2"} {
		d := runInProcess(t, t.TempDir(), fmt.Sprintf(`
[nats]
url = %q
[http]
addr = "127.0.0.1:0"
[artifacts]
holder = %q
[fleet]
name = "t"
heartbeat = "100ms"
node_ttl = "1s"
[[fold]]
name = "alpha"
[[fold]]
name = "beta"
`, srv.ClientURL(), node))
		bases = append(bases, d.base)
	}
	read := func(base string) map[string]httpapi.PartitionStatus {
		code, out, errOut := runCLI(t, nil, "fleet", "status", "--url", base, "--json")
		if code != command.ExitOK {
			t.Fatalf("fleet status --json: exit %d: %s", code, errOut)
		}
		var folds []httpapi.Partitions
		if err := json.Unmarshal([]byte(out), &folds); err != nil {
			t.Fatalf("fleet status --json: %v: %s", err, out)
		}
		got := map[string]httpapi.PartitionStatus{}
		for _, f := range folds {
			if len(f.Partitions) == 1 {
				got[f.Fold] = f.Partitions[0]
			}
		}
		return got
	}
	deadline := time.Now().Add(time.Minute)
	for {
		a, b := read(bases[0]), read(bases[1])
		same := len(a) == 2
		for fold, p := range a {
			q := b[fold]
			same = same && p.Owner != "" && p.Epoch > 0 && p.Owner == q.Owner && p.Epoch == q.Epoch && len(p.Standbys) == 1 && p.Standbys[0] != p.Owner
		}
		if same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes never agreed on where the folds run: %+v / %+v", a, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, out, errOut := runCLI(t, nil, "fleet", "status", "--url", bases[1])
	if code != command.ExitOK {
		t.Fatalf("fleet status: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "FOLD") || !strings.Contains(lines[0], "EPOCH") {
		t.Fatalf("fleet status printed:\n%s", out)
	}
	p := read(bases[1])["alpha"]
	if f := strings.Fields(lines[1]); len(f) != 7 || f[0] != "alpha" || f[2] != p.Owner || f[3] != fmt.Sprint(p.Epoch) || f[4] != p.Standbys[0] {
		t.Errorf("row %q, want alpha's owner %s, epoch %d, standby %v", lines[1], p.Owner, p.Epoch, p.Standbys)
	}
}
