//go:build unix

package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

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
