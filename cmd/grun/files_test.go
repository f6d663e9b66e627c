//go:build unix

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/privfile"
)

// TestFilesRefusePlantedSymlinks: the job file (it holds the token) and
// --merge-trace's outputs are written 0600 and never through a symlink
// planted at their name.
func TestFilesRefusePlantedSymlinks(t *testing.T) {
	now := time.Now()
	recs := []traced{{JobRank: 0, Seq: 1, Call: "barrier #1", Kind: "barrier", Start: now, End: now.Add(time.Millisecond)}}
	writers := []struct {
		name  string
		write func(path string) error
	}{
		{"job file", func(p string) error {
			return writeJobFile(p, jobFile{join: "127.0.0.1:1", store: "127.0.0.1:2", token: "0123456789abcdef0123"})
		}},
		{"merged trace", func(p string) error { return writeChromeTrace(p, recs) }},
	}
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out")
			if err := w.write(path); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
				t.Fatalf("%v (%v), want a regular file of mode 0600", fi.Mode(), err)
			}
			// Written again over its own old file: fine.
			if err := w.write(path); err != nil {
				t.Fatal(err)
			}
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			planted := filepath.Join(dir, "planted")
			if err := os.Symlink(victim, planted); err != nil {
				t.Fatal(err)
			}
			if err := w.write(planted); !errors.Is(err, privfile.ErrUnsafe) {
				t.Fatalf("writing over a planted symlink: %v, want %v", err, privfile.ErrUnsafe)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
				t.Fatalf("the victim's file now holds %q (%v)", b, err)
			}
			if target, err := os.Readlink(planted); err != nil || target != victim {
				t.Fatalf("the symlink now points at %q (%v)", target, err)
			}
		})
	}
}

// TestOutputDirLogsPrivate: --output-dir's rank-R.log files are created
// 0600 (a rank's output may hold what other users must not read), over
// the previous run's logs, and never through a symlink planted at a
// rank's name: grun then fails naming --output-dir and the victim's file
// is untouched.
func TestOutputDirLogsPrivate(t *testing.T) {
	dir := t.TempDir()
	j := &job{cfg: config{n: 2, outputDir: dir}}
	for run := 0; run < 2; run++ { // the second run recreates the first's logs
		if err := j.openOutputFiles(); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		j.closeOutputFiles()
		for r := 0; r < 2; r++ {
			fi, err := os.Lstat(filepath.Join(dir, "rank-"+strconv.Itoa(r)+".log"))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
				t.Fatalf("run %d, rank %d's log: %v (%v), want a regular file of mode 0600", run, r, fi, err)
			}
		}
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(dir, "rank-1.log")
	if err := os.Remove(planted); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, planted); err != nil {
		t.Fatal(err)
	}
	err := j.openOutputFiles()
	if !errors.Is(err, privfile.ErrUnsafe) || !strings.HasPrefix(err.Error(), "--output-dir: ") {
		t.Fatalf("--output-dir over a planted symlink: %v, want %v naming --output-dir", err, privfile.ErrUnsafe)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Fatalf("the victim's file now holds %q (%v)", b, err)
	}
	// A rank that joins later: its log is refused too, and its output
	// goes to grun's instead.
	var said bytes.Buffer
	j.out = &output{stdout: &said, stderr: &said}
	j.files = nil
	if f := j.outputFile(1); f != nil || !strings.Contains(said.String(), "--output-dir: ") {
		t.Fatalf("a joining rank's log through the planted symlink: %v, grun said %q", f, said.String())
	}
}
