package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDraw: a merged trace of three lanes becomes a PNG 1400 pixels wide
// with a row per lane, and the summary line counts calls and lanes.
func TestDraw(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.png")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-o", out, filepath.Join("testdata", "three-lanes.json")}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if want := "4 calls of 3 lanes drawn in " + out; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// 160 pixels of title and axis, 28 a row: three lanes and the legend's
	// rows above them.
	if b := img.Bounds(); b.Dx() != 1400 || b.Dy() < 160+3*28 {
		t.Errorf("PNG is %v, want 1400 wide and at least %d high", b, 160+3*28)
	}
}

// TestReadTrace: lanes come in grun's sort order, calls keep their lane,
// times and failure.
func TestReadTrace(t *testing.T) {
	tr, err := readTrace(filepath.Join("testdata", "three-lanes.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tr.lanes, "|"); got != "rank 0|rank 0, split #1 color 0|rank 1" {
		t.Errorf("lanes %q", got)
	}
	last := tr.calls[len(tr.calls)-1]
	if last.kind != "allgather" || last.lane != 2 || !last.failed || last.start.Microseconds() != 200 || last.end.Microseconds() != 15200 {
		t.Errorf("last call %+v", last)
	}
}

// TestRefuses: what timeline cannot use, it names, with exit status 2 for
// usage and 1 for a file it cannot read.
func TestRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no file", nil, 2, "want one trace file, got 0"},
		{"two files", []string{"a", "b"}, 2, "want one trace file, got 2"},
		{"bad flag", []string{"-png", "x"}, 2, "flag provided but not defined: -png"},
		{"missing", []string{filepath.Join(dir, "missing.json")}, 1, "no such file"},
		{"not JSON", []string{write("jsonl", `{"rank":0}`+"\n"+`{"rank":1}`)}, 1, "not a trace-event file"},
		{"no calls", []string{write("empty.json", `{"traceEvents":[]}`)}, 1, "holds no calls"},
		{"unnamed lane", []string{write("unnamed.json", `{"traceEvents":[{"name":"barrier #1","cat":"barrier","ph":"X","ts":1,"dur":2,"tid":7}]}`)}, 1, "thread 7, which no thread_name event names"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"-o", filepath.Join(dir, "out.png")}, tc.args...), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.says) {
				t.Errorf("exit %d, %q; want %d saying %q", code, stderr.String(), tc.code, tc.says)
			}
		})
	}
}
