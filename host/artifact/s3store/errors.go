package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/foldhost/foldhost/host/artifact"
)

// refusedCodes are S3 error codes a retry does not fix: the configuration
// (bucket, credentials, region) is wrong. XAdminUserNotFound is versitygw's
// answer to an unknown access key (AWS says InvalidAccessKeyId).
var refusedCodes = map[string]bool{
	"NoSuchBucket": true, "InvalidBucketName": true, "PermanentRedirect": true,
	"AccessDenied": true, "AllAccessDisabled": true, "AccountProblem": true,
	"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "XAdminUserNotFound": true,
	"InvalidToken": true, "ExpiredToken": true, "TokenRefreshRequired": true,
	"AuthorizationHeaderMalformed": true,
}

// classify marks err as artifact.ErrStoreRefused (the server refused for a
// reason a retry cannot fix) or artifact.ErrTransport (no answer, a cut
// connection, a server-side failure), leaving other errors, and every
// error once ctx is done (the caller's cancellation), as they are.
func classify(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || errors.Is(err, artifact.ErrTransport) || errors.Is(err, artifact.ErrStoreRefused) {
		return err
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if refusedCodes[ae.ErrorCode()] {
			return fmt.Errorf("%w: %w", artifact.ErrStoreRefused, err)
		}
		var he interface{ HTTPStatusCode() int }
		if errors.As(err, &he) {
			switch c := he.HTTPStatusCode(); {
			case c == 401 || c == 403:
				return fmt.Errorf("%w: %w", artifact.ErrStoreRefused, err)
			case c >= 500 || c == 408 || c == 429:
				return fmt.Errorf("%w: %w", artifact.ErrTransport, err)
			}
		}
		return err
	}
	var se *smithyhttp.RequestSendError
	var ne net.Error
	if errors.As(err, &se) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %w", artifact.ErrTransport, err)
	}
	return err
}

// isNotFound reports an object that does not exist: NoSuchKey (a GET) or
// NotFound (a HEAD, whose answer has no body to tell a missing bucket
// apart; the request that follows it names that). A 404 with another code,
// such as NoSuchBucket, is not "absent".
func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchUpload":
			return true
		}
	}
	return false
}
