package httpapi

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/fold"
)

// Paging reads one snapshot: the first page of a truncated range keeps
// its snapshot, and the pages its tokens lead to read from it, for
// PageSnapshotTTL from the first page (RATIONALE.md, "Pages of one
// snapshot"). Past that, or once more than MaxPageSnapshots are held (the
// oldest are let go), a next page reads a fresh snapshot and says so
// (snapshot_expired): its cursor is newer than the first page's.
const (
	DefaultPageSnapshotTTL = 30 * time.Second
	MaxPageSnapshots       = 64
)

// A partitioned fold's merged range pins every unit's page (?pin=1),
// also a page that turns out to be its last: those snapshots are held
// for PinnedSnapshotTTL at most, up to MaxPinnedSnapshots apart from the
// others, so that merged reads (a dashboard polling a small prefix)
// never let go of another reader's paging snapshot.
const (
	PinnedSnapshotTTL  = 5 * time.Second
	MaxPinnedSnapshots = 64
)

// pageSnaps holds the snapshots of ranges being paged.
type pageSnaps struct {
	ttl  time.Duration
	mu   sync.Mutex
	held map[uint64]*pageSnap
}

type pageSnap struct {
	fold    string
	space   space
	sn      *fold.Snapshot
	expires time.Time
	pinned  bool // kept for a merged range (?pin=1)
}

// take returns a share of the snapshot held under id for fold and space
// (the caller closes it), or nil when there is none (never held, expired,
// let go).
func (p *pageSnaps) take(id uint64, foldName string, sp space, now time.Time) *fold.Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(now)
	h := p.held[id]
	if h == nil || h.fold != foldName || h.space != sp {
		return nil
	}
	sn, err := h.sn.Share()
	if err != nil { // its store closed
		delete(p.held, id)
		return nil
	}
	return sn
}

// keep holds a share of sn under a new id and returns the id (0: nothing
// held, the store closing); pinned: for a merged range (shorter-lived,
// counted apart).
func (p *pageSnaps) keep(sn *fold.Snapshot, foldName string, sp space, now time.Time, pinned bool) uint64 {
	share, err := sn.Share()
	if err != nil {
		return 0
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := binary.BigEndian.Uint64(b[:]) | 1
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(now)
	if p.held == nil {
		p.held = map[uint64]*pageSnap{}
	}
	limit, ttl := MaxPageSnapshots, p.ttl
	if pinned {
		limit, ttl = MaxPinnedSnapshots, min(p.ttl, PinnedSnapshotTTL)
	}
	for { // let the oldest of its kind go
		var oldest uint64
		n := 0
		for k, h := range p.held {
			if h.pinned != pinned {
				continue
			}
			if n++; oldest == 0 || h.expires.Before(p.held[oldest].expires) {
				oldest = k
			}
		}
		if n < limit {
			break
		}
		_ = p.held[oldest].sn.Close()
		delete(p.held, oldest)
	}
	p.held[id] = &pageSnap{fold: foldName, space: sp, sn: share, expires: now.Add(ttl), pinned: pinned}
	return id
}

func (p *pageSnaps) expire(now time.Time) {
	for id, h := range p.held {
		if !now.Before(h.expires) {
			_ = h.sn.Close()
			delete(p.held, id)
		}
	}
}

// A page token: base64url(1 ++ snapshot id:u64be ++ the page's last key).
const pageTokenVersion = 1

func pageToken(id uint64, last []byte) string {
	b := make([]byte, 0, 9+len(last))
	b = append(b, pageTokenVersion)
	b = binary.BigEndian.AppendUint64(b, id)
	return base64.RawURLEncoding.EncodeToString(append(b, last...))
}

var errPageToken = errors.New("not a page token")

func parsePageToken(s string) (id uint64, after []byte, err error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 10 || b[0] != pageTokenVersion {
		return 0, nil, errPageToken
	}
	return binary.BigEndian.Uint64(b[1:9]), b[9:], nil
}

// PageTokenAfter is token (a page's next) made to continue after key
// instead, in the same snapshot: a merge over several folds' pages that
// took only part of one (key non-empty).
func PageTokenAfter(token string, key []byte) (string, error) {
	id, _, err := parsePageToken(token)
	if err != nil || len(key) == 0 {
		return "", errPageToken
	}
	return pageToken(id, key), nil
}
