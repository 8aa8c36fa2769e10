package s3store

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/zeebo/blake3"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/s3test"
	"github.com/foldhost/foldhost/host/artifact/storetest"
	"github.com/foldhost/foldhost/internal/freeport"
)

// versityGW is a real S3 server (package s3test) for one test.
type versityGW struct{ *s3test.Server }

func startVersityGW(tb testing.TB) *versityGW { return &versityGW{s3test.Start(tb)} }

// transport creates a fresh bucket and returns an S3 transport on it under
// a prefix, with opts applied.
func (g *versityGW) store(tb testing.TB, opts func(*Options)) *Store {
	tb.Helper()
	o := Options{
		Endpoint:     g.Endpoint,
		Region:       s3test.Region,
		Bucket:       g.NewBucket(tb),
		Prefix:       "exports/test",
		AccessKey:    s3test.AccessKey,
		SecretKey:    s3test.SecretKey,
		UsePathStyle: true,
	}
	if opts != nil {
		opts(&o)
	}
	s, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func (s *Store) testPut(t *testing.T, obj string, b []byte) {
	t.Helper()
	if _, err := s.client.PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &obj, Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b))),
	}); err != nil {
		t.Fatal(err)
	}
}

func (s *Store) testList(t *testing.T, prefix string) []string {
	t.Helper()
	var names []string
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			names = append(names, strings.TrimPrefix(aws.ToString(o.Key), prefix))
		}
	}
	slices.Sort(names)
	return names
}

func s3Harness(t *testing.T, s *Store) storetest.Harness {
	return storetest.Harness{
		Store:      s,
		PutPointer: func(t *testing.T, key string, b []byte) { s.testPut(t, s.pointerKey(key), b) },
		PutPayload: func(t *testing.T, key, name string, b []byte) {
			s.testPut(t, s.payloadKey(key, strings.TrimSuffix(name, ".tar")), b)
		},
		PayloadNames: func(t *testing.T, key string) []string { return s.testList(t, s.payloadPrefix(key)) },
		AbandonUpload: func(t *testing.T, key string) {
			obj := s.payloadKey(key, "0123456789abcdef")
			up, err := s.client.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: &obj})
			if err != nil {
				t.Fatal(err)
			}
			part := bytes.Repeat([]byte("x"), 1024)
			if _, err := s.client.UploadPart(t.Context(), &s3.UploadPartInput{Bucket: &s.bucket, Key: &obj, UploadId: up.UploadId,
				PartNumber: aws.Int32(1), Body: bytes.NewReader(part), ContentLength: aws.Int64(int64(len(part)))}); err != nil {
				t.Fatal(err)
			}
		},
		Leftovers: func(t *testing.T, key string) int {
			prefix := s.payloadPrefix(key)
			out, err := s.client.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: &prefix})
			if err != nil {
				t.Fatal(err)
			}
			return len(out.Uploads)
		},
		RaceRounds: 10,
	}
}

func TestContract(t *testing.T) {
	gw := startVersityGW(t)
	storetest.Run(t, func(t *testing.T) storetest.Harness { return s3Harness(t, gw.store(t, nil)) })
}

func TestS3Layout(t *testing.T) {
	gw := startVersityGW(t)
	s := gw.store(t, nil)
	st := storetest.OpenStore(t)
	a := storetest.ExportAt(t, st, 100, nil)
	if out, err := artifact.Upload(t.Context(), s, "k", a.Dir); err != nil || out != artifact.Published {
		t.Fatalf("upload: %v %v", out, err)
	}
	got := s.testList(t, "")
	want := []string{"exports/test/k.manifest.json", "exports/test/k.payloads/" + a.Addr + ".tar"}
	if !slices.Equal(got, want) {
		t.Fatalf("objects %v, want %v", got, want)
	}
	// The payload is byte-identical to WriteTar's output.
	b, err := s.get(context.Background(), want[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, storetest.TarOf(t, a.Dir)) {
		t.Fatal("payload differs from WriteTar output")
	}
}

// padArtifact adds an incompressible file of size bytes as the artifact's
// last data file (pebble ignores it), so its payload spans several parts.
func padArtifact(t *testing.T, a storetest.Artifact, size int) storetest.Artifact {
	t.Helper()
	pad := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(pad)
	const name = "data/zzzz-padding"
	if err := os.WriteFile(filepath.Join(a.Dir, filepath.FromSlash(name)), pad, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := artifact.ParseManifest(storetest.ReadManifest(t, a.Dir))
	if err != nil {
		t.Fatal(err)
	}
	sum := blake3.Sum256(pad)
	m.Files = append(m.Files, artifact.File{Path: name, Size: int64(size), BLAKE3: hex.EncodeToString(sum[:])})
	slices.SortFunc(m.Files, func(x, y artifact.File) int { return strings.Compare(x.Path, y.Path) })
	if m.Files[len(m.Files)-1].Path != name {
		t.Fatal("padding is not the last file")
	}
	mb, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.Dir, artifact.ManifestName), mb, 0o644); err != nil {
		t.Fatal(err)
	}
	a.Addr = artifact.Address(mb)
	return a
}

