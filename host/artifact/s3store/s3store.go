// Package s3store is the S3 artifact store (see [Store]).
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/protocol"
)

const (
	// DefaultPartSize is the multipart part size of payload uploads.
	DefaultPartSize = 8 << 20
	// MinPartSize is S3's minimum size of a multipart part but the last.
	MinPartSize = 5 << 20
	// DefaultPartConcurrency is how many parts of one payload upload are in
	// flight at once.
	DefaultPartConcurrency = 8
	// MaxSwapRetries bounds the retries of a pointer swap that lost its
	// conditional write to a concurrent swap.
	MaxSwapRetries = 8

	// rankTailWindow is how much of a payload's end Prune fetches to find
	// the embedded manifest (the tar's last entry) before falling back to
	// reading the whole payload.
	rankTailWindow = 1 << 20
)

// Options configure a [Store].
type Options struct {
	// Endpoint is the service's base URL (BaseEndpoint), e.g.
	// "http://127.0.0.1:7070"; empty means AWS's endpoint for Region.
	Endpoint string
	// Region defaults to "us-east-1".
	Region string
	// Bucket must exist.
	Bucket string
	// Prefix is prepended to every object key ("<prefix>/<key>..."); empty
	// means the bucket root. Leading and trailing slashes are ignored.
	Prefix string
	// AccessKey and SecretKey (and SessionToken, for temporary ones) are
	// static credentials. Without them the AWS SDK's default chain applies:
	// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, the shared
	// config and credentials files (AWS_PROFILE), web identity, container
	// and instance roles.
	AccessKey, SecretKey, SessionToken string
	// UsePathStyle addresses the bucket in the path (local servers).
	UsePathStyle bool
	// PartSize of multipart uploads, at least [MinPartSize]; 0 means
	// [DefaultPartSize]. A payload
	// smaller than one part is uploaded with a single PutObject.
	PartSize int64
	// Concurrency is the number of parts in flight; 0 means
	// [DefaultPartConcurrency].
	Concurrency int
	// OpTimeout bounds each request (a pointer read or write, a head, a
	// list page, a delete, one multipart part) and each stall of a payload
	// download (no byte for that long); 0 means [DefaultOpTimeout]. A whole
	// payload transfer is bounded only by the caller's context, since its
	// duration grows with its size.
	OpTimeout time.Duration
}

// DefaultOpTimeout is the default [Options.OpTimeout].
const DefaultOpTimeout = 2 * time.Minute

// Store is the S3 artifact store:
//
//	<prefix>/<key>.payloads/<hex8>.tar   content-addressed payload, write-once
//	<prefix>/<key>.manifest.json         pointer: the published manifest's bytes
//
// Payloads are written with If-None-Match "*" (multipart: on
// CompleteMultipartUpload), so an existing payload is never replaced; an
// existing payload with the same address is accepted after checking that its
// embedded manifest has that address. The pointer is swapped by conditional
// writes: read it (ETag and [protocol.PointerState]), ask
// [protocol.PointerPublishAllowed], then PutObject with If-None-Match "*"
// (absent) or If-Match ETag (present), retrying up to [MaxSwapRetries] times
// when a concurrent swap wins (412). The server must honour conditional
// writes atomically (AWS S3, versitygw: RATIONALE.md).
//
// Every operation honours its context; each request is also bounded by
// [Options.OpTimeout]. The SDK's own retries apply.
type Store struct {
	client      *s3.Client
	bucket      string
	prefix      string
	partSize    int64
	concurrency int
	opTimeout   time.Duration

	// beforeSwapPut, when set (tests), runs between the pointer read and
	// the conditional write of each swap attempt.
	beforeSwapPut func(attempt int)
}

var _ artifact.Store = (*Store)(nil)

