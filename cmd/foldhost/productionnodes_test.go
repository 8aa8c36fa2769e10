package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/freeport"
	"github.com/foldhost/foldhost/protocol"
)

// The example's foldhost nodes, each a `foldhost run` process of its
// own, and what TestProductionExample checks through them.

// exampleNode is a foldhost node of the example.
type exampleNode struct {
	name, cfgPath, base string
	cfg                 *config.Config
	proc                *proc
	client              *http.Client
}

// installNode writes a node's config (its /etc and /var under machine,
// its HTTP API on a free loopback port, the S3 store at endpoint) and its
// certificate (CN=foldhost-<node name>), as the guide installs them, and
// loads it as foldhost does.
func installNode(t *testing.T, file, text string, ca *testCA, machine, endpoint string, env map[string]string) *exampleNode {
	t.Helper()
	name := tomlString(t, file, text, "holder")
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	cfgText := replaceIn(t, file, text,
		`"/var/lib/foldhost"`, `"`+machine+`/var/lib/foldhost"`,
		`"/etc/foldhost/`, `"`+machine+`/etc/foldhost/`,
		`addr = "0.0.0.0:8080"`, `addr = "`+addr+`"`,
		`advertise = "`+name+`.example.internal:8080"`, `advertise = "`+addr+`"`,
		`endpoint = "https://s3.example.internal:7070"`, `endpoint = "`+endpoint+`"`)
	tlsFiles(t, file, text, "tls_", machine, ca, "foldhost-"+name, false)
	n := &exampleNode{name: name, cfgPath: filepath.Join(machine, "etc", "foldhost", "foldhost.toml"), base: "http://" + addr,
		client: &http.Client{Timeout: prodWait}}
	t.Cleanup(n.client.CloseIdleConnections)
	installFile(t, n.cfgPath, []byte(cfgText), 0o640)
	cfg, err := config.Load(n.cfgPath, envOf(env))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	n.cfg = cfg
	return n
}

// start runs `foldhost run --config` on the node's config in a process of
// its own, with env (and nothing of this process's own foldhost or AWS
// variables), as the unit does.
func (n *exampleNode) start(t *testing.T, env map[string]string) {
	t.Helper()
	var vars []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "FOLDHOST_") && !strings.HasPrefix(k, "AWS_") {
			vars = append(vars, kv)
		}
	}
	vars = append(vars, runMainEnv+"=1")
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	n.proc = startProcEnv(t, vars, "run", "--config", n.cfgPath)
}

// startProcEnv is startProc with the process's environment; the process
// is killed and waited for at the end of the test, and its stderr logged
// when the test failed.
func startProcEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], args...), lines: make(chan string, 1024), exited: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout = io.Discard
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr = append(p.stderr, sc.Text())
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, errPipe)
	}()
	go func() {
		<-read
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s stderr:\n%s", strings.Join(args, " "), p.log())
		}
	})
	return p
}

// get is a GET of the node's HTTP API: status, body, headers.
func (n *exampleNode) get(t *testing.T, path string) (int, string, http.Header) {
	t.Helper()
	resp, err := n.client.Get(n.base + path)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error(), nil
	}
	return resp.StatusCode, string(b), resp.Header
}

func nodeNamed(t *testing.T, nodes []*exampleNode, name string) *exampleNode {
	t.Helper()
	for _, n := range nodes {
		if n.name == name {
			return n
		}
	}
	t.Fatalf("no node %q", name)
	return nil
}

// othersThan is nodes less n, and their names.
func othersThan(nodes []*exampleNode, n *exampleNode) ([]*exampleNode, []string) {
	var rest []*exampleNode
	var names []string
	for _, o := range nodes {
		if o != n {
			rest, names = append(rest, o), append(names, o.name)
		}
	}
	return rest, names
}

