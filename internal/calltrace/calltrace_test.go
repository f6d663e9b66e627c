package calltrace

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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

// line is a trace line as grun --merge-trace reads it; a pointer is nil
// where the line leaves the field out.
type line struct {
	Rank    int     `json:"rank"`
	Comm    *string `json:"comm"`
	Seq     uint64  `json:"seq"`
	Kind    string  `json:"kind"`
	Algo    string  `json:"algo"`
	Type    *string `json:"type"`
	Count   int     `json:"count"`
	Op      *string `json:"op"`
	Root    *int    `json:"root"`
	Bytes   int     `json:"bytes"`
	StartNs int64   `json:"start_ns"`
	EndNs   *int64  `json:"end_ns"`
	Failed  bool    `json:"failed"`
}

// TestWrite: each call is one JSON line carrying the fields its kind
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
		// the fields the line must have beyond rank, seq, kind, algo,
		// count and start ("" or -1: left out), with their values
		typ, op       string
		root          int // -1: none
		bytes         int
		ended, failed bool
	}{
		{name: "allreduce", rec: collectives.Record{Seq: 1, Kind: collectives.AllReduce, Algo: collectives.Ring, DType: reduce.Float32, Op: reduce.Sum, Count: 1000, Root: -1, Start: start, End: end},
			typ: "float32", op: "sum", root: -1, bytes: 4000, ended: true},
		{name: "barrier of a sub-communicator", comm: "sub", rec: collectives.Record{Seq: 2, Kind: collectives.Barrier, Algo: collectives.Ring, Root: -1, Start: start, End: end},
			root: -1, ended: true},
		{name: "broadcast", rec: collectives.Record{Seq: 3, Kind: collectives.Broadcast, Algo: collectives.Binomial, DType: reduce.Int64, Op: reduce.Sum, Count: 3, Root: 2, Start: start, End: end},
			typ: "int64", root: 2, bytes: 24, ended: true},
		{name: "running reduce", rec: collectives.Record{Seq: 4, Kind: collectives.Reduce, Algo: collectives.Tree, DType: reduce.Float64, Op: reduce.Max, Count: 2, Root: 0, Start: start},
			typ: "float64", op: "max", root: 0, bytes: 16},
		{name: "failed", rec: collectives.Record{Seq: 5, Kind: collectives.AllGather, Algo: collectives.Ring, DType: reduce.Uint8, Count: 7, Root: -1, Start: start, End: end, Failed: true},
			typ: "uint8", root: -1, bytes: 7, ended: true, failed: true},
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
	r, err := os.Open(filepath.Join(dir, "trace-5.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sc := bufio.NewScanner(r)
	i := 0
	for ; sc.Scan(); i++ {
		if i >= len(cases) {
			t.Fatalf("line %d after the %d written: %s", i+1, len(cases), sc.Text())
		}
		tc := cases[i]
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %q: %v", tc.name, sc.Text(), err)
		}
		ok := l.Rank == 5 && l.Seq == tc.rec.Seq && l.Kind == tc.rec.Kind.String() && l.Algo == tc.rec.Algo.String() &&
			l.Count == tc.rec.Count && l.Bytes == tc.bytes && l.StartNs == start.UnixNano() && l.Failed == tc.failed &&
			same(l.Comm, tc.comm) && same(l.Type, tc.typ) && same(l.Op, tc.op) &&
			(l.Root == nil) == (tc.root < 0) && (l.Root == nil || *l.Root == tc.root) &&
			(l.EndNs != nil) == tc.ended && (l.EndNs == nil || *l.EndNs == end.UnixNano())
		if !ok {
			t.Errorf("%s: %s", tc.name, sc.Text())
		}
	}
	if i != len(cases) {
		t.Errorf("%d lines, want %d", i, len(cases))
	}
}

// same says a field the line may leave out holds want ("": left out).
func same(got *string, want string) bool {
	if want == "" {
		return got == nil
	}
	return got != nil && *got == want
}