// New returns a Store. It does not contact the server.
func New(o Options) (*Store, error) {
	if o.Bucket == "" {
		return nil, errors.New("artifact: s3: no bucket")
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.PartSize < MinPartSize {
		return nil, fmt.Errorf("artifact: s3: bad part size %d", o.PartSize)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultPartConcurrency
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.OpTimeout > artifact.MaxRequestTimeout {
		return nil, fmt.Errorf("artifact: s3: request timeout %v over %v (a live upload would look abandoned to another node's prune)", o.OpTimeout, artifact.MaxRequestTimeout)
	}
	so := s3.Options{
		Region:                     o.Region,
		UsePathStyle:               o.UsePathStyle,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if o.AccessKey != "" || o.SecretKey != "" {
		so.Credentials = credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, o.SessionToken)
	} else {
		// Reads the environment and the shared files only; the providers
		// that call out (roles) run lazily, at the first request.
		dc, err := config.LoadDefaultConfig(context.Background(), config.WithRegion(o.Region))
		if err != nil {
			return nil, fmt.Errorf("artifact: s3: default credentials: %w", err)
		}
		so.Credentials = dc.Credentials
	}
	if o.Endpoint != "" {
		so.BaseEndpoint = aws.String(o.Endpoint)
	}
	return &Store{
		client:      s3.New(so),
		bucket:      o.Bucket,
		prefix:      strings.Trim(o.Prefix, "/"),
		partSize:    o.PartSize,
		concurrency: o.Concurrency,
		opTimeout:   o.OpTimeout,
	}, nil
}

// op bounds one request by the operation timeout.
func (s *Store) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opTimeout)
}

func (s *Store) object(name string) string {
	if s.prefix == "" {
		return name
	}
	return s.prefix + "/" + name
}

func (s *Store) pointerKey(key string) string    { return s.object(key + ".manifest.json") }
func (s *Store) payloadPrefix(key string) string { return s.object(key + ".payloads/") }
func (s *Store) payloadKey(key, addr string) string {
	return s.payloadPrefix(key) + addr + ".tar"
}

// isPreconditionFailed reports a lost conditional write: 412
// PreconditionFailed, or 409 ConditionalRequestConflict (AWS's answer to
// conditional writes racing on one key).
func isPreconditionFailed(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "PreconditionFailed", "ConditionalRequestConflict":
			return true
		}
	}
	return false
}

// UploadPayload uploads the tar of the artifact in dir to
// <key>.payloads/<artifact.Address(manifest)>.tar, streaming it (multipart in
// PartSize parts, Concurrency in flight, aborted on any failure; a single
// PutObject when it fits in one part), write-once. An existing payload of
// that name is accepted when its embedded manifest has that address (its
// LastModified is not refreshed, unlike the local store's; harmless, since only
// payloads strictly below the pointer are ever pruned and those can never be
// published). It returns the manifest bytes.
func (s *Store) UploadPayload(ctx context.Context, key, dir string) (_ []byte, err error) {
	defer func() { err = classify(ctx, err) }()
	manifest, err := artifact.StagedManifest(key, dir)
	if err != nil {
		return nil, err
	}
	addr := artifact.Address(manifest)
	obj := s.payloadKey(key, addr)
	exists, err := s.checkExistingPayload(ctx, obj, addr)
	if err != nil {
		return nil, err
	}
	if exists {
		return manifest, nil
	}
	err = s.putPayload(ctx, obj, dir)
	if isPreconditionFailed(err) { // a concurrent uploader stored it first
		exists, err = s.checkExistingPayload(ctx, obj, addr)
		if err == nil && !exists {
			err = fmt.Errorf("artifact: upload: payload %s: conditional write refused but no object", obj)
		}
	}
	if err != nil {
		return nil, err
	}
	return manifest, nil
}