// waitPlaced waits until every fold is placed over live as the fleet's
// rendezvous places it: every node of nodes names its owner (one epoch),
// the owner folds it as owner, its standbys as standbys (both
// following), and a node with no role leaves it elsewhere. It returns the
// placement.
func waitPlaced(t *testing.T, nodes []*exampleNode, live, folds []string, standbys map[string]int) map[string]httpapi.PartitionStatus {
	t.Helper()
	got := map[string]httpapi.PartitionStatus{}
	waitFor(t, prodWait, fmt.Sprintf("the folds placed over %v", live), func() (bool, string) {
		for _, n := range nodes {
			select {
			case <-n.proc.exited:
				t.Fatalf("%s exited (%v):\n%s", n.name, n.proc.err, n.proc.log())
			default:
			}
		}
		for _, f := range folds {
			want := protocol.Place(protocol.Unit{Fold: f}, live, standbys[f])
			var seen httpapi.PartitionStatus
			for i, n := range nodes {
				code, body, _ := n.get(t, "/v1/folds/"+f+"/partitions")
				var ps httpapi.Partitions
				if code != 200 || json.Unmarshal([]byte(body), &ps) != nil || len(ps.Partitions) != 1 {
					return false, fmt.Sprintf("%s: %s partitions: %d %s", n.name, f, code, body)
				}
				p := ps.Partitions[0]
				if p.Owner != want.Owner || p.Epoch == 0 || (i > 0 && p.Epoch != seen.Epoch) || !slices.Equal(p.Standbys, want.Standbys) || p.State != "following" {
					return false, fmt.Sprintf("%s sees %s as %+v, want owner %s and standbys %v", n.name, f, p, want.Owner, want.Standbys)
				}
				seen = p
				role, state := "none", "elsewhere"
				switch {
				case n.name == want.Owner:
					role, state = "owner", "following"
				case slices.Contains(want.Standbys, n.name):
					role, state = "standby", "following"
				}
				var st struct {
					State string
					Fleet *struct{ Role string }
				}
				code, body, _ = n.get(t, "/v1/folds/"+f)
				if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.State != state || st.Fleet == nil || st.Fleet.Role != role {
					return false, fmt.Sprintf("%s: fold %s: %d %s, want %s as %s", n.name, f, code, body, state, role)
				}
			}
			got[f] = seen
		}
		return true, ""
	})
	return got
}

// checkFleetStatus runs `foldhost fleet status` on n's HTTP API, as the
// guide does: a row per fold, with the owner, epoch and standbys of
// placed.
func checkFleetStatus(t *testing.T, n *exampleNode, placed map[string]httpapi.PartitionStatus) {
	t.Helper()
	code, out, errOut := runCLI(t, nil, "fleet", "status", "--url", n.base)
	if code != command.ExitOK {
		t.Fatalf("fleet status: exit %d: %s", code, errOut)
	}
	t.Logf("foldhost fleet status --url %s:\n%s", n.base, out)
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		rows[f[0]] = f
	}
	for fold, p := range placed {
		r := rows[fold]
		if len(r) < 5 || r[2] != p.Owner || r[3] != fmt.Sprint(p.Epoch) || r[4] != strings.Join(p.Standbys, ",") {
			t.Errorf("fleet status: fold %s's row %q, want owner %s, epoch %d, standbys %v:\n%s", fold, r, p.Owner, p.Epoch, p.Standbys, out)
		}
	}
}

// readEverywhere reads path at min_revision rev through every node, until
// each answers 200 with want as the value, and checks who answered: a
// node that folds the fold itself, any other its owner (the read
// forwarded over NATS).
func readEverywhere(t *testing.T, nodes []*exampleNode, p httpapi.PartitionStatus, path string, rev uint64, want string) {
	t.Helper()
	for _, n := range nodes {
		var hdr http.Header
		waitFor(t, prodWait, fmt.Sprintf("%s through %s at revision %d", path, n.name, rev), func() (bool, string) {
			code, body, h := n.get(t, fmt.Sprintf("%s?min_revision=%d&wait=30s", path, rev))
			var it struct{ Value string }
			_ = json.Unmarshal([]byte(body), &it)
			hdr = h
			return code == 200 && it.Value == want, fmt.Sprint(code, " ", body)
		})
		answered := hdr.Get(host.NodeHeader)
		folds := n.name == p.Owner || slices.Contains(p.Standbys, n.name)
		switch {
		case folds && answered != n.name:
			t.Errorf("%s folds the fold but %s answered", n.name, answered)
		case !folds && answered != p.Owner:
			t.Errorf("%s does not fold the fold: its read went to %q, not to the owner %s", n.name, answered, p.Owner)
		}
	}
}