// A payload of several parts goes up as a multipart upload, comes back
// byte-identical to WriteTar's output, round-trips through Download, and
// its rank is found from its tail.
func TestS3Multipart(t *testing.T) {
	gw := startVersityGW(t)
	s := gw.store(t, func(o *Options) { o.PartSize = MinPartSize; o.Concurrency = 2 })
	st := storetest.OpenStore(t)
	a := padArtifact(t, storetest.ExportAt(t, st, 100, nil), 3*MinPartSize+12345)
	start := time.Now()
	if out, err := artifact.Upload(t.Context(), s, "k", a.Dir); err != nil || out != artifact.Published {
		t.Fatalf("upload: %v %v", out, err)
	}
	tb := storetest.TarOf(t, a.Dir)
	t.Logf("uploaded %d bytes in 4 parts in %v", len(tb), time.Since(start))
	obj := s.payloadKey("k", a.Addr)
	b, err := s.get(context.Background(), obj, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, tb) {
		t.Fatal("payload differs from WriteTar output")
	}
	// Multipart ETags have a part count suffix.
	head, err := s.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &s.bucket, Key: &obj})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(strings.Trim(aws.ToString(head.ETag), `"`), "-4") {
		t.Errorf("payload ETag %s: not a 4-part multipart upload", aws.ToString(head.ETag))
	}
	// Re-upload: the existing payload is recognised, not re-sent.
	if out, err := artifact.Upload(t.Context(), s, "k", a.Dir); err != nil || out != artifact.Published {
		t.Fatalf("re-upload: %v %v", out, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := artifact.Download(t.Context(), s, "k", dest, artifact.DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	storetest.CheckImported(t, dest, a.Cursor, a.Data)

	r, ok, err := s.payloadRank(context.Background(), obj, int64(len(tb)), a.Addr)
	if err != nil || !ok || r != a.Cursor.Rev {
		t.Fatalf("rank %d %v %v, want %d", r, ok, err, a.Cursor.Rev)
	}
	if _, ok, err := s.payloadRank(context.Background(), obj, int64(len(tb)), "0000000000000000"); err != nil || ok {
		t.Fatalf("wrong address: %v %v", ok, err)
	}
	// The manifest of a payload past the tail window, as listings read it.
	if b, ok, err := s.PayloadManifest(t.Context(), "k", artifact.PayloadInfo{Name: a.Addr + ".tar", Size: int64(len(tb))}); err != nil || !ok ||
		!bytes.Equal(b, storetest.ReadManifest(t, a.Dir)) {
		t.Fatalf("payload manifest: %v %v %.100q", ok, err, b)
	}
}

// A payload whose tar fails mid-stream (a data file changed after export),
// after parts were uploaded, aborts its multipart upload: no object, no
// pending upload.
func TestS3MultipartAbortedOnFailure(t *testing.T) {
	gw := startVersityGW(t)
	s := gw.store(t, func(o *Options) { o.PartSize = MinPartSize; o.Concurrency = 2 })
	st := storetest.OpenStore(t)
	a := padArtifact(t, storetest.ExportAt(t, st, 100, nil), 3*MinPartSize)
	p := filepath.Join(a.Dir, "data", "zzzz-padding")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tampered"), 3*MinPartSize-100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := s.UploadPayload(t.Context(), "k", a.Dir); err == nil {
		t.Fatal("upload of a tampered artifact succeeded")
	} else {
		t.Logf("upload failed as expected: %v", err)
	}
	if got := s.testList(t, ""); len(got) != 0 {
		t.Fatalf("objects left: %v", got)
	}
	ups, err := s.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &s.bucket})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Fatalf("multipart uploads left pending: %d", len(ups.Uploads))
	}
}

// An existing payload with the payload's name but other content is an
// error, never silently accepted or replaced.
func TestS3ExistingPayloadMismatch(t *testing.T) {
	gw := startVersityGW(t)
	s := gw.store(t, nil)
	st := storetest.OpenStore(t)
	a := storetest.ExportAt(t, st, 10, nil)
	s.testPut(t, s.payloadKey("k", a.Addr), []byte("squatter"))
	if _, err := artifact.Upload(t.Context(), s, "k", a.Dir); err == nil {
		t.Fatal("upload over a foreign payload succeeded")
	}
	if _, err := s.Pointer(t.Context(), "k"); err == nil {
		t.Fatal("pointer published over a foreign payload")
	}
}