// checkExistingPayload reports whether obj exists; an existing object must
// embed a manifest with address addr.
func (s *Store) checkExistingPayload(ctx context.Context, obj, addr string) (bool, error) {
	hctx, cancel := s.op(ctx)
	head, err := s.client.HeadObject(hctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &obj})
	cancel()
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("artifact: upload: head %s: %w", obj, err)
	}
	if _, ok, err := s.payloadRank(ctx, obj, aws.ToInt64(head.ContentLength), addr); err != nil {
		return false, fmt.Errorf("artifact: upload: existing payload %s: %w", obj, err)
	} else if !ok {
		return false, fmt.Errorf("artifact: upload: payload %s exists with different content", obj)
	}
	return true, nil
}

// putPayload streams artifact.WriteTar(dir) to obj with If-None-Match "*".
func (s *Store) putPayload(ctx context.Context, obj, dir string) (err error) {
	pr, pw := io.Pipe()
	tarDone := make(chan struct{})
	go func() {
		defer close(tarDone)
		pw.CloseWithError(artifact.WriteTar(pw, dir))
	}()
	defer func() {
		pr.CloseWithError(errors.New("artifact: upload stopped"))
		<-tarDone
	}()

	first := make([]byte, s.partSize)
	n, rerr := io.ReadFull(pr, first)
	if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
		pctx, cancel := s.op(ctx)
		defer cancel()
		_, err := s.client.PutObject(pctx, &s3.PutObjectInput{
			Bucket:        &s.bucket,
			Key:           &obj,
			Body:          bytes.NewReader(first[:n]),
			ContentLength: aws.Int64(int64(n)),
			IfNoneMatch:   aws.String("*"),
		})
		if err != nil {
			return fmt.Errorf("artifact: upload %s: %w", obj, err)
		}
		return nil
	}
	if rerr != nil {
		return fmt.Errorf("artifact: upload %s: %w", obj, rerr)
	}

	cctx, ccancel := s.op(ctx)
	created, err := s.client.CreateMultipartUpload(cctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: &obj})
	ccancel()
	if err != nil {
		return fmt.Errorf("artifact: upload %s: create multipart: %w", obj, err)
	}
	uploadID := created.UploadId
	completed := false
	defer func() {
		if completed {
			return
		}
		actx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, aerr := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: &s.bucket, Key: &obj, UploadId: uploadID,
		}); aerr != nil {
			err = errors.Join(err, fmt.Errorf("artifact: upload %s: abort: %w", obj, aerr))
		}
	}()

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		parts    []types.CompletedPart
		wg       sync.WaitGroup
	)
	fail := func(e error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = e
			cancel()
		}
		mu.Unlock()
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	sem := make(chan struct{}, s.concurrency)
	buf, last := first[:n], false
	for num := int32(1); ; num++ {
		sem <- struct{}{}
		if failed() {
			<-sem
			break
		}
		wg.Add(1)
		go func(num int32, b []byte) {
			defer wg.Done()
			defer func() { <-sem }()
			uctx, ucancel := s.op(pctx)
			defer ucancel()
			out, err := s.client.UploadPart(uctx, &s3.UploadPartInput{
				Bucket:        &s.bucket,
				Key:           &obj,
				UploadId:      uploadID,
				PartNumber:    aws.Int32(num),
				Body:          bytes.NewReader(b),
				ContentLength: aws.Int64(int64(len(b))),
			})
			if err != nil {
				fail(fmt.Errorf("artifact: upload %s: part %d: %w", obj, num, err))
				return
			}
			mu.Lock()
			parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
			mu.Unlock()
		}(num, buf)
		if last {
			break
		}
		next := make([]byte, s.partSize)
		n, rerr := io.ReadFull(pr, next)
		if rerr == io.EOF {
			break
		}
		if rerr == io.ErrUnexpectedEOF {
			last = true
		} else if rerr != nil {
			fail(fmt.Errorf("artifact: upload %s: %w", obj, rerr))
			break
		}
		buf = next[:n]
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	slices.SortFunc(parts, func(a, b types.CompletedPart) int {
		return int(aws.ToInt32(a.PartNumber) - aws.ToInt32(b.PartNumber))
	})
	cctx, ccancel = s.op(ctx)
	defer ccancel()
	_, err = s.client.CompleteMultipartUpload(cctx, &s3.CompleteMultipartUploadInput{
		Bucket:          &s.bucket,
		Key:             &obj,
		UploadId:        uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		IfNoneMatch:     aws.String("*"),
	})
	if err != nil {
		return fmt.Errorf("artifact: upload %s: complete multipart: %w", obj, err)
	}
	completed = true
	return nil
}

