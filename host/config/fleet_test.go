package config

import (
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
)

// TestFleetConfig: a [fleet] section turns into host.FleetOptions with
// its defaults (advertise: http.addr; the node's name: artifacts.holder),
// and each fold's standbys and partitions reach its options; every mistake
// is refused naming its key: a fleet on the embedded server, a node named
// twice, a TTL within two beats, partitions out of 1..1024 or with a
// scope, standbys out of range, fleet keys without a name.
func TestFleetConfig(t *testing.T) {
	const nats = "[nats]\nurl = \"nats://127.0.0.1:4222\"\n"
	cfg, err := parseIn(t, t.TempDir(), nats+"[artifacts]\nholder = \"n1\"\n[fleet]\nname = \"prod\"\n[[fold]]\nname = \"a\"\nstandbys = 2\n[[fold]]\nname = \"b\"\nstandbys = 0\n", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	o, err := cfg.HostOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := host.FleetOptions{Name: "prod", Advertise: "127.0.0.1:8080", Heartbeat: time.Second, NodeTTL: 3 * time.Second, Replicas: 1}
	if o.Fleet != want {
		t.Errorf("fleet options %+v, want %+v", o.Fleet, want)
	}
	if o.Admin.Node != "" || o.Artifacts.Holder != "n1" {
		t.Errorf("node names: admin %q, holder %q", o.Admin.Node, o.Artifacts.Holder)
	}
	if a, b := o.Folds[0], o.Folds[1]; a.Standbys != 2 || a.Partitions != 1 || b.Standbys >= 0 {
		t.Errorf("fold options: a standbys %d partitions %d, b standbys %d (want none: negative)", a.Standbys, a.Partitions, b.Standbys)
	}
	for text, key := range map[string]string{
		"[fleet]\nname = \"prod\"\n":                                                   "fleet.name",
		nats + "[fleet]\nname = \"prod\"\n[admin]\nnode = \"x\"\n":                     "admin.node",
		nats + "[fleet]\nname = \"prod\"\nheartbeat = \"2s\"\nnode_ttl = \"3s\"\n":     "fleet.node_ttl",
		nats + "[fleet]\nname = \"a.b\"\n":                                             "fleet.name",
		nats + "[fleet]\nadvertise = \"h:1\"\n":                                        "fleet.advertise",
		nats + "[fleet]\nname = \"prod\"\n[[fold]]\nname = \"c\"\npartitions = 0\n":    "fold[0].partitions",
		nats + "[fleet]\nname = \"prod\"\n[[fold]]\nname = \"c\"\npartitions = 2000\n": "fold[0].partitions",
		nats + "[[fold]]\nname = \"c\"\npartitions = 2\nscope = [\"a.\"]\n":            "fold[0].scope",
		nats + "[fleet]\nname = \"prod\"\n[[fold]]\nname = \"c\"\nstandbys = 9\n":      "fold[0].standbys",
	} {
		_, err := parseIn(t, t.TempDir(), text+"[[fold]]\nname = \"a\"\n", noEnv)
		if err == nil {
			t.Errorf("accepted:\n%s", text)
			continue
		}
		var keys []string
		for _, p := range problemsOf(t, err) {
			keys = append(keys, p.Key)
		}
		if !strings.Contains(strings.Join(keys, " "), key) {
			t.Errorf("refused, but not naming %s (%v):\n%s", key, err, text)
		}
	}
}

// TestFoldNamesAPartition: a command naming FOLD.P of a fold of several
// partitions finds that unit (its name, its data dir); a partition out of
// range, a padded number or a partition of an unpartitioned fold is no
// fold. Mutation caught: unit names not looked up (every command given a
// unit's name refused).
func TestFoldNamesAPartition(t *testing.T) {
	const nats = "[nats]\nurl = \"nats://127.0.0.1:4222\"\n"
	cfg, err := parseIn(t, t.TempDir(), nats+"[[fold]]\nname = \"c\"\npartitions = 4\n[[fold]]\nname = \"a\"\n", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	f, err := cfg.Fold("c.2")
	if err != nil || f.Name != "c.2" || !strings.HasSuffix(f.DataDir, "/c/partition-2") {
		t.Errorf("Fold(c.2) = %q in %q, %v", f.Name, f.DataDir, err)
	}
	for _, name := range []string{"c.4", "c.02", "c.-1", "a.0", "c."} {
		if f, err := cfg.Fold(name); err == nil {
			t.Errorf("Fold(%q) = %q, want no fold", name, f.Name)
		}
	}
}
