package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/bench/internal/report"
	"github.com/gocoll/gocoll/internal/testmode"
)

// mpiOut is run-mpi.sh's output as printed on this machine, with mpirun's
// noise around it.
const mpiOut = `--------------------------------------------------------------------------
WARNING: a note from mpirun
--------------------------------------------------------------------------
        size        count    time_us      algbw      busbw  wrong
           8            2      10.61      0.001      0.001      0
          16            4      23.85      0.001      0.001      0
     1048576       262144    2000.00      0.524      0.524      3
`

func TestParseMPI(t *testing.T) {
	res, err := parseMPI([]byte(mpiOut), 2, "Open MPI")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(res.Rows), res.Rows)
	}
	r := res.Rows[2]
	if r.Size != 1048576 || r.Count != 262144 || r.TimeUS != 2000 || r.Wrong != 3 {
		t.Errorf("row %+v", r)
	}
	// Bandwidths come from the time, in full precision: 1 MiB in 2 ms.
	if want := 1048576 / 2000e-6 / 1e9; math.Abs(r.AlgBW-want) > 1e-12 || r.BusBW != r.AlgBW {
		t.Errorf("algbw %v busbw %v, want %v for both on 2 ranks", r.AlgBW, r.BusBW, want)
	}
	if res.Rows[0].BusBW == 0 {
		t.Error("8 B row: busbw 0, the script's rounding was kept")
	}
	if _, err := parseMPI([]byte("mpirun: nothing\n"), 2, "Open MPI"); err == nil {
		t.Error("output without rows accepted")
	}
}

func TestMedian(t *testing.T) {
	mk := func(times ...float64) report.Result {
		r := report.Result{Meta: report.Meta{Tool: "collbench", Op: "allreduce", Ranks: 4}}
		for i, tu := range times {
			r.Rows = append(r.Rows, report.Row{Size: int64(8) << i, TimeUS: tu})
		}
		return r
	}
	three := median([]report.Result{mk(10, 100), mk(30, 50), mk(20, 70)})
	if three.Rows[0].TimeUS != 20 || three.Rows[1].TimeUS != 70 {
		t.Errorf("median of 3: %+v", three.Rows)
	}
	two := median([]report.Result{mk(10, 100), mk(30)})
	if two.Rows[0].TimeUS != 20 || two.Rows[1].TimeUS != 100 {
		t.Errorf("median of 2 and of 1: %+v", two.Rows)
	}
	// busbw on 4 ranks is algbw * 1.5.
	if r := three.Rows[0]; math.Abs(r.BusBW-1.5*r.AlgBW) > 1e-15 || math.Abs(r.AlgBW-8/20e-6/1e9) > 1e-15 {
		t.Errorf("bandwidths of %+v", r)
	}
}

