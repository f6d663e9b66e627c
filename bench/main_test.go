package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bench/internal/report"
	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/testmode"
	"github.com/gocoll/gocoll/internal/testprog"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"8", 8, false}, {"0", 0, false}, {"64K", 64 << 10, false}, {"64k", 64 << 10, false},
		{"64KiB", 64 << 10, false}, {"64KB", 64 << 10, false}, {"16M", 16 << 20, false},
		{"1G", 1 << 30, false}, {" 2M ", 2 << 20, false}, {"8B", 8, false},
		{"", 0, true}, {"K", 0, true}, {"-8", 0, true}, {"8x", 0, true}, {"1.5M", 0, true},
		{"8T", 0, true}, {"9999999999999G", 0, true},
	} {
		got, err := parseSize(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseSize(%q) = %d, want an error", tc.in, got)
			} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in)) && !strings.Contains(err.Error(), "overflow") {
				t.Errorf("parseSize(%q): error %q does not name the input", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	t.Setenv("GOCOLL_TRANSPORT", "")
	t.Setenv("GOCOLL_ALGO", "")
	for _, tc := range []struct {
		args []string
		err  string // substring of the error; "" for a valid configuration
	}{
		{nil, ""},
		{[]string{"-op", "allgather", "-dtype", "bf16", "-min", "1K", "-max", "1M", "-factor", "4"}, ""},
		{[]string{"-step", "1K", "-min", "1K", "-max", "8K"}, ""},
		{[]string{"-dtype", "float16", "-redop", "avg"}, ""},
		{[]string{"-op", "broadcast", "-dtype", "int8", "-redop", "avg"}, ""}, // broadcast ignores -redop
		{[]string{"-min", "1M", "-max", "8"}, "-min 1048576 is larger than -max 8"},
		{[]string{"-min", "0"}, "-min 0"},
		{[]string{"-factor", "1"}, "-factor 1: want at least 2"},
		{[]string{"-factor", "0"}, "-factor 0"},
		{[]string{"-step", "0"}, "-step 0"},
		{[]string{"-step", "8", "-factor", "4"}, "-step and -factor both given"},
		{[]string{"-step", "1", "-max", "64M"}, "more than 10000 sizes"},
		{[]string{"-max", "1T"}, `"1T" is not a size`},
		{[]string{"-max", "128G"}, "more than"},
		{[]string{"-op", "alltoall9"}, `-op "alltoall9": unknown collective`},
		{[]string{"-dtype", "complex64"}, `-dtype "complex64": unknown element type`},
		{[]string{"-redop", "xor"}, `-redop "xor": unknown reduction`},
		{[]string{"-dtype", "int32", "-redop", "avg"}, "-redop avg needs a floating-point -dtype, not int32"},
		{[]string{"-root", "-1"}, "-root -1"},
		{[]string{"-iters", "-3"}, "-iters -3"},
		{[]string{"-warmup", "-1"}, "-warmup -1"},
		{[]string{"-spin", "-5ms"}, "-spin -5ms"},
		{[]string{"-spin", "5"}, "invalid value"},
		{[]string{"-format", "xml"}, `-format "xml"`},
		{[]string{"-transport", "carrier-pigeon"}, `-transport "carrier-pigeon"`},
		{[]string{"-nosuchflag"}, "flag provided but not defined: -nosuchflag"},
		{[]string{"stray"}, `unexpected argument "stray"`},
	} {
		_, err := parseConfig(tc.args, io.Discard)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.err != "" && err == nil:
			t.Errorf("%v: accepted, want an error with %q", tc.args, tc.err)
		case tc.err != "" && (!strings.Contains(err.Error(), tc.err) || !errors.Is(err, errUsage)):
			t.Errorf("%v: error %q, want one with %q wrapping errUsage", tc.args, err, tc.err)
		}
	}
}

