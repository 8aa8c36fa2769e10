package s3store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/protocol"
)

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