func TestPrintTable(t *testing.T) {
	o := options{n: 2, transport: "tcp", mpiMode: "tcp", repeat: 3, alternate: true, large: 1 << 20}
	ours := report.Result{Rows: []report.Row{withBW(report.Row{Size: 8, TimeUS: 5}, 2), withBW(report.Row{Size: 1 << 20, TimeUS: 1000}, 2)}}
	theirs := report.Result{Rows: []report.Row{withBW(report.Row{Size: 8, TimeUS: 10}, 2), withBW(report.Row{Size: 1 << 20, TimeUS: 500}, 2)}}
	var b bytes.Buffer
	printTable(&b, o, ours, theirs, []string{"memcpy 5 GB/s"})
	var rows [][]string
	for _, l := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] != "#" && f[0] != "size(B)" {
			rows = append(rows, f)
		}
	}
	if len(rows) != 2 {
		t.Fatalf("want 2 rows:\n%s", b.String())
	}
	// 8 B: half the time, ahead by time; 1 MiB: half the busbw, behind.
	if rows[0][3] != "0.500" || rows[0][6] != "2.000" || rows[0][8] != "yes" {
		t.Errorf("8 B row %q", rows[0])
	}
	if rows[1][3] != "2.000" || rows[1][6] != "0.500" || rows[1][8] != "no" {
		t.Errorf("1 MiB row %q", rows[1])
	}
	if !strings.Contains(b.String(), "# membw: memcpy 5 GB/s") || !strings.Contains(b.String(), "median of 3 run(s), order alternated") {
		t.Errorf("header lines:\n%s", b.String())
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions([]string{"-n", "4", "-min", "1K", "-max", "64M", "-transport", "shm"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.min != "1024" || o.max != "67108864" || o.mpiMode != "shm" || o.n != 4 || o.large != 1<<20 {
		t.Errorf("%+v", o)
	}
	for _, args := range [][]string{
		{"-n", "0"}, {"-repeat", "0"}, {"-min", "1M", "-max", "8"}, {"-min", "x"}, {"-mpi", "ib"}, {"stray"},
	} {
		if _, err := parseOptions(args, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

func TestPeerMin(t *testing.T) {
	for _, tc := range []struct {
		min, want string
		warm      bool
	}{
		{"8", "4", true}, // the usual sweep: a 4-byte warm-up row
		{"1024", "512", true},
		{"4", "4", false},   // half would be 2 bytes, not a float32
		{"12", "12", false}, // half would be 6 bytes
		{"x", "x", false},
	} {
		got, warm := peerMin(tc.min)
		if got != tc.want || warm != tc.warm {
			t.Errorf("peerMin(%q) = %q, %v; want %q, %v", tc.min, got, warm, tc.want, tc.warm)
		}
	}
	rows := dropBelow([]report.Row{{Size: 4}, {Size: 8}, {Size: 16}}, "8")
	if len(rows) != 2 || rows[0].Size != 8 || rows[1].Size != 16 {
		t.Errorf("dropBelow kept %+v, want the 8- and 16-byte rows", rows)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{"-min": "-min", "a b": "'a b'", "it's": `'it'\''s'`, "": "''", "/x/y.json": "/x/y.json"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestPeersForReal runs the comparison briefly against each peer this
// module carries (bench/compare/peers: Open MPI and MPICH over TCP and
// shared memory, PyTorch's gloo over TCP), so that a clone can reproduce
// the README's comparison and CI keeps the peers' programs building and
// their columns parsing. It asserts every peer's rows come back right
// (0 wrong elements); the figures themselves are for a quiet machine.
func TestPeersForReal(t *testing.T) {
	testmode.SkipIfQuick(t)
	dir := t.TempDir()
	for name, pkg := range map[string]string{"collbench": "github.com/gocoll/gocoll/bench", "grun": "github.com/gocoll/gocoll/cmd/grun"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	for _, c := range []struct{ peer, mode string }{{"openmpi", "tcp"}, {"openmpi", "shm"}, {"mpich", "tcp"}, {"mpich", "shm"}, {"gloo", "tcp"}} {
		t.Run(c.peer+"/"+c.mode, func(t *testing.T) {
			var out, errs bytes.Buffer
			args := []string{"-n", "2", "-min", "8", "-max", "1K", "-peer", c.peer, "-mpi", c.mode, "-transport", "tcp", "-membw=false",
				"-collbench", filepath.Join(dir, "collbench"), "-grun", filepath.Join(dir, "grun")}
			if err := run(context.Background(), args, &out, &errs); err != nil {
				t.Fatalf("compare %s: %v\n%s", strings.Join(args, " "), err, errs.String())
			}
			if !strings.Contains(out.String(), "vs "+peerNames[c.peer]+" ("+c.mode+")") {
				t.Errorf("the table does not say it compares with %s %s:\n%s", peerNames[c.peer], c.mode, out.String())
			}
			rows := 0
			for _, line := range strings.Split(out.String(), "\n") {
				f := strings.Fields(line)
				if len(f) == 9 && f[7] != "#wrong" {
					rows++
					if f[7] != "0/0" {
						t.Errorf("wrong elements: %s", line)
					}
				}
			}
			if rows != 8 { // 8 B to 1 KiB, doubling
				t.Errorf("%d rows, want 8:\n%s", rows, out.String())
			}
		})
	}
}