// A pointer that moves between a swap's read and its conditional write
// fails the write (412); the swap re-reads and decides again: here it finds
// a newer pointer and reports superseded, never overwriting it.
func TestS3SwapLostWriteRereads(t *testing.T) {
	gw := startVersityGW(t)
	s := gw.store(t, nil)
	st := storetest.OpenStore(t)
	old := storetest.ExportAt(t, st, 5, nil)
	mid := storetest.ExportAt(t, st, 5, nil)
	newer := storetest.ExportAt(t, st, 5, nil)
	for _, a := range []storetest.Artifact{old, mid, newer} {
		if _, err := s.UploadPayload(t.Context(), "k", a.Dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		first *storetest.Artifact // pointer before the swap; nil: absent
	}{{"absent", nil}, {"present", &old}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.client.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.pointerKey("k"))}); err != nil {
				t.Fatal(err)
			}
			if tc.first != nil {
				s.testPut(t, s.pointerKey("k"), storetest.ReadManifest(t, tc.first.Dir))
			}
			var attempts []int
			s.beforeSwapPut = func(attempt int) {
				attempts = append(attempts, attempt)
				if attempt == 0 {
					s.testPut(t, s.pointerKey("k"), storetest.ReadManifest(t, newer.Dir))
				}
			}
			defer func() { s.beforeSwapPut = nil }()
			out, err := s.SwapPointer(t.Context(), "k", storetest.ReadManifest(t, mid.Dir))
			if err != nil || out != artifact.SupersededByNewer {
				t.Fatalf("swap: %v %v, want superseded", out, err)
			}
			if !slices.Equal(attempts, []int{0}) {
				t.Fatalf("attempts %v", attempts)
			}
			if b, _ := s.Pointer(t.Context(), "k"); artifact.Address(b) != newer.Addr {
				t.Fatal("pointer overwritten")
			}
		})
	}
}

// A swap that loses every conditional write gives up after MaxSwapRetries
// retries with ErrSwapContended, leaving the other writer's pointer.
func TestS3SwapContended(t *testing.T) {
	gw := startVersityGW(t)
	s := gw.store(t, nil)
	st := storetest.OpenStore(t)
	a := storetest.ExportAt(t, st, 5, nil)
	if _, err := s.UploadPayload(t.Context(), "k", a.Dir); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	s.beforeSwapPut = func(attempt int) {
		attempts++
		s.testPut(t, s.pointerKey("k"), []byte(fmt.Sprintf("corrupt %d", attempt)))
	}
	_, err := s.SwapPointer(t.Context(), "k", storetest.ReadManifest(t, a.Dir))
	if !errors.Is(err, artifact.ErrSwapContended) {
		t.Fatalf("swap: %v, want ErrSwapContended", err)
	}
	if attempts != 1+MaxSwapRetries {
		t.Fatalf("%d attempts, want %d", attempts, 1+MaxSwapRetries)
	}
	if b, _ := s.Pointer(t.Context(), "k"); string(b) != fmt.Sprintf("corrupt %d", MaxSwapRetries) {
		t.Fatalf("pointer %q", b)
	}
}

// stallingProxyFake forwards to the S3 server but, once armed, stops every
// GET response body of a payload after its first bytes until the client
// gives up: a fault injector for the download stall timer.
func stallingProxyFake(t *testing.T, target string, armed *atomic.Bool) string {
	return payloadProxyFake(t, target, armed, func(resp *http.Response) io.ReadCloser {
		return &stallingBody{rc: resp.Body, after: 4096, ctx: resp.Request.Context()}
	})
}

// payloadProxyFake is a reverse proxy to target that, while armed, hands
// payload downloads' bodies to wrap (a fault injector).
func payloadProxyFake(t *testing.T, target string, armed *atomic.Bool, wrap func(*http.Response) io.ReadCloser) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // the headers and first bytes reach the client at once
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ModifyResponse = func(resp *http.Response) error {
		if armed.Load() && resp.Request.Method == http.MethodGet && strings.Contains(resp.Request.URL.Path, ".payloads/") {
			resp.Body = wrap(resp)
		}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

type stallingBody struct {
	rc    io.ReadCloser
	after int
	ctx   context.Context
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if b.after <= 0 {
		<-b.ctx.Done() // the client hung up
		return 0, b.ctx.Err()
	}
	n, err := b.rc.Read(p[:min(len(p), b.after)])
	b.after -= n
	return n, err
}

func (b *stallingBody) Close() error { return b.rc.Close() }

// TestS3DownloadStallFails: a payload download that stops sending bytes
// fails after OpTimeout, however long the transfer is allowed to take, and
// leaves the destination absent.
func TestS3DownloadStallFails(t *testing.T) {
	gw := startVersityGW(t)
	var armed atomic.Bool
	proxy := stallingProxyFake(t, gw.Endpoint, &armed)
	s := gw.store(t, func(o *Options) { o.Endpoint = proxy; o.OpTimeout = 500 * time.Millisecond })
	st := storetest.OpenStore(t)
	a := padArtifact(t, storetest.ExportAt(t, st, 100, nil), 1<<20)
	if _, err := artifact.Upload(t.Context(), s, "k", a.Dir); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	dest := filepath.Join(t.TempDir(), "fold")
	// The caller's deadline is far: only the stall timer can end it early.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := artifact.Download(ctx, s, "k", dest, artifact.DownloadOptions{})
	took := time.Since(start)
	if err == nil {
		t.Fatal("a stalled download succeeded")
	}
	if took > 15*time.Second {
		t.Fatalf("the stalled download failed only after %v", took)
	}
	if _, serr := os.Stat(dest); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("dest after a stalled download: %v", serr)
	}
	t.Logf("stalled download failed after %v: %v", took.Round(time.Millisecond), err)
	armed.Store(false)
	if _, err := artifact.Download(t.Context(), s, "k", dest, artifact.DownloadOptions{}); err != nil {
		t.Fatalf("download once the stall is gone: %v", err)
	}
}

