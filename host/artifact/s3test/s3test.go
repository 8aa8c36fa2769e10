package s3test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/foldhost/foldhost/internal/freeport"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

const (
	// AccessKey and SecretKey are the server's root credentials.
	AccessKey = "foldhosttest"
	SecretKey = "foldhosttestsecret"
	// Region is the region clients should sign for.
	Region = "us-east-1"
	// Install is how scripts/test installs the server.
	Install = `(from the repository root) GOBIN="$PWD/bin" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0 && export FOLDHOST_VERSITYGW="$PWD/bin/versitygw"`
)

// Server is a running versitygw.
type Server struct {
	// Endpoint is the server's base URL (path-style addressing).
	Endpoint string
	buckets  atomic.Int64
	stop     func()
}

// Start starts versitygw from $FOLDHOST_VERSITYGW, else from PATH, and
// waits until it is healthy.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv("FOLDHOST_VERSITYGW")
	if bin == "" {
		p, err := exec.LookPath("versitygw")
		if err != nil {
			t.Fatalf("versitygw not found: set FOLDHOST_VERSITYGW or put it on PATH; install with:\n\t%s\n(scripts/test does this)", Install)
		}
		bin = p
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("FOLDHOST_VERSITYGW=%s: %v; install with:\n\t%s", bin, err, Install)
	}
	root := t.TempDir()
	args := []string{"--port", "", "-a", AccessKey, "-s", SecretKey, "-q", "--health", "/health", "posix"}
	// The posix backend keeps metadata in user xattrs; use a sidecar
	// directory where the filesystem has none.
	probe := filepath.Join(root, ".xattr-probe")
	if err := os.WriteFile(probe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setxattr(probe, "user.foldhost", []byte("1"), 0); err != nil {
		t.Logf("versitygw: no user xattrs on %s (%v), using --sidecar", root, err)
		args = append(args, "--sidecar", t.TempDir())
	}
	_ = os.Remove(probe)
	args = append(args, root)

	// Below the ephemeral range and never given twice (freeport): a port
	// from :0 closed here can be given again at once to another test's
	// :0, which then finds this server listening.
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	args[1] = addr

	var logBuf syncbuf.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start versitygw %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("versitygw output:\n%s", logBuf.String())
		}
	})
	endpoint := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(endpoint + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("versitygw exited: %v\n%s", err, logBuf.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw not healthy at %s/health after 20s: %v\n%s", endpoint, err, logBuf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &Server{Endpoint: endpoint, stop: stop}
}

// Stop kills the server (an S3 outage, for fault tests) and waits until it
// exited; the test's cleanup then has nothing left to stop.
func (s *Server) Stop() { s.stop() }

// Client returns an S3 client for the server.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:                     Region,
		UsePathStyle:               true,
		BaseEndpoint:               aws.String(s.Endpoint),
		Credentials:                credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// NewBucket creates a fresh bucket and returns its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("foldhost-%d", s.buckets.Add(1))
	if _, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return name
}

// DeleteBucket deletes every object in bucket, then the bucket, so that
// repeated uploads do not fill the disk.
func (s *Server) DeleteBucket(tb testing.TB, bucket string) {
	tb.Helper()
	ctx := context.Background()
	c := s.Client()
	pages := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		for _, o := range page.Contents {
			if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: o.Key}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket}); err != nil {
		tb.Logf("delete bucket %s: %v", bucket, err)
	}
}
