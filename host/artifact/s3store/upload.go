package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/foldhost/foldhost/host/artifact"
)

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
