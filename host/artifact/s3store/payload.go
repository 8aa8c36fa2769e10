package s3store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/protocol"
)

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