// SwapPointer publishes manifest as key's pointer if
// [protocol.PointerPublishAllowed] admits its rank against the pointer it
// reads, by a conditional write against exactly the pointer it read
// (If-None-Match "*" when absent, If-Match its ETag when present). A lost
// conditional write is retried from the read, at most [MaxSwapRetries]
// times, then it fails with [ErrSwapContended]. The payload must already be
// stored. It returns [SupersededByNewer] when the pointer is strictly newer.
func (s *Store) SwapPointer(ctx context.Context, key string, manifest []byte) (_ artifact.Outcome, err error) {
	defer func() { err = classify(ctx, err) }()
	cur, err := artifact.CandidateCursor(key, manifest)
	if err != nil {
		return 0, err
	}
	payload := s.payloadKey(key, artifact.Address(manifest))
	hctx, cancel := s.op(ctx)
	_, err = s.client.HeadObject(hctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &payload})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("artifact: swap pointer: payload not stored: %w", err)
	}
	ptr := s.pointerKey(key)
	for attempt := 0; attempt <= MaxSwapRetries; attempt++ {
		old, etag, state, err := s.readPointer(ctx, key)
		if err != nil {
			return 0, err
		}
		if !protocol.PointerPublishAllowed(state, cur.Rev) {
			return artifact.SupersededByNewer, nil
		}
		if state.Present() && bytes.Equal(old, manifest) {
			return artifact.Published, nil
		}
		in := &s3.PutObjectInput{
			Bucket:        &s.bucket,
			Key:           &ptr,
			Body:          bytes.NewReader(manifest),
			ContentLength: aws.Int64(int64(len(manifest))),
			ContentType:   aws.String("application/json"),
		}
		if state.Present() {
			if etag == "" {
				return 0, fmt.Errorf("artifact: swap pointer %s: server returned no ETag", ptr)
			}
			in.IfMatch = aws.String(etag)
		} else {
			in.IfNoneMatch = aws.String("*")
		}
		if s.beforeSwapPut != nil {
			s.beforeSwapPut(attempt)
		}
		pctx, cancel := s.op(ctx)
		_, err = s.client.PutObject(pctx, in)
		cancel()
		if err == nil {
			return artifact.Published, nil
		}
		if !isPreconditionFailed(err) {
			return 0, fmt.Errorf("artifact: swap pointer %s: %w", ptr, err)
		}
	}
	return 0, fmt.Errorf("%w: %s after %d retries", artifact.ErrSwapContended, ptr, MaxSwapRetries)
}

// readPointer returns the pointer's bytes (nil when absent), ETag and state.
// A pointer larger than any manifest is corrupt.
func (s *Store) readPointer(ctx context.Context, key string) ([]byte, string, protocol.PointerState, error) {
	ptr := s.pointerKey(key)
	ctx, cancel := s.op(ctx)
	defer cancel()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &ptr})
	if isNotFound(err) {
		return nil, "", protocol.PointerAbsent(), nil
	}
	if err != nil {
		return nil, "", protocol.PointerState{}, fmt.Errorf("artifact: read pointer %s: %w", ptr, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, artifact.MaxManifestSize+1))
	if err != nil {
		return nil, "", protocol.PointerState{}, fmt.Errorf("artifact: read pointer %s: %w", ptr, err)
	}
	etag := aws.ToString(out.ETag)
	if len(b) > artifact.MaxManifestSize {
		return b, etag, protocol.PointerCorrupt(), nil
	}
	return b, etag, artifact.PointerState(b), nil
}

