package calltrace

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/privfile"
	"github.com/gocoll/gocoll/internal/reduce"
)

// TestOpenPrivate: a rank's trace is 0600, and a symlink planted at
// the name it will get is refused, not followed.
func TestOpenPrivate(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pattern := filepath.Join(dir, "trace-%r.jsonl")
	if err := os.Symlink(victim, filepath.Join(dir, "trace-1.jsonl")); err != nil {
		t.Fatal(err)
	}
	tf, err := Open(pattern, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tf.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "trace-0.jsonl")); err != nil || fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
		t.Fatalf("trace %v (%v), want a regular file of mode 0600", fi.Mode(), err)
	}
	_, err = Open(pattern, 1)
	if !errors.Is(err, collectives.ErrInvalid) || !errors.Is(err, privfile.ErrUnsafe) {
		t.Fatalf("Open over a planted symlink: %v, want %v and %v", err, collectives.ErrInvalid, privfile.ErrUnsafe)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Fatalf("the victim's file now holds %q (%v)", b, err)
	}
}

// TestPath: "%r" is replaced by the job rank, every time it occurs; a
// pattern without it gets ".<rank>".
func TestPath(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		rank    int
		want    string
	}{
		{"trace-%r.jsonl", 3, "trace-3.jsonl"},
		{"%r/trace-%r", 12, "12/trace-12"},
		{"trace.jsonl", 0, "trace.jsonl.0"},
	} {
		if got := path(tc.pattern, tc.rank); got != tc.want {
			t.Errorf("path(%q, %d) = %q, want %q", tc.pattern, tc.rank, got, tc.want)
		}
	}
}

// TestWrite: each call is one line of JSON carrying the fields its kind
// has (a barrier no type, only reductions an op, only rooted calls a
// root, a running call no end), in the order written, and nothing is
// written after Close.
func TestWrite(t *testing.T) {
	start := time.Unix(1700000000, 123456789)
	end := start.Add(42 * time.Microsecond)
	cases := []struct {
		name string
		comm string
		rec  collectives.Record
		want string
	}{
		{"allreduce", "", collectives.Record{Seq: 1, Kind: collectives.AllReduce, Algo: collectives.Ring, DType: reduce.Float32, Op: reduce.Sum, Count: 1000, Root: -1, Start: start, End: end},
			`{"rank":5,"seq":1,"kind":"allreduce","algo":"ring","type":"float32","count":1000,"op":"sum","bytes":4000,"start_ns":1700000000123456789,"end_ns":1700000000123498789}`},
		{"barrier of a sub-communicator", "sub", collectives.Record{Seq: 2, Kind: collectives.Barrier, Algo: collectives.Ring, Root: -1, Start: start, End: end},
			`{"rank":5,"comm":"sub","seq":2,"kind":"barrier","algo":"ring","count":0,"bytes":0,"start_ns":1700000000123456789,"end_ns":1700000000123498789}`},
		{"broadcast", "", collectives.Record{Seq: 3, Kind: collectives.Broadcast, Algo: collectives.Binomial, DType: reduce.Int64, Op: reduce.Sum, Count: 3, Root: 2, Start: start, End: end},
			`{"rank":5,"seq":3,"kind":"broadcast","algo":"binomial","type":"int64","count":3,"root":2,"bytes":24,"start_ns":1700000000123456789,"end_ns":1700000000123498789}`},
		{"running reduce", "", collectives.Record{Seq: 4, Kind: collectives.Reduce, Algo: collectives.Tree, DType: reduce.Float64, Op: reduce.Max, Count: 2, Root: 0, Start: start},
			`{"rank":5,"seq":4,"kind":"reduce","algo":"tree","type":"float64","count":2,"op":"max","root":0,"bytes":16,"start_ns":1700000000123456789}`},
		{"failed", "", collectives.Record{Seq: 5, Kind: collectives.AllGather, Algo: collectives.Ring, DType: reduce.Uint8, Count: 7, Root: -1, Start: start, End: end, Failed: true},
			`{"rank":5,"seq":5,"kind":"allgather","algo":"ring","type":"uint8","count":7,"bytes":7,"start_ns":1700000000123456789,"end_ns":1700000000123498789,"failed":true}`},
	}
	dir := t.TempDir()
	f, err := Open(filepath.Join(dir, "trace-%r.jsonl"), 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		f.Write(5, tc.comm, []collectives.Record{tc.rec})
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f.Write(5, "", []collectives.Record{cases[0].rec}) // after Close: nothing
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "trace-5.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(cases), b)
	}
	for i, tc := range cases {
		if lines[i] != tc.want || !json.Valid([]byte(lines[i])) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, lines[i], tc.want)
		}
	}
}
