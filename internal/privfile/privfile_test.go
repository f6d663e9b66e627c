package privfile

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// victim is a file of someone else's that a planted symlink points at.
func victim(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(p, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkVictim(t *testing.T, p string) {
	t.Helper()
	if b, err := os.ReadFile(p); err != nil || string(b) != "precious\n" {
		t.Fatalf("the victim now holds %q (%v)", b, err)
	}
}

func checkPrivate(t *testing.T, path, want string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v, want a regular file with 0600", path, fi.Mode())
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != want {
		t.Fatalf("%s holds %q (%v), want %q", path, b, err, want)
	}
}

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name    string
		plant   func(t *testing.T, path string) // what is at path before
		wantErr error
	}{
		{"nothing there", func(*testing.T, string) {}, nil},
		{"an old file of ours is replaced", func(t *testing.T, p string) { os.WriteFile(p, []byte("old, longer content"), 0o644) }, nil},
		{"a symlink to a victim", func(t *testing.T, p string) { os.Symlink(victim(t), p) }, ErrUnsafe},
		{"a dangling symlink", func(t *testing.T, p string) { os.Symlink(filepath.Join(t.TempDir(), "new"), p) }, ErrUnsafe},
		{"a directory", func(t *testing.T, p string) { os.Mkdir(p, 0o700) }, ErrUnsafe},
		{"another user's file", func(t *testing.T, p string) {
			os.WriteFile(p, []byte("theirs"), 0o644)
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal("making a file of another user needs root (CI runs as root):", err)
			}
		}, ErrUnsafe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "report.txt")
			tt.plant(t, path)
			before, _ := os.Readlink(path)
			err := WriteFile(path, []byte("report\n"))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("WriteFile: %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil {
				checkPrivate(t, path, "report\n")
				return
			}
			if before != "" {
				if after, _ := os.Readlink(path); after != before {
					t.Fatalf("the symlink now points at %q", after)
				}
				if _, err := os.Stat(before); err == nil {
					checkVictim(t, before)
				} else if !os.IsNotExist(err) {
					t.Fatal(err)
				} else if _, err := os.Lstat(before); err == nil {
					t.Fatalf("the dangling symlink's target %s was created", before)
				}
			}
		})
	}
}

// TestWriteNear plants a symlink at the exact name a report will get in the
// working directory: the report goes to the private directory instead. A
// symlink there too, or a private directory that is not private, and it
// goes nowhere.
func TestWriteNear(t *testing.T) {
	const name = "grun-stall-4242-1.txt"
	tests := []struct {
		name    string
		plant   func(t *testing.T, wd, priv string)
		where   string // "wd", "private" or "" for refused
		wantErr error
	}{
		{"working directory", func(*testing.T, string, string) {}, "wd", nil},
		{"symlink at the name in the working directory", func(t *testing.T, wd, _ string) {
			os.Symlink(victim(t), filepath.Join(wd, name))
		}, "private", nil},
		{"symlinks at the name in both", func(t *testing.T, wd, priv string) {
			v := victim(t)
			os.Symlink(v, filepath.Join(wd, name))
			os.Mkdir(priv, 0o700)
			os.Symlink(v, filepath.Join(priv, name))
		}, "", ErrUnsafe},
		{"private directory is a symlink", func(t *testing.T, wd, priv string) {
			os.Symlink(victim(t), filepath.Join(wd, name))
			os.Symlink(t.TempDir(), priv)
		}, "", ErrUnsafe},
		{"private directory open to others", func(t *testing.T, wd, priv string) {
			os.Symlink(victim(t), filepath.Join(wd, name))
			os.Mkdir(priv, 0o777)
			os.Chmod(priv, 0o777)
		}, "", ErrUnsafe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wd, tmp := t.TempDir(), t.TempDir()
			chdir(t, wd)
			t.Setenv("TMPDIR", tmp)
			priv := filepath.Join(tmp, "gocoll-"+strconv.Itoa(os.Geteuid()))
			tt.plant(t, wd, priv)
			path, err := WriteNear(name, []byte("stacks\n"))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("WriteNear: %q, %v; want %v", path, err, tt.wantErr)
			}
			switch tt.where {
			case "wd":
				if path != filepath.Join(wd, name) {
					t.Fatalf("wrote %s, want the working directory", path)
				}
			case "private":
				if path != filepath.Join(priv, name) {
					t.Fatalf("wrote %s, want %s", path, filepath.Join(priv, name))
				}
				if fi, err := os.Lstat(priv); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Fatalf("private directory %v (%v), want 0700", fi.Mode(), err)
				}
			default:
				return
			}
			checkPrivate(t, path, "stacks\n")
		})
	}
}

// chdir moves the test into dir until it ends (the test must not be
// parallel: the working directory is the process's).
func chdir(t *testing.T, dir string) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir(wd) })
}
