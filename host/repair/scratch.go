package repair

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// sorter is an external merge sort of entries by key, with bounded
// memory. Entries collect in a chunk; a full chunk is sorted and written to
// a run file in the sorter's dir; fanIn runs of one level are merged into
// one run of the next level (so at most fanIn-1 runs per level wait for the
// final merge, and each entry is rewritten once per level: log_fanIn of the
// number of chunks). The final merge reads every run and the last chunk,
// unspilled, at once; a sorter whose entries fit one chunk never touches
// the disk. For a key added more than once the highest revision wins.
type sorter struct {
	dir        string
	chunkLimit int // bytes of encoded entries before a spill
	fanIn      int // runs of one level merged into one of the next

	chunk []byte   // encoded entries
	refs  []uint32 // offsets of the chunk's entries
	runs  []run    // oldest first; levels never increase along the slice
	files int      // run files made, for names
	err   error    // a failed write: the sorter is unusable
}

// run is one sorted run file.
type run struct {
	path  string
	level int
}

const (
	sortChunk = 4 << 20 // bytes of entries sorted in memory at once, per sorter
	sortFanIn = 16
	// runWriteBuf and runReadBuf are the buffers of one run file being
	// written or read: the final merge holds one read buffer per run,
	// at most (fanIn-1) per level.
	runWriteBuf = 256 << 10
	runReadBuf  = 64 << 10
	// An entry is encoded as klen:u32 vlen:u32 rev:u64 op:u8 time:i64,
	// the key, the value: the same in the chunk and in run files.
	entryHeader = 4 + 4 + 8 + 1 + 8
)

// newSorter returns an empty sorter whose runs go to dir (made when the
// first run is written).
func newSorter(dir string) *sorter {
	return &sorter{dir: dir, chunkLimit: sortChunk, fanIn: sortFanIn}
}

// sortAdd records an entry in l; value is copied.
func sortAdd[K string | []byte](l *sorter, key K, rev protocol.Revision, op fold.Op, t int64, value []byte) error {
	if l.err != nil {
		return l.err
	}
	if uint64(len(key)) > math.MaxUint32 || uint64(len(value)) > math.MaxUint32 {
		return fmt.Errorf("repair: scratch: entry %.64q too large (%d bytes of value)", key, len(value))
	}
	if need := len(l.chunk) + entryHeader + len(key) + len(value); need > cap(l.chunk) {
		// Doubling, but never past the limit by more than this entry: a
		// sorter that holds a few entries stays small, a full one holds
		// chunkLimit bytes, not twice that.
		c := min(max(2*cap(l.chunk), 64<<10), l.chunkLimit)
		l.chunk = slices.Grow(l.chunk, max(c, need)-len(l.chunk))
	}
	l.refs = append(l.refs, uint32(len(l.chunk)))
	l.chunk = appendEntry(l.chunk, key, rev, op, t, value)
	if len(l.chunk) >= l.chunkLimit {
		return l.spill()
	}
	return nil
}

func appendEntry[K string | []byte](b []byte, key K, rev protocol.Revision, op fold.Op, t int64, value []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(key)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	b = binary.BigEndian.AppendUint64(b, uint64(rev))
	b = append(b, byte(op))
	b = binary.BigEndian.AppendUint64(b, uint64(t))
	b = append(b, key...)
	return append(b, value...)
}

// entry is a decoded entry; Key and Value alias the buffer it was read
// from, valid until the next read of that source.
type entry struct {
	Key   []byte
	Value []byte
	Rev   protocol.Revision
	Op    fold.Op
	Time  int64
}

// decodeEntry decodes the entry at the start of b and returns its length.
func decodeEntry(b []byte) (entry, int, error) {
	if len(b) < entryHeader {
		return entry{}, 0, fmt.Errorf("repair: scratch entry: %d bytes", len(b))
	}
	kl, vl := int(binary.BigEndian.Uint32(b)), int(binary.BigEndian.Uint32(b[4:]))
	n := entryHeader + kl + vl
	if kl < 0 || vl < 0 || n > len(b) || n < entryHeader {
		return entry{}, 0, fmt.Errorf("repair: scratch entry: %d+%d bytes in %d", kl, vl, len(b))
	}
	return entry{
		Rev:   protocol.Revision(binary.BigEndian.Uint64(b[8:])),
		Op:    fold.Op(b[16]),
		Time:  int64(binary.BigEndian.Uint64(b[17:])),
		Key:   b[entryHeader : entryHeader+kl : entryHeader+kl],
		Value: b[entryHeader+kl : n : n],
	}, n, nil
}

