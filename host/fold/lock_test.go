package fold

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenRefusesAStoreInUse: a directory a Store of this process has open
// is refused under any spelling (a symlink, a relative path) and so are the
// directories inside and around it (two folds whose data dirs resolved to
// one directory used to share, and wipe, one store); after Close it opens.
func TestOpenRefusesAStoreInUse(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a")
	s, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, other := range map[string]string{
		"same path": dir, "symlink": link, "relative": rel,
		"inside": filepath.Join(dir, "nested"), "around": root,
	} {
		if o, _, err := Open(other, Options{}); !errors.Is(err, ErrLocked) {
			if err == nil {
				o.Close()
			}
			t.Errorf("%s (%s): %v, want ErrLocked", name, other, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _, err = Open(link, Options{})
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	s.Close()
}

const lockChildEnv = "FOLDHOST_FOLD_LOCK_CHILD"

// TestOpenRefusesAStoreAnotherProcessHas: the lock file excludes other
// processes, and dies with its holder; a directory inside the other
// process's live store is refused too (its registry of open stores is not
// this process's; the lock file above says so). Mutation caught: the
// nesting check removed (the inner store opens inside the live one).
func TestOpenRefusesAStoreAnotherProcessHas(t *testing.T) {
	if dir := os.Getenv(lockChildEnv); dir != "" {
		s, _, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("child: open\n")
		bufio.NewReader(os.Stdin).ReadString('\n') // until the parent says
		s.Close()
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenRefusesAStoreAnotherProcessHas$")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "child: open") {
	}
	if _, _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "another process") {
		t.Errorf("while another process has it: %v, want ErrLocked naming another process", err)
	}
	inner := filepath.Join(dir, "inner")
	if s, _, err := Open(inner, Options{}); !errors.Is(err, ErrNested) || !strings.Contains(err.Error(), "lies inside "+dir) {
		if err == nil {
			s.Close()
		}
		t.Errorf("inside another process's live store: %v, want ErrNested naming %s", err, dir)
	}
	if _, err := os.Lstat(filepath.Join(inner, LockFile)); !os.IsNotExist(err) {
		t.Errorf("the refused open left its lock file: %v", err)
	}
	// Killed, not closed: the kernel releases the lock.
	_ = cmd.Process.Kill()
	stdin.Close()
	for sc.Scan() {
	}
	_ = cmd.Wait()
	s, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	s.Close()
}

// TestOpenRefusesNestedStores: a store whose directory lies inside a
// stopped store's (its lock file stays), or holds one at any depth, is
// refused naming the other; a sibling is not. Mutations caught: the
// ancestor or the descendant walk removed.
func TestOpenRefusesNestedStores(t *testing.T) {
	root := t.TempDir()
	outer := filepath.Join(root, "outer")
	s, _, err := Open(outer, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	deep := filepath.Join(outer, "a", "b")
	if s, _, err := Open(deep, Options{}); !errors.Is(err, ErrNested) || !strings.Contains(err.Error(), "lies inside "+outer) {
		if err == nil {
			s.Close()
		}
		t.Errorf("inside a stopped store: %v, want ErrNested", err)
	}

	other := filepath.Join(root, "other")
	s, _, err = Open(filepath.Join(other, "x", "y"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, _, err := Open(other, Options{}); !errors.Is(err, ErrNested) || !strings.Contains(err.Error(), "holds "+filepath.Join(other, "x", "y")) {
		if err == nil {
			s.Close()
		}
		t.Errorf("around a stopped store: %v, want ErrNested", err)
	}
	if _, err := os.Lstat(filepath.Join(other, LockFile)); !os.IsNotExist(err) {
		t.Errorf("the refused open left its lock file: %v", err)
	}
	s, _, err = Open(filepath.Join(root, "sibling"), Options{})
	if err != nil {
		t.Fatalf("a sibling of stores: %v", err)
	}
	s.Close()
}

func TestOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"/a/b", "/a/b", true}, {"/a/b", "/a/b/c", true}, {"/a/b/c", "/a/b", true},
		{"/a/b", "/a/bc", false}, {"/a/bc", "/a/b", false}, {"/a/b", "/a/c", false}, {"/", "/a", true},
	} {
		if got := Overlap(c.a, c.b); got != c.want {
			t.Errorf("Overlap(%q, %q) = %v", c.a, c.b, got)
		}
	}
}