// Pointer returns key's pointer bytes, or an error wrapping [ErrNoPointer].
// The bytes may be corrupt; [S3.Download] and [Import] check them.
func (s *Store) Pointer(ctx context.Context, key string) (_ []byte, err error) {
	defer func() { err = classify(ctx, err) }()
	if err := artifact.CheckKey(key); err != nil {
		return nil, err
	}
	b, _, state, err := s.readPointer(ctx, key)
	if err != nil {
		return nil, err
	}
	if !state.Present() {
		return nil, fmt.Errorf("%w: %s", artifact.ErrNoPointer, key)
	}
	return b, nil
}

// OpenPayload opens key's payload named by [Address] of manifest for
// streaming. A stall (no byte for [Options.OpTimeout]) fails the read.
func (s *Store) OpenPayload(ctx context.Context, key string, manifest []byte) (_ io.ReadCloser, _ int64, err error) {
	defer func() { err = classify(ctx, err) }()
	if err := artifact.CheckKey(key); err != nil {
		return nil, 0, err
	}
	return s.open(ctx, s.payloadKey(key, artifact.Address(manifest)))
}

// open streams obj, failing a read that stalls longer than the operation
// timeout.
func (s *Store) open(ctx context.Context, obj string) (io.ReadCloser, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	stall := time.AfterFunc(s.opTimeout, cancel)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &obj})
	if err != nil {
		stall.Stop()
		cancel()
		return nil, 0, err
	}
	return &stallReader{body: out.Body, stall: stall, timeout: s.opTimeout, cancel: cancel}, aws.ToInt64(out.ContentLength), nil
}

// stallReader re-arms the stall timer on every read that makes progress.
type stallReader struct {
	body    io.ReadCloser
	stall   *time.Timer
	timeout time.Duration
	cancel  context.CancelFunc
}

func (r *stallReader) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	if n > 0 {
		r.stall.Reset(r.timeout)
	}
	return n, err
}

func (r *stallReader) Close() error {
	r.stall.Stop()
	err := r.body.Close()
	r.cancel()
	return err
}

// Prune deletes key's payloads that [protocol.PayloadPrunable] admits against
// the pointer read at the start, and returns the names deleted. The pointer
// is monotone, so a payload strictly below the rank read then can never be
// published later; a corrupt or absent pointer prunes nothing. A payload's
// rank is read from its embedded manifest (the tar's last entry, found by a
// ranged GET of the last 1 MiB, or the whole payload when smaller or when
// the tail has no manifest) and counts only when that manifest's address is
// the payload's name; it is read only for aged-out non-targets. A payload is aged out when its
// LastModified is before now-grace.
func (s *Store) Prune(ctx context.Context, key string, grace time.Duration, now time.Time) (_ []string, err error) {
	defer func() { err = classify(ctx, err) }()
	if err := artifact.CheckKey(key); err != nil {
		return nil, err
	}
	ptr, _, state, err := s.readPointer(ctx, key)
	if err != nil {
		return nil, err
	}
	stale := now.Add(-artifact.MinAbandonedAge)
	if _, ok := state.Rank(); !ok {
		// No payload is prunable; do not even list them.
		return nil, s.abortStaleUploads(ctx, s.payloadPrefix(key), stale)
	}
	target := artifact.Address(ptr) + ".tar"
	var deleted []string
	err = s.eachPayload(ctx, key, func(o types.Object, name string) error {
		obj := aws.ToString(o.Key)
		pl := protocol.Payload{
			IsPointerTarget: name == target,
			AgedOut:         o.LastModified != nil && o.LastModified.Before(now.Add(-grace)),
		}
		if pl.IsPointerTarget || !pl.AgedOut {
			return nil // not prunable whatever its rank; skip the read
		}
		var err error
		pl.Rank, pl.RankKnown, err = s.payloadRank(ctx, obj, aws.ToInt64(o.Size), strings.TrimSuffix(name, ".tar"))
		if err != nil {
			return err
		}
		if !protocol.PayloadPrunable(pl, state) {
			return nil
		}
		dctx, cancel := s.op(ctx)
		_, err = s.client.DeleteObject(dctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &obj})
		cancel()
		if isNotFound(err) {
			return nil // another node pruned it first: pruning is idempotent
		}
		if err != nil {
			return fmt.Errorf("delete %s: %w", obj, err)
		}
		deleted = append(deleted, name)
		return nil
	})
	if err != nil {
		return deleted, fmt.Errorf("artifact: prune: %w", err)
	}
	return deleted, s.abortStaleUploads(ctx, s.payloadPrefix(key), stale)
}