// update is e as a fold.Update that owns its key and value.
func (e entry) update() fold.Update {
	return fold.Update{Key: string(e.Key), Value: bytes.Clone(e.Value), Rev: e.Rev, Op: e.Op, Time: e.Time}
}

// newer orders two entries of one key: the higher revision wins.
func newer(a, b entry) bool { return a.Rev > b.Rev }

// keyAt is the key of the chunk entry at off.
func (l *sorter) keyAt(off uint32) []byte {
	kl := binary.BigEndian.Uint32(l.chunk[off:])
	s := off + entryHeader
	return l.chunk[s : s+kl]
}

// sortChunk sorts the chunk's refs by key, then revision.
func (l *sorter) sortChunk() {
	slices.SortFunc(l.refs, func(a, b uint32) int {
		if c := bytes.Compare(l.keyAt(a), l.keyAt(b)); c != 0 {
			return c
		}
		return cmp.Compare(binary.BigEndian.Uint64(l.chunk[a+8:]), binary.BigEndian.Uint64(l.chunk[b+8:]))
	})
}

// spill writes the chunk as a sorted run of level 0, then merges full
// levels.
func (l *sorter) spill() error {
	if len(l.refs) == 0 {
		return nil
	}
	l.sortChunk()
	if err := l.writeRun(0, []*source{chunkSource(l)}); err != nil {
		return err
	}
	l.chunk, l.refs = l.chunk[:0], l.refs[:0]
	if cap(l.chunk) > 2*l.chunkLimit {
		l.chunk = nil // grown for one large entry: not kept
	}
	for {
		n := len(l.runs)
		if n < l.fanIn || l.runs[n-l.fanIn].level != l.runs[n-1].level {
			return nil
		}
		if err := l.mergeRuns(n - l.fanIn); err != nil {
			return err
		}
	}
}

// mergeRuns merges l.runs[from:] (all of one level) into one run of the
// next level.
func (l *sorter) mergeRuns(from int) error {
	merging := slices.Clone(l.runs[from:])
	srcs := make([]*source, 0, len(merging))
	for _, r := range merging {
		s, err := openRunSource(r.path)
		if err != nil {
			closeAll(srcs)
			return l.fail(err)
		}
		srcs = append(srcs, s)
	}
	l.runs = l.runs[:from]
	if err := l.writeRun(merging[0].level+1, srcs); err != nil {
		return err
	}
	for _, r := range merging {
		if err := os.Remove(r.path); err != nil {
			return l.fail(fmt.Errorf("repair: scratch: %w", err))
		}
	}
	return nil
}

// writeRun merges srcs (which it closes) into a new run file of level.
func (l *sorter) writeRun(level int, srcs []*source) error {
	if l.files == 0 {
		if err := os.MkdirAll(l.dir, 0o755); err != nil {
			closeAll(srcs)
			return l.fail(fmt.Errorf("repair: scratch: %w", err))
		}
	}
	path := filepath.Join(l.dir, fmt.Sprintf("run-%06d", l.files))
	l.files++
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		closeAll(srcs)
		return l.fail(fmt.Errorf("repair: scratch: %w", err))
	}
	w := bufio.NewWriterSize(f, runWriteBuf)
	m, err := newMerger(srcs)
	if err == nil {
		defer m.close()
	}
	for ; err == nil && m.valid(); m.next() {
		e := m.entry()
		err = writeEntry(w, e.Key, e.Rev, e.Op, e.Time, e.Value)
	}
	if err == nil {
		err = m.err()
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return l.fail(fmt.Errorf("repair: scratch: writing %s: %w", path, err))
	}
	l.runs = append(l.runs, run{path: path, level: level})
	return nil
}

