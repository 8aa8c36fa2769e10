package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/artifact/s3test"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/freeport"
)

// What TestProductionExample deploys the example on, the way the guide
// sets it up: a CA and its certificates, the three NATS servers of
// nats-server.conf (in this process, each from its own copy of the file),
// the guide's provisioning through the nats CLI, and an S3 store.

// exampleCluster is the example's shared services, provisioned.
type exampleCluster struct {
	ca   *testCA
	nats *exampleNATS
	js   jetstream.JetStream // the admin's
	s3   *s3test.Server
	// s3Bucket and s3Prefix are node1.toml's artifacts.s3 bucket and prefix.
	s3Bucket, s3Prefix string
}

// startExampleCluster starts the NATS cluster and the S3 store under
// root, runs the guide's nats commands as the admin (natsCLI is the nats
// CLI) and makes the S3 bucket node1.toml names.
func startExampleCluster(t *testing.T, ex productionExample, natsCLI, root string) *exampleCluster {
	t.Helper()
	c := &exampleCluster{ca: newTestCA(t)}
	c.nats = startExampleNATS(t, ex.natsConf, c.ca, filepath.Join(root, "nats"))
	var err error
	if c.js, err = jetstream.New(c.nats.admin.nc); err != nil {
		t.Fatal(err)
	}
	// The guide's provisioning, with the nats CLI as the admin: its
	// context (server, CA, certificate) through the CLI's variables.
	admin := c.nats.admin
	for _, args := range guideNATSCommands(t, ex.guide) {
		cmd := exec.Command(natsCLI, args...)
		home := t.TempDir()
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=",
			"NATS_URL="+c.nats.urls, "NATS_CA="+admin.ca, "NATS_CERT="+admin.cert, "NATS_KEY="+admin.key)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the guide's nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	c.s3 = s3test.Start(t)
	c.s3Bucket = tomlString(t, "node1.toml", ex.nodes[0], "bucket")
	c.s3Prefix = tomlString(t, "node1.toml", ex.nodes[0], "prefix")
	ctx, cancel := context.WithTimeout(context.Background(), prodWait)
	defer cancel()
	if _, err := c.s3.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &c.s3Bucket}); err != nil {
		t.Fatalf("create the S3 bucket %s: %v", c.s3Bucket, err)
	}
	return c
}

// pointerObject is the S3 object of key's artifact pointer (the store's
// layout: <prefix>/<key>.manifest.json).
func (c *exampleCluster) pointerObject(key string) string {
	return strings.Trim(c.s3Prefix, "/") + "/" + key + ".manifest.json"
}

// testCA issues the certificates the guide asks for.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	pem     []byte
	serialM sync.Mutex
	serial  int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "foldhost test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// issue makes a certificate with subject CN=cn: a server's (valid for
// 127.0.0.1 and localhost, server and client authentication: routes) or
// a client's.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serialM.Lock()
	ca.serial++
	serial := ca.serial
	ca.serialM.Unlock()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// installFile writes b at path, making its directory.
func installFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
}

// tlsFiles writes the CA, a certificate and its key where text's keys
// (nats-server.conf's ca_file, cert_file, key_file or a foldhost config's
// tls_ca_file, tls_cert_file, tls_key_file) name them, under machine.
func tlsFiles(t *testing.T, file, text, prefix, machine string, ca *testCA, cn string, server bool) {
	t.Helper()
	cert, key := ca.issue(t, cn, server)
	for k, b := range map[string][]byte{"ca_file": ca.pem, "cert_file": cert, "key_file": key} {
		re := regexp.MustCompile(`(?m)^\s*` + prefix + k + `\s*[:=]\s*"?([^"\s]+)"?`)
		ms := re.FindAllStringSubmatch(text, -1)
		if len(ms) == 0 {
			t.Fatalf("%s has no %s%s", file, prefix, k)
		}
		for _, m := range ms {
			installFile(t, filepath.Join(machine, m[1]), b, 0o600)
		}
	}
}

// exampleNATS is the three servers of nats-server.conf, and an admin
// client of theirs.
type exampleNATS struct {
	urls  string
	logs  []*natsLog
	admin struct {
		nc            *nats.Conn
		ca, cert, key string
	}
}

// natsLog keeps a server's warnings and errors.
type natsLog struct {
	name string
	mu   sync.Mutex
	errs []string
}

