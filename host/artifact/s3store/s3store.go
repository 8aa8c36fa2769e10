// Package s3store is the S3 artifact store (see [Store]).
package s3store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/foldhost/foldhost/host/artifact"
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