// writeEntry appends an entry to w, through w's own buffer.
func writeEntry[K string | []byte](w *bufio.Writer, key K, rev protocol.Revision, op fold.Op, t int64, value []byte) error {
	if n := entryHeader + len(key) + len(value); w.Available() < n && w.Buffered() > 0 {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	_, err := w.Write(appendEntry(w.AvailableBuffer(), key, rev, op, t, value))
	return err
}

func (l *sorter) fail(err error) error {
	if l.err == nil {
		l.err = err
	}
	return err
}

// iter ends the sorter (no add after it) and returns an iterator over
// every key in order, each once, at its highest revision. The caller
// closes it.
func (l *sorter) iter() (*merger, error) {
	if l.err != nil {
		return nil, l.err
	}
	l.sortChunk()
	srcs := []*source{chunkSource(l)}
	for _, r := range l.runs {
		s, err := openRunSource(r.path)
		if err != nil {
			closeAll(srcs)
			return nil, err
		}
		srcs = append(srcs, s)
	}
	return newMerger(srcs)
}

// release drops the sorter's memory (its files go with the scratch dir).
func (l *sorter) release() { l.chunk, l.refs = nil, nil }

// source is one sorted input of a merge, of distinct keys: the sorter's
// sorted chunk (chunk set) or a run file. It is positioned on an entry
// while ok.
type source struct {
	e  entry
	ok bool

	chunk *sorter // a chunk source: its sorter, and the index in refs
	i     int

	f       *os.File // a run source: the file, read through r
	r       *bufio.Reader
	skip    int    // bytes of the current entry still in r
	big     []byte // the current entry when it does not fit r's buffer
	readErr error
}

func chunkSource(l *sorter) *source {
	s := &source{chunk: l, i: -1}
	s.next()
	return s
}

func openRunSource(path string) (*source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("repair: scratch: %w", err)
	}
	s := &source{f: f, r: bufio.NewReaderSize(f, runReadBuf)}
	if s.next(); s.readErr != nil {
		_ = f.Close()
		return nil, s.readErr
	}
	return s, nil
}

func (s *source) close() {
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	s.ok = false
}

// next moves to the next entry; a failed read sets readErr.
func (s *source) next() {
	if s.chunk != nil {
		s.nextInChunk()
		return
	}
	s.ok = false
	if s.readErr != nil {
		return
	}
	if err := s.read(); err != nil {
		s.readErr = fmt.Errorf("repair: scratch: reading %s: %w", s.f.Name(), err)
	}
}

// nextInChunk moves to the next key of the chunk, at its last entry (the
// chunk is sorted by key, then revision: the newest).
func (s *source) nextInChunk() {
	l := s.chunk
	s.i++
	for s.i+1 < len(l.refs) && bytes.Equal(l.keyAt(l.refs[s.i]), l.keyAt(l.refs[s.i+1])) {
		s.i++
	}
	if s.ok = s.i < len(l.refs); s.ok {
		s.e, _, _ = decodeEntry(l.chunk[l.refs[s.i]:]) // encoded by add: well-formed
	}
}

// read decodes the next entry of the run in place in r's buffer (or, if
// it is larger than that, in big).
func (s *source) read() error {
	if _, err := s.r.Discard(s.skip); err != nil {
		return err
	}
	s.skip = 0
	h, err := s.r.Peek(entryHeader)
	if err != nil {
		if errors.Is(err, io.EOF) && len(h) == 0 {
			return nil
		}
		return err
	}
	n := entryHeader + int(binary.BigEndian.Uint32(h)) + int(binary.BigEndian.Uint32(h[4:]))
	var b []byte
	if n <= s.r.Size() {
		if b, err = s.r.Peek(n); err != nil {
			return err
		}
		s.skip = n
	} else {
		if cap(s.big) < n {
			s.big = make([]byte, n)
		}
		b = s.big[:n]
		if _, err := io.ReadFull(s.r, b); err != nil {
			return err
		}
	}
	if s.e, _, err = decodeEntry(b); err != nil {
		return err
	}
	s.ok = true
	return nil
}

// merger merges sources, each of distinct keys, into one sequence of
// distinct keys, each at its highest revision among the sources: a k-way
// merge over a min-heap of the sources by key.
//
// Its errors are sticky: a failed read ends it (valid turns false) and err
// says why.
type merger struct {
	h    []*source // a min-heap by current key
	win  *source   // the source positioned on the current entry, out of h
	fail error
}

