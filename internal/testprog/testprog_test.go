package testprog

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPrograms: the programs run; a second run while the first holds
// the directory builds into one of its own, which its done removes; a
// run after both has the kept directory again.
func TestPrograms(t *testing.T) {
	hello := Build{Pkgs: []string{"./testdata/hello"}}
	dir, done, err := Programs("testprog-test", hello)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(dir, "hello")).Output()
	if err != nil || string(out) != "hello from a kept program\n" {
		t.Fatalf("hello: %q, %v", out, err)
	}

	other, otherDone, err := Programs("testprog-test", hello)
	if err != nil {
		t.Fatal(err)
	}
	if other == dir {
		t.Fatalf("a second run got %s, which the first holds", dir)
	}
	if _, err := os.Stat(filepath.Join(other, "hello")); err != nil {
		t.Fatal(err)
	}
	otherDone()
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("the second run's directory %s is still there after done: %v", other, err)
	}
	done()

	again, againDone, err := Programs("testprog-test", hello)
	if err != nil {
		t.Fatal(err)
	}
	defer againDone()
	if again != dir {
		t.Fatalf("after done, a run got %s, want the kept %s", again, dir)
	}
	if out, err := exec.Command(filepath.Join(again, "hello")).Output(); err != nil || string(out) != "hello from a kept program\n" {
		t.Fatalf("hello, kept: %q, %v", out, err)
	}
}

// TestProgramsBuildError: a build that fails says which, with go's
// output, and leaves no directory of its own behind.
func TestProgramsBuildError(t *testing.T) {
	_, _, err := Programs("testprog-test-bad", Build{Pkgs: []string{"./testdata/nosuchprogram"}})
	if err == nil {
		t.Fatal("building a missing package succeeded")
	}
	t.Log(err)
}
