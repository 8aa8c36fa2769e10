package hosttest

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FullDiskFSFake is a fault-injecting filesystem (a fake, for tests): the
// OS's, with a disk of a settable free space under root. Every write of a
// file under root takes from Avail; a write larger than what is left fails
// whole, nothing written, with ENOSPC as the OS reports it (an
// *os.PathError); so does an allocation of more than is left.
// GetDiskUsage reports Avail, or plenty while Lie is set: something else
// took the space between the store's check and its write.
type FullDiskFSFake struct {
	vfs.FS
	root string
	// Avail is the free space left; Lie makes GetDiskUsage report plenty;
	// Fails counts the writes failed.
	Avail atomic.Int64
	Lie   atomic.Bool
	Fails atomic.Int64
}

func NewFullDiskFSFake(root string) *FullDiskFSFake {
	f := &FullDiskFSFake{FS: vfs.Default, root: root}
	f.Avail.Store(1 << 40)
	return f
}

func (f *FullDiskFSFake) under(path string) bool {
	return path == f.root || strings.HasPrefix(path, f.root+string(filepath.Separator))
}

func (f *FullDiskFSFake) wrap(file vfs.File, name string, err error) (vfs.File, error) {
	if err != nil || !f.under(name) {
		return file, err
	}
	return &fullDiskFileFake{File: file, fs: f, name: name}, nil
}

func (f *FullDiskFSFake) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return f.wrap(file, name, err)
}

func (f *FullDiskFSFake) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name, c, opts...)
	return f.wrap(file, name, err)
}

func (f *FullDiskFSFake) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(oldname, newname, c)
	return f.wrap(file, newname, err)
}

func (f *FullDiskFSFake) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	if !f.under(path) {
		return f.FS.GetDiskUsage(path)
	}
	avail := max(f.Avail.Load(), 0)
	if f.Lie.Load() {
		avail = 1 << 40
	}
	return vfs.DiskUsage{AvailBytes: uint64(avail), TotalBytes: 1 << 41, UsedBytes: 1<<41 - uint64(avail)}, nil
}

func (f *FullDiskFSFake) Unwrap() vfs.FS { return f.FS }

// take debits n bytes of a write of name, or fails it.
func (f *FullDiskFSFake) take(name string, n int) error {
	if f.Avail.Add(-int64(n)) < 0 {
		f.Avail.Add(int64(n))
		f.Fails.Add(1)
		return &os.PathError{Op: "write", Path: name, Err: syscall.ENOSPC}
	}
	return nil
}

type fullDiskFileFake struct {
	vfs.File
	fs   *FullDiskFSFake
	name string
}

func (f *fullDiskFileFake) Write(p []byte) (int, error) {
	if err := f.fs.take(f.name, len(p)); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *fullDiskFileFake) Preallocate(off, n int64) error {
	if err := f.fs.take(f.name, int(n)); err != nil {
		return err
	}
	f.fs.Avail.Add(n) // allocated, not written: given back
	return f.File.Preallocate(off, n)
}

func (f *fullDiskFileFake) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.take(f.name, len(p)); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}