// newMerger merges srcs; it closes them when they end, and close closes
// the rest.
func newMerger(srcs []*source) (*merger, error) {
	m := &merger{}
	for _, s := range srcs {
		if s.readErr != nil && m.fail == nil {
			m.fail = s.readErr
		}
		if s.ok {
			m.h = append(m.h, s)
		} else {
			s.close()
		}
	}
	for i := len(m.h)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	if m.fail == nil {
		m.next()
	}
	if m.fail != nil {
		m.close()
		return nil, m.fail
	}
	return m, nil
}

func (m *merger) valid() bool  { return m.win != nil }
func (m *merger) entry() entry { return m.win.e }

// err is why the merger ended early (nil if it did not).
func (m *merger) err() error { return m.fail }

// next moves to the next key: the sources positioned on the smallest key
// leave the heap, the one with the newest entry becomes the current one,
// the others move on.
func (m *merger) next() {
	if m.fail != nil {
		return
	}
	if w := m.win; w != nil {
		m.win = nil
		w.next()
		if !m.put(w) {
			return
		}
	}
	if len(m.h) == 0 {
		return
	}
	win := m.pop()
	for len(m.h) > 0 && bytes.Equal(m.h[0].e.Key, win.e.Key) {
		s := m.pop()
		if newer(s.e, win.e) {
			win, s = s, win
		}
		s.next()
		if !m.put(s) {
			win.close()
			return
		}
	}
	m.win = win
}

// put returns s to the heap if it has an entry, or closes it; false when
// it failed (the merger is closed).
func (m *merger) put(s *source) bool {
	if s.ok {
		m.h = append(m.h, s)
		m.up(len(m.h) - 1)
		return true
	}
	s.close()
	if s.readErr != nil {
		m.fail = s.readErr
		m.close()
		return false
	}
	return true
}

func (m *merger) less(i, j int) bool { return bytes.Compare(m.h[i].e.Key, m.h[j].e.Key) < 0 }

func (m *merger) pop() *source {
	s := m.h[0]
	n := len(m.h) - 1
	m.h[0] = m.h[n]
	m.h[n] = nil
	m.h = m.h[:n]
	if n > 0 {
		m.down(0)
	}
	return s
}

func (m *merger) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !m.less(i, p) {
			return
		}
		m.h[i], m.h[p] = m.h[p], m.h[i]
		i = p
	}
}

func (m *merger) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(m.h) {
			return
		}
		if c+1 < len(m.h) && m.less(c+1, c) {
			c++
		}
		if !m.less(c, i) {
			return
		}
		m.h[i], m.h[c] = m.h[c], m.h[i]
		i = c
	}
}

// close closes every source still open.
func (m *merger) close() {
	if m.win != nil {
		m.win.close()
		m.win = nil
	}
	closeAll(m.h)
	m.h = nil
}

func closeAll(srcs []*source) {
	for _, s := range srcs {
		s.close()
	}
}

// spool keeps entries in the order they came, in a file, until they can
// be read back once.
type spool struct {
	path string
	f    *os.File
	w    *bufio.Writer
}

func (s *spool) add(u fold.Update) error {
	if s.w == nil {
		f, err := os.OpenFile(s.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("repair: scratch: %w", err)
		}
		s.f, s.w = f, bufio.NewWriterSize(f, runWriteBuf)
	}
	if err := writeEntry(s.w, u.Key, u.Rev, u.Op, u.Time, u.Value); err != nil {
		return fmt.Errorf("repair: scratch: writing %s: %w", s.path, err)
	}
	return nil
}

// replay calls fn with every entry added, in order, and empties the spool.
func (s *spool) replay(fn func(fold.Update) error) error {
	if s.w == nil {
		return nil
	}
	err := s.w.Flush()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f, s.w = nil, nil
	if err != nil {
		return fmt.Errorf("repair: scratch: writing %s: %w", s.path, err)
	}
	src, err := openRunSource(s.path)
	if err != nil {
		return err
	}
	defer src.close()
	for ; src.ok; src.next() {
		e := src.e
		if err := fn(fold.Update{Key: string(e.Key), Value: e.Value, Rev: e.Rev, Op: e.Op, Time: e.Time}); err != nil {
			return err
		}
	}
	if src.readErr != nil {
		return src.readErr
	}
	return os.Remove(s.path)
}

// close closes the spool's file if it is still being written.
func (s *spool) close() {
	if s.f != nil {
		_ = s.f.Close()
	}
}