// waitEffects waits until stream holds n messages on subject, and checks
// their effect ids are n different ones: each effect published once.
func waitEffects(t *testing.T, js jetstream.JetStream, stream, subject string, n int) {
	t.Helper()
	ctx := context.Background()
	var ids []string
	waitFor(t, prodWait, fmt.Sprintf("%d effects on %s", n, subject), func() (bool, string) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return false, err.Error()
		}
		info := s.CachedInfo()
		ids = nil
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				return false, err.Error()
			}
			if m.Subject == subject {
				ids = append(ids, m.Header.Get("Foldhost-Effect-Id"))
			}
		}
		return len(ids) >= n, fmt.Sprint(ids)
	})
	slices.Sort(ids)
	if len(ids) != n || len(slices.Compact(slices.Clone(ids))) != n {
		t.Fatalf("effects on %s: ids %v, want %d different ones", subject, ids, n)
	}
}

// waitPointerEpoch waits until key's artifact pointer in the S3 store
// carries epoch: its owner's (a new owner writes its own there at once).
func waitPointerEpoch(t *testing.T, c *exampleCluster, key string, epoch uint64) {
	t.Helper()
	obj := c.pointerObject(key)
	waitFor(t, prodWait, fmt.Sprintf("the pointer s3://%s/%s at epoch %d", c.s3Bucket, obj, epoch), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := c.s3.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: &c.s3Bucket, Key: &obj})
		if err != nil {
			return false, err.Error()
		}
		defer out.Body.Close()
		var m struct{ Epoch uint64 }
		b, err := io.ReadAll(out.Body)
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		return err == nil && m.Epoch == epoch, fmt.Sprintf("epoch %d (%v)", m.Epoch, err)
	})
}

// metric is the value of the unlabelled series name on n's /metrics (-1:
// none).
func (n *exampleNode) metric(t *testing.T, name string) float64 {
	t.Helper()
	code, body, _ := n.get(t, "/metrics")
	if code != 200 {
		t.Fatalf("%s /metrics: %d %s", n.name, code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s /metrics: %q: %v", n.name, line, err)
			}
			return f
		}
	}
	return -1
}

// waitGone waits until no process answers node's forwarded reads: the
// servers closed its connection.
func waitGone(t *testing.T, nc *nats.Conn, fleetName, node string) {
	t.Helper()
	subject := "foldhost.fleet." + fleetName + ".read." + node
	waitFor(t, prodWait, "no responder on "+subject, func() (bool, string) {
		_, err := nc.Request(subject, nil, 2*time.Second)
		return errors.Is(err, nats.ErrNoResponders), fmt.Sprint(err)
	})
}

// checkPluginRecords waits until `foldhost plugins` (with cfgPath, as the
// guide runs it) shows every node running module (a sha256) in fold.
func checkPluginRecords(t *testing.T, env map[string]string, cfgPath, fold, module string, nodes []string) {
	t.Helper()
	waitFor(t, prodWait, fmt.Sprintf("foldhost plugins: %v running %s in %s", nodes, module, fold), func() (bool, string) {
		code, out, errOut := runCLI(t, env, "plugins", "--config", cfgPath, "--json")
		var recs []struct{ Fold, Node, Module string }
		if code != command.ExitOK || json.Unmarshal([]byte(out), &recs) != nil {
			return false, fmt.Sprintf("exit %d: %s %s", code, out, errOut)
		}
		var running []string
		for _, r := range recs {
			if r.Fold == fold && r.Module == module {
				running = append(running, r.Node)
			}
		}
		slices.Sort(running)
		return slices.Equal(running, nodes), out
	})
}
