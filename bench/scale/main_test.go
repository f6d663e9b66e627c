//go:build unix

package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestMain lets the test binary be one of spreadJob's -block processes,
// which run os.Executable with scale's flags.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-block" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestLocalSweep runs the in-process sweep on small jobs: a row of
// figures per rank count, and a bad -n refused.
func TestLocalSweep(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"-local", "-n", "2,4"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, n := range []string{"2", "4"} {
		if !regexp.MustCompile(`(?m)^\s+` + n + `\s+\S+s\s+\S+s\s+\d+\s+\d+\s+-?\d+\s+[1-9]\d*\s+\S+s$`).MatchString(out.String()) {
			t.Errorf("no row for %s ranks:\n%s", n, out.String())
		}
	}
	errs.Reset()
	if code := run([]string{"-n", "8,x"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "want rank counts") {
		t.Errorf("-n 8,x: exit %d, %q", code, errs.String())
	}
}

// TestSpreadSweep runs goroutine ranks spread over processes of the test
// binary itself (see TestMain), and refuses -procs
// without -local.
func TestSpreadSweep(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"-local", "-procs", "3", "-n", "7"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if !strings.Contains(out.String(), "goroutines in 3 processes") ||
		!regexp.MustCompile(`(?m)^\s+7\s+\S+s\s+\S+s\s+\d+\s+\d+\s+-?\d+\s+[1-9]\d*\s+\S+s$`).MatchString(out.String()) {
		t.Errorf("no row for 7 ranks in 3 processes:\n%s%s", out.String(), errs.String())
	}
	errs.Reset()
	if code := run([]string{"-procs", "2", "-n", "4"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "only with -local") {
		t.Errorf("-procs without -local: exit %d, %q", code, errs.String())
	}
}
