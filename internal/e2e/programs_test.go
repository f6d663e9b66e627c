package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// programs are the commands the tests start, built by TestMain.
var programs = []string{
	"github.com/gocoll/gocoll/cmd/grun",
	"github.com/gocoll/gocoll/examples/allreduce",
	"github.com/gocoll/gocoll/examples/elastic",
	"github.com/gocoll/gocoll/examples/train",
	"github.com/gocoll/gocoll/internal/e2e/testdata/collcheck",
	"github.com/gocoll/gocoll/internal/e2e/testdata/chaos",
	"github.com/gocoll/gocoll/internal/e2e/testdata/jobshape",
	"github.com/gocoll/gocoll/internal/e2e/testdata/straggler",
	"github.com/gocoll/gocoll/internal/e2e/testdata/stranger",
}

// buildPrograms builds the programs into a directory kept between runs,
// one per checkout (under the user's cache directory), so that a run
// after no change to them links nothing: go build leaves an output whose
// build ID is current alone. The directory is locked: exclusively while
// building, shared while the tests run its programs, so that no build
// rewrites a program another run of the tests is executing. A run that
// finds it locked by another builds into a directory of its own, which
// done removes. done releases the lock.
func buildPrograms() (dir string, done func(), err error) {
	dir, lock, err := lockedCache()
	if err != nil {
		dir, err = os.MkdirTemp("", "gocoll-e2e-")
		if err != nil {
			return "", nil, err
		}
		done = func() { os.RemoveAll(dir) }
	} else {
		done = func() { lock.Close() }
	}
	if err := build(dir); err != nil {
		done()
		return "", nil, err
	}
	if lock != nil {
		// Shared from now on: other runs may use the programs too.
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_SH); err != nil {
			done()
			return "", nil, fmt.Errorf("locking %s: %w", dir, err)
		}
	}
	return dir, done, nil
}

// lockedCache returns this checkout's program directory, locked
// exclusively, or an error if it has none or another run holds it.
func lockedCache() (string, *os.File, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", nil, err
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cache, "gocoll-e2e", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return "", nil, fmt.Errorf("%s is in use by another run", dir)
		}
		return "", nil, err
	}
	return dir, lock, nil
}

// build builds the programs into dir, and collbench and the timeline
// drawer, which live in the bench module (../../bench) to keep the
// plotting library out of gocoll's own module, there.
func build(dir string) error {
	sep := string(filepath.Separator)
	steps := []*exec.Cmd{
		exec.Command("go", append([]string{"build", "-o", dir + sep}, programs...)...),
		exec.Command("go", "build", "-o", filepath.Join(dir, "collbench"), "."),
		exec.Command("go", "build", "-o", dir+sep, "./timeline"),
	}
	for _, cmd := range steps[1:] {
		cmd.Dir = filepath.Join("..", "..", "bench")
	}
	for _, cmd := range steps {
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building the programs (%s): %v\n%s", cmd, err, out)
		}
	}
	return nil
}
