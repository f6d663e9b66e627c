// Package privfile creates the files gocoll and grun write that hold what
// other users must not read or redirect: stall reports (goroutine stacks),
// traces and grun's job file (the job's token).
//
// Each is created with O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600, so a file is
// never opened unless this call created it: a symlink planted at the name,
// even at a predictable one in a shared directory, is refused, never
// followed. A regular file of this user already at the name (the trace of
// the previous run) is removed first and created afresh; anything else
// there is refused with ErrUnsafe.
//
// When the working directory takes no file, reports go to a private
// directory, $TMPDIR/gocoll-UID, created with mode 0700 and used only while
// it is a real directory of this user that no one else can enter.
package privfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// ErrUnsafe means something other than a file of this user is at the path
// (a symlink, a directory, another user's file), or the private directory
// is not private.
var ErrUnsafe = errors.New("refusing to write through what another user may have put there")

const flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL | noFollow | syscall.O_CLOEXEC

// Check says whether a file may be written at path: nil if nothing is
// there or a regular file of this user, else ErrUnsafe.
func Check(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if !fi.Mode().IsRegular() || !mine(fi) {
		return fmt.Errorf("%s is %s: %w", path, what(fi), ErrUnsafe)
	}
	return nil
}

// Create creates path for writing with mode 0600 (see the package doc).
func Create(path string) (*os.File, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ELOOP) {
			// Planted between the check and the creation.
			return nil, fmt.Errorf("%s: %v: %w", path, err, ErrUnsafe)
		}
		return nil, err
	}
	return f, nil
}

// WriteFile writes data to a file Create makes at path.
func WriteFile(path string, data []byte) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Dir returns the private directory $TMPDIR/gocoll-UID, making it (mode
// 0700) if it is missing. It fails with ErrUnsafe if what is there is not a
// directory of this user closed to others.
func Dir() (string, error) {
	dir := filepath.Join(os.TempDir(), "gocoll-"+strconv.Itoa(os.Geteuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() || !mine(fi) || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is %s: %w", dir, what(fi), ErrUnsafe)
	}
	return dir, nil
}

// WriteNear writes data to name in the working directory, else in Dir(),
// and returns the path written.
func WriteNear(name string, data []byte) (string, error) {
	err := WriteFile(name, data)
	if err == nil {
		if abs, err := filepath.Abs(name); err == nil {
			return abs, nil
		}
		return name, nil
	}
	dir, derr := Dir()
	if derr != nil {
		return "", fmt.Errorf("working directory: %v; private directory: %w", err, derr)
	}
	path := filepath.Join(dir, name)
	if perr := WriteFile(path, data); perr != nil {
		return "", fmt.Errorf("working directory: %v; private directory: %w", err, perr)
	}
	return path, nil
}

func what(fi fs.FileInfo) string {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return "a symlink"
	case !mine(fi):
		return "another user's"
	case fi.IsDir():
		return "a directory (mode " + fi.Mode().Perm().String() + ")"
	}
	return "not a regular file"
}
