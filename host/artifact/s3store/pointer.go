package s3store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/protocol"
)

// SwapPointer publishes manifest as key's pointer if
// [protocol.PointerSwapAllowed] admits its rank and epoch against the
// pointer it reads, by a conditional write against exactly the pointer it read
// (If-None-Match "*" when absent, If-Match its ETag when present). A lost
// conditional write is retried from the read, at most [MaxSwapRetries]
// times, then it fails with [ErrSwapContended]. The payload must already be
// stored. It returns [SupersededByNewer] when the pointer is strictly newer,
// [FencedOut] when a newer owner of the fold published it.
func (s *Store) SwapPointer(ctx context.Context, key string, manifest []byte) (_ artifact.Outcome, err error) {
	defer func() { err = classify(ctx, err) }()
	cur, epoch, err := artifact.Candidate(key, manifest)
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
		if out := artifact.Judge(state, cur.Rev, epoch); out != 0 {
			return out, nil
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
