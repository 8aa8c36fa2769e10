// Package files reads files whose content is not trusted: every read is of
// a regular file, bounded in size, and never blocks on opening (a FIFO or a
// device named where a file is expected is refused, not waited on).
package files

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular: the path names a directory, FIFO, device or socket.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge: the file is larger than the caller's limit.
var ErrTooLarge = errors.New("file too large")

// OpenRegular opens path for reading if it is a regular file (following
// symlinks) of at most max bytes, and returns it with its size. The open
// does not block: O_NONBLOCK keeps a FIFO from waiting for a writer (on a
// regular file it has no effect).
func OpenRegular(path string, max int64) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, kind(fi.Mode()))
	}
	if fi.Size() > max {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w: %d bytes, the limit is %d", path, ErrTooLarge, fi.Size(), max)
	}
	return f, fi.Size(), nil
}

// ReadRegular reads a whole regular file of at most max bytes. A file that
// grows past max while being read is refused too.
func ReadRegular(path string, max int64) ([]byte, error) {
	f, size, err := OpenRegular(path, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 0, size+1)
	b, err = readAllLimited(f, b, max)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

func readAllLimited(r io.Reader, b []byte, max int64) ([]byte, error) {
	lr := &io.LimitedReader{R: r, N: max + 1}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > max {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

// SyncDir fsyncs a directory, making the entries created or renamed in it
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