func (l *natsLog) add(level, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, l.name+" "+level+": "+fmt.Sprintf(format, args...))
}
func (l *natsLog) Noticef(string, ...any)            {}
func (l *natsLog) Debugf(string, ...any)             {}
func (l *natsLog) Tracef(string, ...any)             {}
func (l *natsLog) Warnf(format string, args ...any)  { l.add("WARN", format, args...) }
func (l *natsLog) Errorf(format string, args ...any) { l.add("ERROR", format, args...) }
func (l *natsLog) Fatalf(format string, args ...any) { l.add("FATAL", format, args...) }
func (l *natsLog) lines() []string                   { l.mu.Lock(); defer l.mu.Unlock(); return slices.Clone(l.errs) }

// violations are the permission violations the servers logged.
func (n *exampleNATS) violations() (v []string) {
	for _, l := range n.logs {
		for _, line := range l.lines() {
			if strings.Contains(line, "Violation") {
				v = append(v, line)
			}
		}
	}
	return v
}

// startExampleNATS starts nats-server.conf's cluster on loopback: for
// server i, server_name natsI (the edit the file asks for), its listen
// addresses and routes on free ports, its directories under root/natsI,
// certificates of ca. It waits until JetStream answers the admin.
func startExampleNATS(t *testing.T, conf string, ca *testCA, root string) *exampleNATS {
	t.Helper()
	type ports struct{ client, route, monitor int }
	var ps []ports
	for range 3 {
		ps = append(ps, ports{freeport.Port(t), freeport.Port(t), freeport.Port(t)})
	}
	n := &exampleNATS{}
	var urls []string
	for i, p := range ps {
		urls = append(urls, fmt.Sprintf("tls://127.0.0.1:%d", p.client))
		name := fmt.Sprintf("nats%d", i+1)
		machine := filepath.Join(root, name)
		pairs := []string{
			"server_name: nats1", "server_name: " + name,
			"listen: 0.0.0.0:4222", fmt.Sprintf("listen: 127.0.0.1:%d", p.client),
			"http: 127.0.0.1:8222", fmt.Sprintf("http: 127.0.0.1:%d", p.monitor),
			"listen: 0.0.0.0:6222", fmt.Sprintf("listen: 127.0.0.1:%d", p.route),
			" /etc/nats/", " " + machine + "/etc/nats/",
			" /var/lib/nats", " " + machine + "/var/lib/nats",
		}
		for j, q := range ps {
			pairs = append(pairs, fmt.Sprintf("nats-route://nats%d.example.internal:6222", j+1), fmt.Sprintf("nats-route://127.0.0.1:%d", q.route))
		}
		text := replaceIn(t, "nats-server.conf", conf, pairs...)
		tlsFiles(t, "nats-server.conf", conf, "", machine, ca, name+".example.internal", true)
		path := filepath.Join(machine, "etc", "nats", "nats-server.conf")
		installFile(t, path, []byte(text), 0o644)
		opts, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("nats-server.conf (%s): %v", name, err)
		}
		opts.NoSigs = true
		ns, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("nats-server.conf (%s): %v", name, err)
		}
		l := &natsLog{name: name}
		n.logs = append(n.logs, l)
		ns.SetLogger(l, false, false)
		started := make(chan struct{})
		go func() { defer close(started); ns.Start() }()
		t.Cleanup(func() {
			<-started
			ns.Shutdown()
			ns.WaitForShutdown()
		})
		waitFor(t, prodWait, name+" ready for connections", func() (bool, string) {
			if lines := l.lines(); slices.ContainsFunc(lines, func(s string) bool { return strings.Contains(s, " FATAL: ") }) {
				t.Fatalf("%s did not start: %v", name, lines)
			}
			return ns.ReadyForConnections(100 * time.Millisecond), fmt.Sprint(l.lines())
		})
	}
	n.urls = strings.Join(urls, ",")

	// The admin: CN=foldhost-admin, the guide's user for the nats CLI.
	dir := filepath.Join(root, "admin")
	cert, key := ca.issue(t, "foldhost-admin", false)
	n.admin.ca, n.admin.cert, n.admin.key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "admin.pem"), filepath.Join(dir, "admin-key.pem")
	installFile(t, n.admin.ca, ca.pem, 0o600)
	installFile(t, n.admin.cert, cert, 0o600)
	installFile(t, n.admin.key, key, 0o600)
	nc, err := natskv.Connect(natskv.ConnOptions{URL: n.urls, CAFile: n.admin.ca, CertFile: n.admin.cert, KeyFile: n.admin.key, Name: "admin"})
	if err != nil {
		t.Fatalf("the admin's connection: %v", err)
	}
	t.Cleanup(nc.Close)
	n.admin.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, prodWait, "JetStream in the cluster", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil, fmt.Sprint(err)
	})
	return n
}