func TestParseConfigDefaultsAndEnv(t *testing.T) {
	t.Setenv("GOCOLL_TRANSPORT", "TCP")
	t.Setenv("GOCOLL_ALGO", "allreduce=rd")
	cfg, err := parseConfig([]string{"-dtype", "half"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.op != "allreduce" || cfg.dtype != "float16" || cfg.redop != "sum" || cfg.min != 8 || cfg.max != 64<<20 ||
		cfg.factor != 2 || !cfg.check || cfg.format != "table" || cfg.transport != "tcp" || cfg.algo != "allreduce=rd" {
		t.Fatalf("defaults: %+v", cfg)
	}
	if cfg, _ = parseConfig([]string{"-transport", "auto", "-algo", "ring"}, io.Discard); cfg.transport != "auto" || cfg.algo != "ring" {
		t.Fatalf("flags must override the environment: %+v", cfg)
	}
}

func TestSweep(t *testing.T) {
	for _, tc := range []struct {
		min, max, factor, step int64
		want                   []int64
	}{
		{8, 64, 2, 0, []int64{8, 16, 32, 64}},
		{8, 100, 4, 0, []int64{8, 32}},
		{5, 5, 2, 0, []int64{5}},
		{1024, 4096, 0, 1024, []int64{1024, 2048, 3072, 4096}},
		{10, 35, 0, 10, []int64{10, 20, 30}},
		{1 << 62, math.MaxInt64, 2, 0, []int64{1 << 62}}, // no overflow into negatives
	} {
		if got := sweep(tc.min, tc.max, tc.factor, tc.step); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("sweep(%d, %d, %d, %d) = %v, want %v", tc.min, tc.max, tc.factor, tc.step, got, tc.want)
		}
	}
}

func TestIterations(t *testing.T) {
	for _, tc := range []struct {
		iters int
		size  int64
		want  int
	}{{0, 8, 200}, {0, 1<<20 - 1, 200}, {0, 1 << 20, 20}, {0, 16 << 20, 5}, {7, 64 << 20, 7}} {
		if got := iterations(config{iters: tc.iters}, tc.size); got != tc.want {
			t.Errorf("iterations(-iters %d, size %d) = %d, want %d", tc.iters, tc.size, got, tc.want)
		}
	}
}

func TestAlgoFor(t *testing.T) {
	for _, tc := range []struct{ spec, op, want string }{
		{"", "allreduce", "auto"}, {"ring", "allgather", "ring"}, {"RD", "allreduce", "rd"},
		{"allreduce=rd,broadcast=chain", "broadcast", "chain"}, {"allreduce=rd", "allgather", "auto"},
	} {
		if got := algoFor(tc.spec, tc.op); got != tc.want {
			t.Errorf("algoFor(%q, %q) = %q, want %q", tc.spec, tc.op, got, tc.want)
		}
	}
}

// TestBusFactors pins every collective's busbw factor to nccl-tests'
// PERFORMANCE.md.
func TestBusFactors(t *testing.T) {
	want := map[string]func(n float64) float64{
		"allreduce":      func(n float64) float64 { return 2 * (n - 1) / n },
		"allgather":      func(n float64) float64 { return (n - 1) / n },
		"reducescatter":  func(n float64) float64 { return (n - 1) / n },
		"broadcast":      func(float64) float64 { return 1 },
		"barrier":        func(float64) float64 { return 0 },
		"reduce":         func(float64) float64 { return 1 },
		"sendrecv":       func(float64) float64 { return 1 },
		"gather":         func(n float64) float64 { return (n - 1) / n },
		"scatter":        func(n float64) float64 { return (n - 1) / n },
		"alltoall":       func(n float64) float64 { return (n - 1) / n },
		"allgatherv":     func(n float64) float64 { return (n - 1) / n },
		"reducescatterv": func(n float64) float64 { return (n - 1) / n },
	}
	for _, name := range opNames() {
		w, ok := want[name]
		if !ok {
			t.Errorf("collective %q has no expected busbw factor in this test: add it", name)
			continue
		}
		spec, _ := findOp(name)
		for _, n := range []int{1, 2, 3, 4, 8, 64} {
			if got := spec.bus(n); math.Abs(got-w(float64(n))) > 1e-12 {
				t.Errorf("%s on %d ranks: busbw factor %v, want %v", name, n, got, w(float64(n)))
			}
		}
	}
	if f := map[int]float64{2: 1, 4: 1.5}; ring(2) != f[2] || ring(4) != f[4] {
		t.Errorf("allreduce factor: 2 ranks %v (want 1), 4 ranks %v (want 1.5)", ring(2), ring(4))
	}
}

func TestJSONRoundTrip(t *testing.T) {
	in := report.Result{
		Meta: report.Meta{Tool: "collbench", Date: "2026-01-02T03:04:05Z", Host: "h", Cores: 2, CPUModel: "AMD EPYC", CPUs: "0", GOMAXPROCS: 1, Ranks: 4,
			Op: "allreduce", DType: "float32", Redop: "sum", Root: 0, Transport: "tcp", Algo: "auto", Iters: 0, Warmup: 3,
			Check: true, GoVersion: "go1.26", Version: "abc123", Args: []string{"-min", "8"}},
		Rows: []report.Row{
			{Size: 8, Count: 2, Type: "float32", Redop: "sum", Root: -1, TimeUS: 12.5, AlgBW: 0.00064, BusBW: 0.00096, Wrong: 0, Algo: "auto", Iters: 200},
			{Size: 64 << 20, Count: 16 << 20, Type: "float32", Redop: "sum", Root: -1, TimeUS: 1e5, AlgBW: 0.671, BusBW: 1.0066, Wrong: -1, Algo: "ring", Iters: 5, TimeMinUS: 9e4, TimeMaxUS: 2e5, Runs: 3},
		},
	}
	var buf bytes.Buffer
	s := newSink("json", &buf, false)
	s.begin()
	for _, r := range in.Rows {
		if err := s.row(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.end(in.Meta); err != nil {
		t.Fatal(err)
	}
	out, err := report.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the result:\n in  %+v\n out %+v", in, out)
	}
	for _, bad := range []string{`{}`, `not json`, `{"meta":{"tool":"collbench","op":"allreduce"},"rows":[],"extra":1}`} {
		if _, err := report.Decode(strings.NewReader(bad)); !errors.Is(err, report.ErrFormat) {
			t.Errorf("Decode(%s) = %v, want ErrFormat", bad, err)
		}
	}
}

func TestTableAndCSV(t *testing.T) {
	row := report.Row{Size: 1024, Count: 256, Type: "float32", Redop: "sum", Root: -1, TimeUS: 12.345, AlgBW: 0.083, BusBW: 0.0829, Wrong: 0, Algo: "ring"}
	var tb, cb bytes.Buffer
	for _, sk := range []struct {
		s sink
		b *bytes.Buffer
	}{{newSink("table", &tb, false), &tb}, {newSink("csv", &cb, false), &cb}} {
		sk.s.begin()
		sk.s.row(row)
		sk.s.row(report.Row{Size: 0, Type: "float32", Redop: "none", Root: -1, TimeUS: 3, Wrong: -1, Algo: "auto"})
		if err := sk.s.end(report.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimRight(tb.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("table: %d lines, want a header and 2 rows:\n%s", len(lines), tb.String())
	}
	if h := strings.Fields(lines[0]); !reflect.DeepEqual(h, columns) {
		t.Errorf("table header %q, want %q", h, columns)
	}
	if f := strings.Fields(lines[1]); !reflect.DeepEqual(f, []string{"1024", "256", "float32", "sum", "-1", "12.35", "0.083", "0.083", "0", "ring"}) {
		t.Errorf("table row %q", f)
	}
	if f := strings.Fields(lines[2]); f[8] != "N/A" {
		t.Errorf("an unchecked row shows #wrong %q, want N/A", f[8])
	}
	// The columns line up: numbers end where their header ends, and the
	// last column (algo) starts where its header starts.
	head := fieldSpans(lines[0])
	for _, l := range lines[1:] {
		spans := fieldSpans(l)
		for i := range head {
			if i < len(head)-1 && spans[i][1] != head[i][1] || i == len(head)-1 && spans[i][0] != head[i][0] {
				t.Errorf("column %s of row %q does not line up with header %q", columns[i], l, lines[0])
			}
		}
	}
	c := strings.Split(strings.TrimSpace(cb.String()), "\n")
	if len(c) != 3 || c[0] != strings.Join(columns, ",") || c[1] != "1024,256,float32,sum,-1,12.345,0.0830,0.0829,0,ring" {
		t.Errorf("csv:\n%s", cb.String())
	}
}

// fieldSpans gives the [start, end) of every space-separated field of l.
func fieldSpans(l string) [][2]int {
	var out [][2]int
	start := -1
	for i := 0; i <= len(l); i++ {
		space := i == len(l) || l[i] == ' '
		if !space && start < 0 {
			start = i
		}
		if space && start >= 0 {
			out = append(out, [2]int{start, i})
			start = -1
		}
	}
	return out
}

// localJob runs f on every rank of an in-process job of n ranks.
func localJob(t *testing.T, n int, f func(c *comm.Communicator) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := comm.NewLocal(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// All at once: each Close waits for its peers' goodbyes, which
		// one after another it would wait out.
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
		wg.Wait()
	}()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(c) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// collect is a sink that keeps rows only.
type collect struct{ kept }

func (*collect) begin()                   {}
func (c *collect) row(r report.Row) error { c.list = append(c.list, r); return nil }
func (*collect) end(report.Meta) error    { return nil }
func quickConfig(op, dtype, redop string) config {
	return config{op: op, dtype: dtype, redop: redop, root: 1, min: 8, max: 4 << 10, factor: 4, iters: 2, warmup: 1, check: true, format: "table"}
}

// TestEveryCollectiveTypeAndRedop runs the sweep of every collective, for
// every element type and every reduction that type has, in one in-process
// job of 3 ranks (not a power of two), and requires every row checked
// and right. In the quick check every collective runs on every type with
// sum, and the other reductions on allreduce alone: the patterns and
// checks are one per type and reduction, whichever collective reduced.
func TestEveryCollectiveTypeAndRedop(t *testing.T) {
	type run struct {
		cfg  config
		rows *collect
	}
	var runs []run
	for _, d := range dtypes {
		for _, op := range opNames() {
			spec, _ := findOp(op)
			reds := []string{"sum"}
			if spec.reduces {
				reds = []string{"sum", "prod", "min", "max", "exactsum"}
				if d.float {
					reds = append(reds, "avg")
				}
			}
			if testmode.Quick() && op != "allreduce" {
				reds = reds[:1]
			}
			for _, red := range reds {
				runs = append(runs, run{quickConfig(op, d.name, red), &collect{}})
			}
		}
	}
	const n = 3
	localJob(t, n, func(c *comm.Communicator) error {
		for _, r := range runs {
			e := env{ctx: context.Background(), c: c, cfg: r.cfg}
			if c.Rank() == 0 {
				e.out = r.rows
			}
			d, _ := dtypeByName(r.cfg.dtype)
			if err := d.run(e); err != nil {
				return fmt.Errorf("%s %s %s: %w", r.cfg.op, r.cfg.dtype, r.cfg.redop, err)
			}
		}
		return nil
	})
	for _, r := range runs {
		name := r.cfg.op + " " + r.cfg.dtype + " " + r.cfg.redop
		rows := r.rows.rows()
		if len(rows) == 0 {
			t.Errorf("%s: no rows", name)
		}
		for _, row := range rows {
			if r.cfg.op == "barrier" {
				if row.Wrong != -1 || row.Size != 0 {
					t.Errorf("%s: row %+v", name, row)
				}
				continue
			}
			// Collectives that cut the buffer into one block per rank have
			// sizes that are multiples of n and count one block, as
			// nccl-tests does; the v-variants cut unevenly and count the
			// smaller blocks; the rest count the whole buffer.
			split := map[string]bool{"allgather": true, "reducescatter": true, "gather": true, "scatter": true, "alltoall": true}[r.cfg.op]
			uneven := map[string]bool{"allgatherv": true, "reducescatterv": true}[r.cfg.op]
			if row.Wrong != 0 || row.TimeUS <= 0 || row.Size <= 0 || split && row.Size%int64(n) != 0 {
				t.Errorf("%s: row %+v", name, row)
			}
			d, _ := dtypeByName(r.cfg.dtype)
			elems := row.Size / int64(d.size)
			want := elems
			if split || uneven {
				want = elems / n
			}
			if row.Count != want {
				t.Errorf("%s: size %d, count %d, want %d", name, row.Size, row.Count, want)
			}
		}
	}
}

// TestCheckCountsWrongElements: a collective that gets some elements
// wrong on one rank is reported with exactly that many wrong, and the run
// fails with errWrong.
func TestCheckCountsWrongElements(t *testing.T) {
	good, _ := lookup[float32]("allreduce")
	bad := good
	bad.run = func(ctx context.Context, c *comm.Communicator, s, r []float32, p params) error {
		err := comm.AllReduce(ctx, c, s, p.redop)
		if p.rank == 1 && len(s) >= 3 {
			s[0]++
			s[len(s)-1] = -s[len(s)-1]
		}
		return err
	}
	out := &collect{}
	cfg := quickConfig("allreduce", "float32", "sum")
	var wrongErrs int
	var mu sync.Mutex
	localJob(t, 2, func(c *comm.Communicator) error {
		e := env{ctx: context.Background(), c: c, cfg: cfg}
		if c.Rank() == 0 {
			e.out = out
		}
		err := benchSpec(e, bad)
		if errors.Is(err, errWrong) {
			mu.Lock()
			wrongErrs++
			mu.Unlock()
			return nil
		}
		return fmt.Errorf("want errWrong, got %v", err)
	})
	if wrongErrs != 2 {
		t.Fatalf("%d ranks saw errWrong, want both", wrongErrs)
	}
	for _, row := range out.rows() {
		want := int64(2)
		if row.Count < 3 {
			want = 0
		}
		if row.Wrong != want {
			t.Errorf("size %d: #wrong %d, want %d", row.Size, row.Wrong, want)
		}
	}
}

// TestPatternsCatchCorruption: the check finds a changed element in every
// type, and the tolerance for float sums does not hide an error of 1.
func TestPatternsCatchCorruption(t *testing.T) {
	testPatterns[int8](t)
	testPatterns[uint64](t)
	testPatterns[comm.BFloat16](t)
	testPatterns[comm.Float16](t)
	testPatterns[float64](t)
}

func testPatterns[T comm.Element](t *testing.T) {
	const n = 4
	for _, op := range []comm.Op{comm.Sum, comm.Prod, comm.Min, comm.Max} {
		pt := newPatterns[T](true, op, n)
		res := make([]T, 50)
		src := func(i int) origin { return origin{reduced, i} }
		for i := range res {
			res[i] = pt.red[i%pt.period]
		}
		if w := pt.countWrong(res, src); w != 0 {
			t.Fatalf("%T %v: the expected values count %d wrong", res[0], op, w)
		}
		res[7] = fromF64[T](toF64(res[7]) + 1)
		res[33] = pt.redPo[33%pt.period]
		if w := pt.countWrong(res, src); w != 2 {
			t.Errorf("%T %v: 2 corrupted elements counted as %d wrong", res[0], op, w)
		}
	}
	pt := newPatterns[T](false, comm.Sum, n)
	res := make([]T, 300)
	src := func(i int) origin { return origin{i % n, i} }
	for i := range res {
		res[i] = pt.in[i%n][i%pt.period]
	}
	if w := pt.countWrong(res, src); w != 0 {
		t.Fatalf("%T moves: expected values count %d wrong", res[0], w)
	}
	res[5], res[6] = res[6], res[5]
	if w := pt.countWrong(res, src); w != 2 {
		t.Errorf("%T moves: 2 swapped elements counted as %d wrong", res[0], w)
	}
}

// TestFold checks the reference reductions against values worked by hand,
// wrap-around included.
func TestFold(t *testing.T) {
	if got := fold(comm.Sum, []int8{100, 100}); got != -56 {
		t.Errorf("int8 100+100 = %d, want -56 (wrapped)", got)
	}
	if got := fold(comm.Prod, []uint8{16, 17}); got != 16 {
		t.Errorf("uint8 16*17 = %d, want 16 (272 mod 256)", got)
	}
	if got := fold(comm.Min, []uint64{math.MaxUint64, 3}); got != 3 {
		t.Errorf("uint64 min = %d", got)
	}
	if got := fold(comm.Avg, []float32{1, 2, 4}); got != float32(7.0/3) {
		t.Errorf("float32 avg = %v", got)
	}
	if got := fold(comm.Max, []comm.BFloat16{comm.BFloat16Of(3), comm.BFloat16Of(-5), comm.BFloat16Of(7)}); got.Float32() != 7 {
		t.Errorf("bfloat16 max = %v", got.Float32())
	}
}

// bin holds grun and collbench, built by TestMain for the tests that run
// them, kept between runs (see internal/testprog).
var bin string

func TestMain(m *testing.M) {
	testprog.Main(m, &bin, "bench",
		testprog.Build{Out: "grun", Pkgs: []string{"github.com/gocoll/gocoll/cmd/grun"}},
		testprog.Build{Out: "collbench", Pkgs: []string{"github.com/gocoll/gocoll/bench"}})
}

func grun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "grun"), append([]string{"--timeout", "150s"}, args...)...)
	cmd.Dir = bin
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("grun %v hung:\n%s%s", args, o.String(), e.String())
	}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		code = xe.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestCollbenchUnderGrun is a real run: two processes under grun, JSON out.
func TestCollbenchUnderGrun(t *testing.T) {
	out, errOut, code := grun(t, "-n", "2", "./collbench", "-min", "8", "-max", "64K", "-check", "-format", "json", "-settle", "100", "-iters", "20")
	if code != 0 {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	var res report.Result
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("stdout is not one JSON result (only rank 0 may print): %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON document on stdout:\n%s", out)
	}
	m := res.Meta
	if m.Tool != "collbench" || m.Ranks != 2 || m.Op != "allreduce" || m.DType != "float32" || m.Redop != "sum" ||
		!m.Check || m.Cores < 1 || m.GoVersion == "" || m.Date == "" || m.Transport == "" {
		t.Errorf("meta %+v", m)
	}
	// The machine is every CPU, whatever rank 0 was bound to.
	if cores, _ := report.Machine(); m.Cores != cores || m.GOMAXPROCS < 1 || (runtime.GOOS == "linux" && m.CPUs == "") {
		t.Errorf("meta: cores %d (machine has %d), cpus %q, gomaxprocs %d", m.Cores, cores, m.CPUs, m.GOMAXPROCS)
	}
	if len(res.Rows) != 14 { // 8 B to 64 KiB
		t.Fatalf("%d rows, want 14 (8 B to 64 KiB by 2)", len(res.Rows))
	}
	for i, r := range res.Rows {
		size := int64(8) << i
		if r.Size != size || r.Count != size/4 || r.Type != "float32" || r.Redop != "sum" || r.Root != -1 || r.Algo != "auto" || r.Iters != 20 {
			t.Errorf("row %d: %+v", i, r)
		}
		if r.Wrong != 0 {
			t.Errorf("size %d: %d wrong", r.Size, r.Wrong)
		}
		if r.TimeUS <= 0 || math.Abs(r.AlgBW-float64(r.Size)/r.TimeUS/1e3) > 1e-9*r.AlgBW+1e-12 {
			t.Errorf("size %d: time %v us, algbw %v", r.Size, r.TimeUS, r.AlgBW)
		}
		if r.BusBW != r.AlgBW { // 2(n-1)/n = 1 on 2 ranks
			t.Errorf("size %d: busbw %v, algbw %v: on 2 ranks they are equal", r.Size, r.BusBW, r.AlgBW)
		}
	}
}

// TestCollbenchBadFlagUnderGrun: a bad flag ends every rank with status 2
// and one line that says what is wrong, before any rank joins the job.
func TestCollbenchBadFlagUnderGrun(t *testing.T) {
	out, errOut, code := grun(t, "-n", "2", "./collbench", "-min", "1M", "-max", "8")
	if code != 2 {
		t.Fatalf("exit %d, want 2:\n%s%s", code, out, errOut)
	}
	if n := strings.Count(errOut, "collbench: -min 1048576 is larger than -max 8"); n != 1 {
		t.Fatalf("the error appears %d times, want once (rank 0):\n%s", n, errOut)
	}
}

func TestPlot(t *testing.T) {
	dir := t.TempDir()
	mk := func(name, transport string, scale float64) string {
		r := report.Result{Meta: report.Meta{Tool: "collbench", Ranks: 2, Op: "allreduce", DType: "float32", Transport: transport}}
		for s := int64(8); s <= 64<<20; s *= 4 {
			tu := 10 + float64(s)/1e3*scale
			r.Rows = append(r.Rows, report.Row{Size: s, TimeUS: tu, AlgBW: float64(s) / tu / 1e3, BusBW: float64(s) / tu / 1e3})
		}
		// A barrier-like row of size 0 must be left out, not break the log axes.
		r.Rows = append(r.Rows, report.Row{Size: 0, TimeUS: 5})
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := report.Write(f, r); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk("a.json", "tcp", 1), mk("b.json", "tcp", 0.5)
	out := filepath.Join(dir, "out.png")
	var stderr bytes.Buffer
	if code := realMain([]string{"plot", a, b, "-o", out}, io.Discard, &stderr); code != 0 {
		t.Fatalf("plot exited %d: %s", code, stderr.String())
	}
	// Two runs of one setup: one line, their median, and the user is told where it went.
	if want := "collbench plot: wrote " + out + " (1 line(s) from 2 file(s))"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != report.PlotWidth || b.Dy() != report.PlotHeight {
		t.Fatalf("PNG is %dx%d, want %dx%d", b.Dx(), b.Dy(), report.PlotWidth, report.PlotHeight)
	}
	// Something was drawn: more than a handful of colours.
	colours := map[uint32]bool{}
	for y := 0; y < img.Bounds().Dy(); y += 3 {
		for x := 0; x < img.Bounds().Dx(); x += 3 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[r>>8<<16|g>>8<<8|b>>8] = true
		}
	}
	if len(colours) < 10 {
		t.Fatalf("the PNG has %d colours: nothing drawn?", len(colours))
	}

	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte(`{"meta":{"tool":"collbench","op":"barrier"},"rows":[{"size":0,"time_us":3}]}`), 0o644)
	if err := report.Plot(filepath.Join(dir, "e.png"), []report.Result{{Meta: report.Meta{Tool: "x", Op: "barrier"}, Rows: []report.Row{{TimeUS: 3}}}}, []string{"x"}); !errors.Is(err, report.ErrNothingToPlot) {
		t.Errorf("plotting only size-0 rows: %v, want ErrNothingToPlot", err)
	}
	stderr.Reset()
	if code := realMain([]string{"plot", "-o", filepath.Join(dir, "x.png")}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "no result files") {
		t.Errorf("plot without files: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := realMain([]string{"plot", filepath.Join(dir, "missing.json")}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "missing.json") {
		t.Errorf("plot of a missing file: exit %d, %q", code, stderr.String())
	}
}

// TestRunPlotFlag: -plot during a run draws that run.
func TestRunPlotFlag(t *testing.T) {
	png := filepath.Join(t.TempDir(), "run.png")
	out, errOut, code := grun(t, "-n", "2", "./collbench", "-op", "allgather", "-dtype", "int16", "-min", "64", "-max", "16K", "-iters", "5", "-settle", "10", "-plot", png)
	if code != 0 {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1+9 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "size(B)") {
		t.Fatalf("want a header and 9 rows:\n%s", out)
	}
	r, err := os.Open(png)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := pngDecodeConfig(r); err != nil {
		t.Fatal(err)
	}
}

func pngDecodeConfig(r io.Reader) (string, error) {
	c, err := png.DecodeConfig(r)
	if err != nil {
		return "", err
	}
	if c.Width != report.PlotWidth || c.Height != report.PlotHeight {
		return "", fmt.Errorf("PNG %dx%d", c.Width, c.Height)
	}
	return "", nil
}

func TestProgressLine(t *testing.T) {
	var b bytes.Buffer
	progressLine(&b, false, "allreduce float32: size 8 B (1 of 3)")
	progressLine(&b, false, "")
	if b.String() != "collbench: allreduce float32: size 8 B (1 of 3)\n" {
		t.Errorf("pipe: %q", b.String())
	}
	b.Reset()
	progressLine(&b, true, "size 8 B")
	progressLine(&b, true, "")
	if b.String() != "\r\x1b[Ksize 8 B\r\x1b[K" {
		t.Errorf("terminal: %q", b.String())
	}
	if isTerminal(&b) {
		t.Error("a buffer is not a terminal")
	}
}

// TestTrafficColumn: with -traffic the table and the CSV end in moved/B,
// the row's bytes moved per byte, and the table's columns stay aligned.
func TestTrafficColumn(t *testing.T) {
	row := report.Row{Size: 1 << 20, Count: 1 << 18, Type: "float32", Redop: "sum", Root: -1, TimeUS: 100, AlgBW: 10, BusBW: 10, Wrong: 0, Algo: "rabenseifner", MovedPerByte: 6.75}
	var tb, cb bytes.Buffer
	for _, s := range []sink{newSink("table", &tb, true), newSink("csv", &cb, true)} {
		s.begin()
		if err := s.row(row); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimRight(tb.String(), "\n"), "\n")
	head, got := strings.Fields(lines[0]), strings.Fields(lines[1])
	if len(head) != len(columns)+1 || head[len(head)-1] != movedColumn || got[len(got)-1] != "6.750" {
		t.Errorf("table:\n%s", tb.String())
	}
	if h, r := fieldSpans(lines[0]), fieldSpans(lines[1]); h[len(h)-1][1] != r[len(r)-1][1] {
		t.Errorf("moved/B is not right-aligned under its header:\n%s", tb.String())
	}
	recs, err := csv.NewReader(&cb).ReadAll()
	if err != nil || len(recs) != 2 || recs[0][len(recs[0])-1] != movedColumn || recs[1][len(recs[1])-1] != "6.7500" {
		t.Errorf("csv: %q (%v)", recs, err)
	}
}