// TestS3ErrorsAreTyped: a store that does not exist, or refuses the
// credentials, is ErrStoreRefused (never "no artifact published"); an
// endpoint that does not answer is ErrTransport; a missing pointer stays
// ErrNoPointer.
func TestS3ErrorsAreTyped(t *testing.T) {
	gw := startVersityGW(t)
	// A port nothing listens on: below the ephemeral range and never
	// given twice in this process (a port from :0, closed, could be given
	// at once to another test's server, which then answered 404).
	closedPort := fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t))
	for _, c := range []struct {
		name string
		opts func(*Options)
		want error
	}{
		{"missing pointer", nil, artifact.ErrNoPointer},
		{"missing bucket", func(o *Options) { o.Bucket = "no-such-bucket" }, artifact.ErrStoreRefused},
		{"unknown access key", func(o *Options) { o.AccessKey = "nobody" }, artifact.ErrStoreRefused},
		{"wrong secret", func(o *Options) { o.SecretKey = "wrong-secret-123" }, artifact.ErrStoreRefused},
		{"nothing listening", func(o *Options) { o.Endpoint = closedPort }, artifact.ErrTransport},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := gw.store(t, c.opts)
			_, err := s.Pointer(t.Context(), "k")
			if !errors.Is(err, c.want) {
				t.Fatalf("Pointer: err = %v, want %v", err, c.want)
			}
			for _, other := range []error{artifact.ErrNoPointer, artifact.ErrStoreRefused, artifact.ErrTransport} {
				if other != c.want && errors.Is(err, other) {
					t.Errorf("Pointer: err = %v also matches %v", err, other)
				}
			}
			if c.want == artifact.ErrNoPointer {
				return
			}
			if _, err := s.Prune(t.Context(), "k", 0, time.Now()); !errors.Is(err, c.want) {
				t.Errorf("Prune: err = %v, want %v", err, c.want)
			}
		})
	}
}

// TestS3DownloadCutIsTransport: a connection cut mid-payload is a
// transport failure (retry), not an invalid artifact, and leaves the
// destination absent.
func TestS3DownloadCutIsTransport(t *testing.T) {
	gw := startVersityGW(t)
	var armed atomic.Bool
	proxy := payloadProxyFake(t, gw.Endpoint, &armed, func(resp *http.Response) io.ReadCloser {
		return &cuttingBodyFake{rc: resp.Body, after: 64 << 10}
	})
	s := gw.store(t, func(o *Options) { o.Endpoint = proxy })
	st := storetest.OpenStore(t)
	a := padArtifact(t, storetest.ExportAt(t, st, 100, nil), 1<<20)
	if _, err := artifact.Upload(t.Context(), s, "k", a.Dir); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	dest := filepath.Join(t.TempDir(), "fold")
	_, err := artifact.Download(t.Context(), s, "k", dest, artifact.DownloadOptions{})
	if !errors.Is(err, artifact.ErrTransport) || errors.Is(err, artifact.ErrArtifactInvalid) {
		t.Fatalf("cut download: err = %v, want ErrTransport and not ErrArtifactInvalid", err)
	}
	if _, serr := os.Stat(dest); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("dest after a cut download: %v", serr)
	}
	t.Logf("cut download: %v", err)
}

// cuttingBodyFake ends the proxied body with an error after `after` bytes:
// the proxy then drops the connection mid-response.
type cuttingBodyFake struct {
	rc    io.ReadCloser
	after int
}

func (b *cuttingBodyFake) Read(p []byte) (int, error) {
	if b.after <= 0 {
		return 0, errors.New("cut")
	}
	n, err := b.rc.Read(p[:min(len(p), b.after)])
	b.after -= n
	return n, err
}

func (b *cuttingBodyFake) Close() error { return b.rc.Close() }
