package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/plan"
	"github.com/gocoll/gocoll/internal/testmode"
)

// elementOf converts f to T, through float32 for the 16-bit floats.
func elementOf[T comm.Element](f float64) T {
	var z T
	switch any(z).(type) {
	case comm.Float16:
		return any(comm.Float16Of(float32(f))).(T)
	case comm.BFloat16:
		return any(comm.BFloat16Of(float32(f))).(T)
	}
	return T(f)
}

func valueOf[T comm.Element](v T) float64 {
	switch x := any(v).(type) {
	case comm.Float16:
		return float64(x.Float32())
	case comm.BFloat16:
		return float64(x.Float32())
	}
	return float64(v)
}

func isFloat[T comm.Element]() bool {
	var z T
	switch any(z).(type) {
	case float32, float64, comm.Float16, comm.BFloat16:
		return true
	}
	return false
}

func rawBytes[T comm.Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// singleCopies says whether an allreduce of count elements of T with op
// on n ranks takes the single-copy path for a buffer from Alloc
// (comm.Alloc's doc): from the job's plan's SingleCopyMin bytes, every
// type and op but an ExactSum of floats (16-bit sums with float32
// partials included).
func singleCopies[T comm.Element](op comm.Op, n, count int) bool {
	return n >= 2 && !(op == comm.ExactSum && isFloat[T]()) && count*int(unsafe.Sizeof(*new(T))) >= plan.SingleCopyMin
}

var allOps = []comm.Op{comm.Sum, comm.Prod, comm.Min, comm.Max, comm.Avg, comm.ExactSum}

// combine is each op on two exact values (Avg's division comes after).
var combine = map[comm.Op]func(a, b float64) float64{
	comm.Sum: func(a, b float64) float64 { return a + b }, comm.Avg: func(a, b float64) float64 { return a + b },
	comm.ExactSum: func(a, b float64) float64 { return a + b }, comm.Prod: func(a, b float64) float64 { return a * b },
	comm.Min: func(a, b float64) float64 { return min(a, b) }, comm.Max: func(a, b float64) float64 { return max(a, b) },
}

// allocGuard is how many elements on each side of the buffer an
// allreduce of memory from Alloc must leave alone.
const allocGuard = 3

// checkAllocAllReduce runs, on rank c of a job, the allreduce of count
// elements of T with op in memory from Alloc, between guard elements,
// and checks the result against a reference, the guards, and which path
// the call took (the single-copy path hands the transport no payload).
func checkAllocAllReduce[T comm.Element](ctx context.Context, c *comm.Communicator, tr *collectives.Traffic, op comm.Op, count int, shared bool) error {
	if op == comm.Avg && !isFloat[T]() {
		return nil
	}
	n, r := c.Size(), c.Rank()
	name := fmt.Sprintf("rank %d: %d x %T %v on %d ranks", r, count, *new(T), op, n)
	s, err := comm.Alloc[T](ctx, c, count+2*allocGuard)
	if err != nil {
		return fmt.Errorf("%s: alloc: %w", name, err)
	}
	defer s.Free()
	all := s.Slice()
	guard := rawBytes(all)
	for i := range guard {
		guard[i] = 0xa5
	}
	buf := all[allocGuard : allocGuard+count]
	// Small integers, so that every op's exact result is representable
	// in every type whatever the order the ranks combine them in.
	// They depend on i only through i%3: each of the three inputs and
	// results is worked out once.
	v := func(q, i int) float64 { return float64((q*7+i)%3 + 1) }
	var in [3]T
	var want [3]float64
	for i := range 3 {
		in[i] = elementOf[T](v(r, i))
		want[i] = v(0, i)
		for q := 1; q < n; q++ {
			want[i] = combine[op](want[i], v(q, i))
		}
		if op == comm.Avg {
			want[i] /= float64(n)
		}
	}
	for i := range buf {
		buf[i] = in[i%3]
	}
	before := tr.Counts()
	if err := comm.AllReduce(ctx, c, buf, op); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	sent := tr.Counts().Sent - before.Sent
	if single := shared && singleCopies[T](op, n, count); n > 1 && single != (sent == 0) {
		return fmt.Errorf("%s: single copy %v, but the call sent %d bytes", name, single, sent)
	}
	for i, got := range buf {
		w := want[i%3]
		if op == comm.Avg {
			if d := math.Abs(valueOf(got) - w); d > w/100 {
				return fmt.Errorf("%s: element %d is %v, want %v", name, i, valueOf(got), w)
			}
			continue
		}
		if valueOf(got) != w {
			return fmt.Errorf("%s: element %d is %v, want %v", name, i, valueOf(got), w)
		}
	}
	esize := int(unsafe.Sizeof(*new(T)))
	for i, b := range guard {
		if (i < allocGuard*esize || i >= (allocGuard+count)*esize) && b != 0xa5 {
			return fmt.Errorf("%s: byte %d of the allocation, outside the buffer, was written: %#x", name, i, b)
		}
	}
	return nil
}

// allocCases runs checkAllocAllReduce for every element type and op at
// odd sizes, below the single-copy path's floor (the usual path) and
// above it for 4- and 8-byte elements, in blocks longer than its piece.
// The quick check (GOCOLL_QUICK) takes the float types, whose paths
// differ (the single copy, 16-bit floats widened), and one integer type
// of each width; the full run takes them all.
func allocCases(ctx context.Context, c *comm.Communicator, tr *collectives.Traffic) error {
	sizes := []int{1, 5, 1003, 100_003, plan.SingleCopyMin/4 + 3}
	for _, count := range sizes {
		for _, op := range allOps {
			for _, k := range []struct {
				check func() error
				quick bool
			}{
				{func() error { return checkAllocAllReduce[float32](ctx, c, tr, op, count, true) }, true},
				{func() error { return checkAllocAllReduce[float64](ctx, c, tr, op, count, true) }, true},
				{func() error { return checkAllocAllReduce[comm.Float16](ctx, c, tr, op, count, true) }, true},
				{func() error { return checkAllocAllReduce[comm.BFloat16](ctx, c, tr, op, count, true) }, true},
				{func() error { return checkAllocAllReduce[int8](ctx, c, tr, op, count, true) }, true},
				{func() error { return checkAllocAllReduce[int16](ctx, c, tr, op, count, true) }, false},
				{func() error { return checkAllocAllReduce[int32](ctx, c, tr, op, count, true) }, true},
				{func() error { return checkAllocAllReduce[int64](ctx, c, tr, op, count, true) }, false},
				{func() error { return checkAllocAllReduce[uint8](ctx, c, tr, op, count, true) }, false},
				{func() error { return checkAllocAllReduce[uint16](ctx, c, tr, op, count, true) }, true},
				{func() error { return checkAllocAllReduce[uint32](ctx, c, tr, op, count, true) }, false},
				{func() error { return checkAllocAllReduce[uint64](ctx, c, tr, op, count, true) }, true},
				{func() error { return checkAllocAllReduce[int](ctx, c, tr, op, count, true) }, false},
				{func() error { return checkAllocAllReduce[uint](ctx, c, tr, op, count, true) }, false},
			} {
				if !k.quick && testmode.Quick() {
					continue
				}
				if err := k.check(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// TestAllocRank is not a test of its own: it is one rank of
// TestAllocProcesses's jobs, in a process of its own, when that test
// starts this binary with GOCOLL_ALLOC_TEST_RANK set.
func TestAllocRank(t *testing.T) {
	if os.Getenv("GOCOLL_ALLOC_TEST_RANK") == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var tr collectives.Traffic
	c, err := comm.Init(ctx, comm.WithTraffic(&tr))
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Size(); n > 1 && c.Transport() != "shm" {
		t.Fatalf("transport %s, want shm", c.Transport())
	}
	switch os.Getenv("GOCOLL_ALLOC_TEST_RANK") {
	case "dies":
		if err := allocPeerDies(ctx, c); err != nil {
			t.Fatal(err)
		}
		return
	case "register", "refused":
		if err := registerCases(ctx, c, &tr, os.Getenv("GOCOLL_ALLOC_TEST_RANK") == "register"); err != nil {
			c.Abort(err)
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := allocCases(ctx, c, &tr); err != nil {
		c.Abort(err)
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// allocPeerDies: rank 1 exits, without closing, after an allreduce in
// memory from Alloc; rank 0's next allreduce of it fails, naming the
// lost peer, rather than waiting for it or faulting on its memory.
func allocPeerDies(ctx context.Context, c *comm.Communicator) error {
	s, err := comm.Alloc[float64](ctx, c, plan.SingleCopyMin/8)
	if err != nil {
		return err
	}
	if err := comm.AllReduce(ctx, c, s.Slice(), comm.Sum); err != nil {
		return err
	}
	if c.Rank() == 1 {
		os.Exit(3)
	}
	err = comm.AllReduce(ctx, c, s.Slice(), comm.Sum)
	if !errors.Is(err, comm.ErrPeerLost) {
		return fmt.Errorf("allreduce with a dead peer: %v, want ErrPeerLost", err)
	}
	return nil
}

// TestAllocPeerDies: a rank that dies between two allreduces in memory
// from Alloc makes its peer's call fail with ErrPeerLost (allocPeerDies).
func TestAllocPeerDies(t *testing.T) {
	errs := runAllocJob(t, 2, "dies")
	var exit *exec.ExitError
	if errs[0] != nil || !errors.As(errs[1], &exit) || exit.ExitCode() != 3 {
		t.Fatalf("rank 0: %v, rank 1: %v (want rank 0 to pass and rank 1 to exit with status 3)", errs[0], errs[1])
	}
}

// TestAllocProcesses runs jobs of 1 to 4 ranks, each rank a process,
// over shared memory: every element type and op, at odd sizes, allreduced
// in memory from Alloc, against a reference (see checkAllocAllReduce).
func TestAllocProcesses(t *testing.T) {
	sizes := []int{1, 2, 3, 4}
	if testmode.Quick() {
		sizes = []int{3} // in processes; TestAllocMatchesRing has 2 in-process
	}
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			for _, err := range runAllocJob(t, n, "cases") {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// runAllocJob runs a job of n processes, each TestAllocRank in mode,
// and returns how each ended (its output in the error).
func runAllocJob(t *testing.T, n int, mode string) []error {
	errs, _ := runRanks(t, n, mode, nil)
	return errs
}

// runRanks is runAllocJob with each process started with attr, and
// each one's output besides.
func runRanks(t *testing.T, n int, mode string, attr *syscall.SysProcAttr, env ...string) ([]error, []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	token := strings.Repeat("ab", 16)
	srv, err := bootstrap.Listen("127.0.0.1:0", []byte(token))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAllocRank$", "-test.count=1")
		cmd.Env = append(jobEnv(), "GOCOLL_ALLOC_TEST_RANK="+mode, "GOCOLL_TRANSPORT=shm",
			"GRUN_RANK="+strconv.Itoa(r), "GRUN_SIZE="+strconv.Itoa(n), "GRUN_ADDR="+srv.Addr(), "GRUN_TOKEN="+token)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		cmd.SysProcAttr = attr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	errs, out := make([]error, n), make([]string, n)
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs[r] = fmt.Errorf("rank %d: %w\n%s", r, err, outs[r].String())
		}
		out[r] = outs[r].String()
	}
	return errs, out
}

// jobEnv is this process's environment without the variables that
// would change which path an allreduce takes.
func jobEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOCOLL_ALGO=") && !strings.HasPrefix(kv, "GOCOLL_HALF_ACCUM=") && !strings.HasPrefix(kv, "GRUN_") {
			env = append(env, kv)
		}
	}
	return env
}

// onLocal runs f on every rank of an in-process job of n ranks over
// shared memory, and returns the ranks' errors joined.
func onLocal(t *testing.T, n int, f func(c *comm.Communicator) error, opts ...comm.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := comm.NewLocal(ctx, n, append([]comm.Option{comm.WithTransport("shm")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(c)
			c.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestAllocMatchesRing: the single-copy allreduce gives the ring's bits,
// NaN payloads, signed zeros and rounding included, for every float
// type and op it takes (Float16 and BFloat16 Sum, Avg and Prod: the
// bits of the ring with float32 partials, the default), on 2, 3 and 4
// ranks; below its floor, a buffer
// from Alloc gets the bits a buffer of the heap does, on every rank.
// Each rank count runs every case in three jobs: the references, the
// ring's (for the single-copy cases) and the usual path's (for the
// others), in buffers of the heap, and then every case in memory from
// Alloc, each rank checking its result against the reference's rank 0.
// The quick check (GOCOLL_QUICK) leaves the 4 ranks to the full run.
func TestAllocMatchesRing(t *testing.T) {
	ns := []int{2, 3, 4}
	if testmode.Quick() {
		ns = ns[:2]
	}
	for _, n := range ns {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var cases []ringCase
			cases = append(cases, ringCases[float32](n, false)...)
			cases = append(cases, ringCases[float64](n, false)...)
			cases = append(cases, ringCases[comm.Float16](n, false)...)
			cases = append(cases, ringCases[comm.BFloat16](n, false)...)
			matchRing(t, n, cases)
		})
	}
}

// matchRing runs cases on n ranks: the references in buffers of the
// heap, then every case in its shared buffer (viaAlloc).
func matchRing(t *testing.T, n int, cases []ringCase) {
	t.Helper()
	ctx := context.Background()
	for _, single := range []bool{true, false} {
		err := onLocal(t, n, func(c *comm.Communicator) error {
			for _, k := range cases {
				if k.single == single {
					if err := k.reference(ctx, c); err != nil {
						return fmt.Errorf("%s: %w", k.name, err)
					}
				}
			}
			return nil
		}, refAlgo(single)...)
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range cases {
		if err := k.referencesAgree(); err != nil {
			t.Fatal(err)
		}
	}
	err := onLocal(t, n, func(c *comm.Communicator) error {
		for _, k := range cases {
			if err := k.viaAlloc(ctx, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ringCase is one allreduce of TestAllocMatchesRing: its reference runs
// on every rank of the reference's job, viaAlloc on every rank of the
// job allreducing the shared buffer (Alloc's or Register's); referencesAgree checks, between
// the two, that the reference's ranks got the same bits.
type ringCase struct {
	name            string
	single          bool // takes the single-copy path: the ring is its reference
	reference       func(ctx context.Context, c *comm.Communicator) error
	referencesAgree func() error
	viaAlloc        func(ctx context.Context, c *comm.Communicator) error
}

// ringCases are TestAllocMatchesRing's cases of element type T on n
// ranks, in memory from Alloc or, if register, in a buffer of the heap
// made readable by Register: just past the single-copy floor (blocks of
// uneven length, so that ReduceN's vector kernels leave a tail) and a
// recursive-doubling size below it, with every op.
func ringCases[T comm.Element](n int, register bool) []ringCase {
	var cases []ringCase
	for _, count := range []int{plan.SingleCopyMin/int(unsafe.Sizeof(*new(T))) + 1, 1001} {
		inputs := ringInputs[T](n, count)
		for _, op := range []comm.Op{comm.Sum, comm.Prod, comm.Min, comm.Max, comm.Avg} {
			single := singleCopies[T](op, n, count) && (!register || n <= plan.SingleCopyReadRanks)
			if !single && count*int(unsafe.Sizeof(*new(T))) >= plan.SingleCopyMin {
				continue
			}
			name := fmt.Sprintf("%d x %T %v on %d ranks (single copy %v)", count, *new(T), op, n, single)
			refs := make([][]T, n)
			differs := func(r int, got []T) error {
				ring, b := rawBytes(refs[0]), rawBytes(got)
				if string(b) == string(ring) {
					return nil
				}
				i := 0
				for b[i] == ring[i] {
					i++
				}
				return fmt.Errorf("%s: result %d differs from the reference's rank 0 at byte %d", name, r, i)
			}
			cases = append(cases, ringCase{
				name:   name,
				single: single,
				reference: func(ctx context.Context, c *comm.Communicator) error {
					buf := append([]T(nil), inputs[c.Rank()]...)
					if err := comm.AllReduce(ctx, c, buf, op); err != nil {
						return err
					}
					refs[c.Rank()] = buf
					return nil
				},
				referencesAgree: func() error {
					for r := 1; r < n; r++ {
						if err := differs(n+r, refs[r]); err != nil {
							return err
						}
					}
					refs = refs[:1]
					return nil
				},
				viaAlloc: func(ctx context.Context, c *comm.Communicator) error {
					buf, done, err := sharedBuffer[T](ctx, c, count, register)
					if err != nil {
						return fmt.Errorf("%s: shared buffer: %w", name, err)
					}
					defer done()
					copy(buf, inputs[c.Rank()])
					if err := comm.AllReduce(ctx, c, buf, op); err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					return differs(c.Rank(), buf)
				},
			})
		}
	}
	return cases
}

// powers10 are the magnitudes ringInputs span.
var powers10 = []float64{1e-4, 1e-3, 1e-2, 1e-1, 1, 1e1, 1e2, 1e3}

// ringInputs are the n ranks' inputs of count elements for ringCases,
// each from a generator seeded by its rank: NaNs, signed zeros,
// infinities, tiny and huge values among values of magnitudes 1e-4..1e3.
func ringInputs[T comm.Element](n, count int) [][]T {
	specials := []float64{math.NaN(), math.Copysign(0, -1), 0, math.Inf(1), math.Inf(-1), 1e-30, 3e38}
	inputs := make([][]T, n)
	for r := range inputs {
		rng := rand.New(rand.NewPCG(uint64(r), uint64(count)))
		in := make([]T, count)
		for i := range in {
			if rng.IntN(50) == 0 {
				in[i] = elementOf[T](specials[rng.IntN(len(specials))])
				continue
			}
			in[i] = elementOf[T]((rng.Float64() - 0.3) * powers10[rng.IntN(len(powers10))])
		}
		inputs[r] = in
	}
	return inputs
}

// sharedBuffer is count elements the ranks of c read in place: memory
// from Alloc, or if register a buffer of the heap, registered; done
// frees or deregisters it.
func sharedBuffer[T comm.Element](ctx context.Context, c *comm.Communicator, count int, register bool) ([]T, func() error, error) {
	if register {
		buf := make([]T, count)
		reg, err := comm.Register(ctx, c, buf)
		if err != nil {
			return nil, nil, err
		}
		return buf, reg.Close, nil
	}
	s, err := comm.Alloc[T](ctx, c, count)
	if err != nil {
		return nil, nil, err
	}
	return s.Slice(), s.Free, nil
}

// refAlgo is the reference's options for ringCases: the ring's for the
// single copy, the usual path's for the others.
func refAlgo(single bool) []comm.Option {
	if single {
		return []comm.Option{comm.WithAlgorithm("allreduce=ring")}
	}
	return nil
}

// TestAllocMismatch: ranks that ask Alloc for different counts or
// types, or none, all fail alike; ranks that allreduce different places
// of the memory, or one of them a buffer not from Alloc, at a size that
// takes the single copy, fail with ErrMismatch before any byte is read.
func TestAllocMismatch(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		f    func(c *comm.Communicator) error
		want error
	}{
		{"count", func(c *comm.Communicator) error {
			_, err := comm.Alloc[float32](ctx, c, 10+c.Rank())
			return err
		}, comm.ErrMismatch},
		{"type", func(c *comm.Communicator) error {
			if c.Rank() == 0 {
				_, err := comm.Alloc[float32](ctx, c, 10)
				return err
			}
			_, err := comm.Alloc[int32](ctx, c, 10)
			return err
		}, comm.ErrMismatch},
		{"empty", func(c *comm.Communicator) error {
			_, err := comm.Alloc[float64](ctx, c, 0)
			return err
		}, comm.ErrInvalid},
		{"place", func(c *comm.Communicator) error {
			const count = plan.SingleCopyMin / 4 // the single copy's floor
			s, err := comm.Alloc[float32](ctx, c, count+8)
			if err != nil {
				return err
			}
			r := c.Rank()
			return comm.AllReduce(ctx, c, s.Slice()[r:r+count], comm.Sum)
		}, comm.ErrMismatch},
		{"not from alloc", func(c *comm.Communicator) error {
			s, err := comm.Alloc[float32](ctx, c, plan.SingleCopyMin/4)
			if err != nil {
				return err
			}
			buf := s.Slice()
			if c.Rank() == 1 {
				buf = make([]float32, len(buf))
			}
			return comm.AllReduce(ctx, c, buf, comm.Sum)
		}, comm.ErrMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := make([]error, 2)
			onLocal(t, 2, func(c *comm.Communicator) error {
				errs[c.Rank()] = tc.f(c)
				return nil
			})
			for r, err := range errs {
				if !errors.Is(err, tc.want) {
					t.Errorf("rank %d: %v, want %v", r, err, tc.want)
				}
			}
		})
	}
}

// windowMaps counts this process's mappings of Alloc's memfds.
func windowMaps(t *testing.T) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(maps), "memfd:gocoll-win-")
}

// TestAllocFree: once freed, the memory is unmapped; a slice of it kept
// past Free can still be written without a fault, and AllReduce refuses
// it (ErrInvalid) rather than reading it; Free again is harmless.
func TestAllocFree(t *testing.T) {
	ctx := context.Background()
	errs := make([]error, 2)
	err := onLocal(t, 2, func(c *comm.Communicator) error {
		s, err := comm.Alloc[float64](ctx, c, 1000)
		if err != nil {
			return err
		}
		stale := s.Slice()
		if err := s.Free(); err != nil {
			return err
		}
		if err := s.Free(); err != nil {
			return fmt.Errorf("second Free: %w", err)
		}
		if s.Slice() != nil {
			return errors.New("Slice after Free is not nil")
		}
		stale[0], stale[999] = 1, 2
		errs[c.Rank()] = comm.AllReduce(ctx, c, stale, comm.Sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, err := range errs {
		if !errors.Is(err, comm.ErrInvalid) {
			t.Errorf("rank %d: allreduce of freed memory: %v, want ErrInvalid", r, err)
		}
	}
	if n := windowMaps(t); n != 0 {
		t.Errorf("%d mappings of Alloc's memory left after Free", n)
	}
}

// TestAllocCloseFrees: Close frees what Free did not, on every rank.
func TestAllocCloseFrees(t *testing.T) {
	ctx := context.Background()
	const n = 3
	shared := make([]*comm.Shared[int32], n)
	err := onLocal(t, n, func(c *comm.Communicator) error {
		s, err := comm.Alloc[int32](ctx, c, 4096)
		if err != nil {
			return err
		}
		shared[c.Rank()] = s
		if got := windowMaps(t); got < n {
			return fmt.Errorf("rank %d: %d mappings of Alloc's memory, want at least %d", c.Rank(), got, n)
		}
		return comm.AllReduce(ctx, c, s.Slice(), comm.Max)
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, s := range shared {
		if s.Slice() != nil {
			t.Errorf("rank %d: the memory is still there after Close", r)
		}
	}
	if got := windowMaps(t); got != 0 {
		t.Errorf("%d mappings of Alloc's memory left after Close", got)
	}
}

// TestAllocTraffic pins the single-copy allreduce's memory traffic at 2,
// 4 and 16 ranks (docs/traffic.md): nothing through the transport; per
// rank, its block of the n buffers read once and reduced into its own
// (S read, S/n written) and the other (n-1)/n copied: 3 - 1/n bytes
// moved per byte, the bound, at any n (2.5, 2.75, 2.9375), against the
// ring's 9(n-1)/n.
func TestAllocTraffic(t *testing.T) {
	for _, n := range []int{2, 4, 16} {
		t.Run(strconv.Itoa(n), func(t *testing.T) { checkSingleTraffic(t, n, false) })
	}
}

// checkSingleTraffic counts an allreduce at the single copy's floor, on
// n ranks, in memory from Alloc or, if register, in a registered buffer
// of the heap, whose reads of the peers' blocks are copies too.
func checkSingleTraffic(t *testing.T, n int, register bool) {
	const count = plan.SingleCopyMin / 4 // the single copy's floor
	const S = 4 * count
	ctx := context.Background()
	var tr collectives.Traffic
	var mu sync.Mutex
	var before collectives.TrafficCounts
	ready := 0
	err := onLocal(t, n, func(c *comm.Communicator) error {
		buf, done, err := sharedBuffer[float32](ctx, c, count, register)
		if err != nil {
			return err
		}
		defer done()
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		mu.Lock()
		if ready++; ready == n {
			before = tr.Counts()
		}
		mu.Unlock()
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		for i := range buf {
			buf[i] = float32(c.Rank())
		}
		return comm.AllReduce(ctx, c, buf, comm.Sum)
	}, comm.WithTraffic(&tr))
	if err != nil {
		t.Fatal(err)
	}
	got := tr.Counts()
	got.Sent -= before.Sent
	got.ReduceRead -= before.ReduceRead
	got.ReduceWritten -= before.ReduceWritten
	got.Copied -= before.Copied
	// Each rank reads its block of the n buffers once (S in all) and
	// writes its own (S/n), and copies the other n-1 blocks in; reading
	// the peers' blocks through the kernel (register) copies them first.
	want := collectives.TrafficCounts{ReduceRead: int64(n) * S, ReduceWritten: S, Copied: int64(n-1) * S}
	bound, ring := 3-1/float64(n), 9*float64(n-1)/float64(n)
	model := bound
	if register {
		want.Copied *= 2
		model = float64(5*n-3) / float64(n)
	}
	if got != want {
		t.Errorf("counted %+v, want %+v", got, want)
	}
	perRank := float64(got.Moved()) / float64(n) / S
	if perRank != model {
		t.Errorf("%.4f bytes moved per byte per rank, want %.4f: the bound is %.4f, the ring moves %.3f", perRank, model, bound, ring)
	}
	t.Logf("%d ranks: %.4f bytes moved per byte per rank (bound %.4f, ring %.3f)", n, perRank, bound, ring)
}

// TestAllocFallback: where the ranks cannot read each other's memory
// (TCP; ranks on several hosts), memory from Alloc is each rank's own
// and the allreduce takes the usual path, with the same results.
func TestAllocFallback(t *testing.T) {
	cases := []struct {
		name string
		n    int
		opts []comm.Option
	}{
		{"tcp", 2, []comm.Option{comm.WithTransport("tcp")}},
		{"two hosts", 4, []comm.Option{comm.WithTransport("auto"), comm.WithFakeHosts(2)}},
		{"ring forced", 2, []comm.Option{comm.WithAlgorithm("allreduce=ring")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tr collectives.Traffic
			err := onLocal(t, tc.n, func(c *comm.Communicator) error {
				return checkAllocAllReduce[float32](context.Background(), c, &tr, comm.Sum, plan.SingleCopyMin/4+3, false)
			}, append(tc.opts, comm.WithTraffic(&tr))...)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAllocSplit: a sub-communicator's ranks of one host share memory
// from Alloc as the job's do: its allreduce takes the single-copy path,
// which hands the transport nothing.
func TestAllocSplit(t *testing.T) {
	var tr collectives.Traffic
	var before, after collectives.TrafficCounts
	ctx := context.Background()
	err := onLocal(t, 4, func(c *comm.Communicator) error {
		sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		s, err := comm.Alloc[int64](ctx, sub, plan.SingleCopyMin/8+1)
		if err != nil {
			return err
		}
		buf := s.Slice()
		for i := range buf {
			buf[i] = int64(c.Rank() * i)
		}
		// Between the job's barriers, which send no payload, only the
		// two sub-communicators' allreduces run.
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			before = tr.Counts()
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := comm.AllReduce(ctx, sub, buf, comm.Sum); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			after = tr.Counts()
		}
		for i, v := range buf {
			if want := int64((c.Rank()%2*2 + 2) * i); v != want {
				return fmt.Errorf("rank %d: element %d is %d, want %d", c.Rank(), i, v, want)
			}
		}
		return nil
	}, comm.WithTraffic(&tr))
	if err != nil {
		t.Fatal(err)
	}
	if sent, reduced := after.Sent-before.Sent, after.ReduceRead-before.ReduceRead; sent != 0 || reduced == 0 {
		t.Errorf("the sub-communicators' allreduces sent %d bytes and reduced %d: not the single-copy path", sent, reduced)
	}
}
