//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMergeTraceRefuses: what --merge-trace cannot use, it names.
func TestMergeTraceRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"rank":0,"seq":1,"kind":"barrier","start_ns":1795000000000000000}`+"\nnot json\n"), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	cases := []struct {
		args []string
		says string
	}{
		{nil, "no trace files"},
		{[]string{filepath.Join(dir, "missing")}, "no such file"},
		{[]string{bad}, "bad.jsonl:2: not a GOCOLL_TRACE line"},
		{[]string{empty}, "hold no calls"},
		{[]string{"-o"}, "flag needs an argument"},
	}
	for _, tc := range cases {
		var out, errs bytes.Buffer
		code := mergeTrace(append([]string{"-o", filepath.Join(dir, "out.json")}, tc.args...), &out, &errs)
		if code != exitUsage || !strings.Contains(errs.String(), tc.says) {
			t.Errorf("--merge-trace %v: %d, %q; want %d saying %q", tc.args, code, errs.String(), exitUsage, tc.says)
		}
	}
}
