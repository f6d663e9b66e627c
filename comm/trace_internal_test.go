package comm

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gocoll/gocoll/internal/privfile"
)

// TestOpenTracePrivate: a rank's trace is 0600, and a symlink planted at
// the name it will get is refused, not followed.
func TestOpenTracePrivate(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pattern := filepath.Join(dir, "trace-%r.jsonl")
	if err := os.Symlink(victim, filepath.Join(dir, "trace-1.jsonl")); err != nil {
		t.Fatal(err)
	}
	tf, err := openTrace(pattern, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tf.close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "trace-0.jsonl")); err != nil || fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
		t.Fatalf("trace %v (%v), want a regular file of mode 0600", fi.Mode(), err)
	}
	_, err = openTrace(pattern, 1)
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, privfile.ErrUnsafe) {
		t.Fatalf("openTrace over a planted symlink: %v, want %v and %v", err, ErrInvalid, privfile.ErrUnsafe)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Fatalf("the victim's file now holds %q (%v)", b, err)
	}
}