// Keys returns the keys that have a pointer (<prefix>/<key>.manifest.json),
// sorted.
func (s *Store) Keys(ctx context.Context) (_ []string, err error) {
	defer func() { err = classify(ctx, err) }()
	prefix := s.object("")
	delim := "/"
	var keys []string
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix, Delimiter: &delim})
	for pages.HasMorePages() {
		lctx, cancel := s.op(ctx)
		page, err := pages.NextPage(lctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("artifact: list keys: %w", err)
		}
		for _, o := range page.Contents {
			key, ok := strings.CutSuffix(strings.TrimPrefix(aws.ToString(o.Key), prefix), ".manifest.json")
			if ok && artifact.CheckKey(key) == nil {
				keys = append(keys, key)
			}
		}
	}
	slices.Sort(keys) // S3 lists in byte order already; not every server does
	return keys, nil
}

// Payloads returns key's payloads (<key>.payloads/<address>.tar), sorted by
// name; a multipart upload in progress is not an object yet.
func (s *Store) Payloads(ctx context.Context, key string) (_ []artifact.PayloadInfo, err error) {
	defer func() { err = classify(ctx, err) }()
	if err := artifact.CheckKey(key); err != nil {
		return nil, err
	}
	var out []artifact.PayloadInfo
	err = s.eachPayload(ctx, key, func(o types.Object, name string) error {
		out = append(out, artifact.PayloadInfo{Name: name, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified).UTC()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("artifact: payloads: %w", err)
	}
	slices.SortFunc(out, func(a, b artifact.PayloadInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// eachPayload calls fn for each payload object of key
// (<key>.payloads/<address>.tar; a multipart upload in progress is not an
// object yet), in the server's listing order, with its name under the
// payloads prefix. It stops at fn's first error and returns it as is; a
// listing error is returned as "list: ...".
func (s *Store) eachPayload(ctx context.Context, key string, fn func(o types.Object, name string) error) error {
	prefix := s.payloadPrefix(key)
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for pages.HasMorePages() {
		lctx, cancel := s.op(ctx)
		page, err := pages.NextPage(lctx)
		cancel()
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), prefix)
			if strings.Contains(name, "/") || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".tar") {
				continue
			}
			if err := fn(o, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// abortStaleUploads aborts the multipart uploads under prefix idle since
// before cutoff (initiated before it, and no part uploaded after it): what
// an upload killed mid-way (a crashed node) left behind, which S3 would
// otherwise keep, and bill, forever. A live upload sends a part every few
// seconds.
func (s *Store) abortStaleUploads(ctx context.Context, prefix string, cutoff time.Time) error {
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: &prefix}
	for {
		lctx, cancel := s.op(ctx)
		page, err := s.client.ListMultipartUploads(lctx, in)
		cancel()
		if err != nil {
			return fmt.Errorf("artifact: prune: list uploads: %w", err)
		}
		for _, u := range page.Uploads {
			if u.Initiated == nil || !u.Initiated.Before(cutoff) {
				continue
			}
			if live, err := s.uploadActiveSince(ctx, u, cutoff); err != nil || live {
				if err != nil {
					return fmt.Errorf("artifact: prune: list parts of %s: %w", aws.ToString(u.Key), err)
				}
				continue
			}
			actx, cancel := s.op(ctx)
			_, err := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: u.Key, UploadId: u.UploadId})
			cancel()
			if err != nil && !isNotFound(err) {
				return fmt.Errorf("artifact: prune: abort stale upload %s: %w", aws.ToString(u.Key), err)
			}
		}
		if !aws.ToBool(page.IsTruncated) {
			return nil
		}
		in.KeyMarker, in.UploadIdMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
}

// payloadRank reads the rank of payload obj (size bytes) from its embedded
// manifest, which must have address addr ([Store.payloadManifest]). A
// payload that vanished or cannot be parsed has an unknown rank (ok false,
// nil error); only transport failures are errors.
func (s *Store) payloadRank(ctx context.Context, obj string, size int64, addr string) (protocol.Revision, bool, error) {
	b, ok, err := s.payloadManifest(ctx, obj, size, addr)
	if !ok || err != nil {
		return 0, false, err
	}
	r, ok := artifact.ManifestRank(b)
	return r, ok, nil
}

// payloadManifest reads the manifest embedded in payload obj (size bytes),
// which must have address addr. The manifest is the tar's last entry, so it
// first looks in the payload's last rankTailWindow bytes, trying each
// 512-byte block as a tar header; failing that it streams the whole
// payload. A payload that vanished or holds no such manifest gives ok
// false and a nil error; only transport failures are errors.
func (s *Store) payloadManifest(ctx context.Context, obj string, size int64, addr string) ([]byte, bool, error) {
	if size > rankTailWindow {
		start := size - rankTailWindow
		rng := fmt.Sprintf("bytes=%d-%d", start, size-1)
		tail, err := s.get(ctx, obj, &rng)
		if isNotFound(err) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		for i := (512 - start%512) % 512; i < int64(len(tail)); i += 512 {
			if !bytes.Contains(tail[i:min(i+512, int64(len(tail)))], []byte(artifact.ManifestName)) {
				continue
			}
			if b, ok := artifact.PayloadManifest(bytes.NewReader(tail[i:]), addr); ok {
				return b, true, nil
			}
		}
	}
	body, _, err := s.open(ctx, obj)
	if isNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("get %s: %w", obj, err)
	}
	defer body.Close()
	b, ok := artifact.PayloadManifest(body, addr)
	return b, ok, nil
}

// PayloadManifest implements [artifact.ManifestReader].
func (s *Store) PayloadManifest(ctx context.Context, key string, p artifact.PayloadInfo) (_ []byte, _ bool, err error) {
	defer func() { err = classify(ctx, err) }()
	if err := artifact.CheckKey(key); err != nil {
		return nil, false, err
	}
	addr, ok := strings.CutSuffix(p.Name, ".tar")
	if !ok || strings.ContainsAny(addr, "/\\") {
		return nil, false, nil
	}
	return s.payloadManifest(ctx, s.payloadPrefix(key)+p.Name, p.Size, addr)
}

func (s *Store) get(ctx context.Context, obj string, rng *string) ([]byte, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &obj, Range: rng})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", obj, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", obj, err)
	}
	return b, nil
}

// uploadActiveSince reports whether a part of upload u was uploaded at or
// after t.
func (s *Store) uploadActiveSince(ctx context.Context, u types.MultipartUpload, t time.Time) (bool, error) {
	in := &s3.ListPartsInput{Bucket: &s.bucket, Key: u.Key, UploadId: u.UploadId}
	for {
		lctx, cancel := s.op(ctx)
		page, err := s.client.ListParts(lctx, in)
		cancel()
		if isNotFound(err) {
			return false, nil // completed or aborted meanwhile
		}
		if err != nil {
			return false, err
		}
		for _, p := range page.Parts {
			if p.LastModified != nil && !p.LastModified.Before(t) {
				return true, nil
			}
		}
		if !aws.ToBool(page.IsTruncated) {
			return false, nil
		}
		in.PartNumberMarker = page.NextPartNumberMarker
	}
}
