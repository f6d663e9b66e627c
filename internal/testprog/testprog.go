// Package testprog builds the programs a package's tests start (grun,
// the examples, the helpers in testdata) into a directory kept between
// runs, so that a run after no change to them links nothing: go build
// leaves an output whose build ID is current alone, and linking is most
// of what building costs once the build cache holds the packages.
//
// The directory is one per test package and name, under the user's cache
// directory (gocoll-testprog/), and locked: exclusively while building,
// shared while the tests run its programs, so that no build rewrites a
// program another run of the tests is executing. A run that finds it
// locked by another builds into a temporary directory instead.
package testprog

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Build is one go build.
type Build struct {
	Dir   string   // where it runs, relative to the test's directory ("": there)
	Flags []string // such as -race
	Out   string   // the program's name, for one package ("": each package's own)
	Pkgs  []string // import paths, or directories relative to Dir
}

// Programs runs the builds, concurrently, into the directory kept for
// the calling test package under name (a name of its own for each set of
// flags, "race" say, lest two sets relink each other's programs), and
// returns it. done, once the tests are over, releases it.
func Programs(name string, builds ...Build) (dir string, done func(), err error) {
	dir, lock, err := kept(name)
	if err != nil {
		if dir, err = os.MkdirTemp("", "gocoll-"+name+"-"); err != nil {
			return "", nil, err
		}
		done = func() { os.RemoveAll(dir) }
	} else {
		done = func() { lock.Close() }
	}
	if err := buildAll(dir, builds); err != nil {
		done()
		return "", nil, err
	}
	if lock != nil {
		// Shared from now on: other runs may use the programs too.
		if err := lockShared(lock); err != nil {
			done()
			return "", nil, fmt.Errorf("testprog: locking %s: %w", dir, err)
		}
	}
	return dir, done, nil
}

// Main is a TestMain: it builds the programs (see Programs), sets *bin
// to their directory, runs the tests, releases the directory and exits.
func Main(m *testing.M, bin *string, name string, builds ...Build) {
	dir, done, err := Programs(name, builds...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = dir
	code := m.Run()
	done()
	os.Exit(code)
}

// errBusy: another run holds the kept directory.
var errBusy = errors.New("in use by another run")

// kept returns the directory for name and the test package in the
// working directory, locked exclusively, or an error if there is none or
// another run holds it.
func kept(name string) (string, *os.File, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", nil, err
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256([]byte(wd))
	dir := filepath.Join(cache, "gocoll-testprog", name+"-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", nil, err
	}
	if err := lockExclusive(lock); err != nil {
		lock.Close()
		if errors.Is(err, errBusy) {
			return "", nil, fmt.Errorf("testprog: %s is in use by another run", dir)
		}
		return "", nil, err
	}
	return dir, lock, nil
}

func buildAll(dir string, builds []Build) error {
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, b := range builds {
		out := dir + string(filepath.Separator)
		if b.Out != "" {
			out = filepath.Join(dir, b.Out)
		}
		args := append(append([]string{"build", "-o", out}, b.Flags...), b.Pkgs...)
		cmd := exec.Command("go", args...)
		cmd.Dir = b.Dir
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
