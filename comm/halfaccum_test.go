package comm_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/plan"
)

// TestHalfAccum: a BFloat16 sum of 1 and two terms of 3·2^-10 (3/8 of
// 1's ulp each) on three ranks. Kept in float32 (the default, or
// GOCOLL_HALF_ACCUM=float32) the partial sums are exact and the result is
// 1 + 6·2^-10 rounded once, to 1 + 2^-7, on every element whatever the
// algorithm's order. With GOCOLL_HALF_ACCUM=16bit a partial sum that
// holds the 1 rounds each small term away, and some element ends at 1.
func TestHalfAccum(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		exact bool // every element rounded once from the exact sum
	}{
		{"", true}, {"float32", true}, {"16bit", false},
	} {
		for _, algo := range []string{"ring", "rd", "rabenseifner", "tree"} {
			t.Run(tc.mode+"/"+algo, func(t *testing.T) {
				t.Setenv("GOCOLL_HALF_ACCUM", tc.mode)
				cs := local(t, 3, comm.WithAlgorithm("allreduce="+algo))
				const count = 12
				bufs := make([][]comm.BFloat16, 3)
				for r := range bufs {
					bufs[r] = make([]comm.BFloat16, count)
					for i := range bufs[r] {
						bufs[r][i] = comm.BFloat16Of(3 * 0x1p-10)
						if r == i%3 {
							bufs[r][i] = comm.BFloat16Of(1)
						}
					}
				}
				mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
					return comm.AllReduce(ctx, c, bufs[c.Rank()], comm.Sum)
				})
				want := comm.BFloat16Of(1 + 6*0x1p-10)
				if want.Float32() != 1+0x1p-7 {
					t.Fatalf("test data: 1 + 6·2^-10 rounds to %v", want.Float32())
				}
				off := 0
				for i := 0; i < count; i++ {
					for r := 1; r < 3; r++ {
						if bufs[r][i] != bufs[0][i] {
							t.Fatalf("element %d: rank %d has %v, rank 0 %v", i, r, bufs[r][i].Float32(), bufs[0][i].Float32())
						}
					}
					if bufs[0][i] != want {
						off++
					}
				}
				if tc.exact && off > 0 {
					t.Errorf("%d of %d elements not 1 + 6·2^-10 rounded once (element 0: %v)", off, count, bufs[0][0].Float32())
				}
				if !tc.exact && off == 0 {
					t.Errorf("every element rounded once from the exact sum: GOCOLL_HALF_ACCUM=16bit had no effect")
				}
			})
		}
	}
}

// TestHalfAccumDisagree: ranks configured with different accumulations
// would put different widths on the wire; the job's plan refuses them
// at Init, naming the setting, rather than any call returning a result.
// Two ranks, where both widths would send the same bytes, still
// disagree: the setting is the job's, not the call's.
func TestHalfAccumDisagree(t *testing.T) {
	token := []byte("0123456789abcdef0123456789abcdef")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const n = 2
	modes := []string{"16bit", "float32"}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := comm.Config{Rank: r, Size: n, LocalRank: r, LocalSize: n, Addr: srv.Addr(), Token: token, Source: "test", HalfAccum: modes[r]}
			c, err := comm.New(ctx, cfg)
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			// Max is exact in any width: the setting does not touch it.
			if err := comm.AllReduce(ctx, c, make([]comm.Float16, 100), comm.Max); err != nil {
				errs[r] = errors.New("max: " + err.Error())
				return
			}
			errs[r] = comm.AllReduce(ctx, c, make([]comm.Float16, 100), comm.Sum)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
	}
	// The job's plan catches it at Init: rank 1 compares its setting
	// with rank 0's and fails naming it; rank 0 learns why from the
	// store.
	if !errors.Is(errs[1], comm.ErrEnv) || !strings.Contains(errs[1].Error(), `GOCOLL_HALF_ACCUM is "16bit" on rank 0 but "float32" on rank 1`) {
		t.Errorf("rank 1: %v, want ErrEnv naming GOCOLL_HALF_ACCUM and both values", errs[1])
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "GOCOLL_HALF_ACCUM") {
		t.Errorf("rank 0: %v, want an error naming rank 1's GOCOLL_HALF_ACCUM", errs[0])
	}
}

// halfSum is one 16-bit allreduce of TestHalfAccumDisagreeAlloc on rank
// r of 3: one's element i holds 1 where r == i%3 and small elsewhere
// (3/8 of 1's ulp), in memory from Alloc (viaAlloc: at the single copy's
// floor, so the call takes it) or of the heap. It returns the result and
// the bytes the call handed the transport.
func halfSum[T comm.Float16 | comm.BFloat16](ctx context.Context, c *comm.Communicator, tr *collectives.Traffic, one, small T, viaAlloc bool) ([]T, int64, error) {
	count := plan.SingleCopyMin/2 + 3
	buf := make([]T, count)
	if viaAlloc {
		s, err := comm.Alloc[T](ctx, c, count)
		if err != nil {
			return nil, 0, fmt.Errorf("alloc: %w", err)
		}
		defer s.Free()
		buf = s.Slice()
	}
	for i := range buf {
		buf[i] = small
		if c.Rank() == i%3 {
			buf[i] = one
		}
	}
	before := tr.Counts().Sent
	if err := comm.AllReduce(ctx, c, buf, comm.Sum); err != nil {
		return nil, 0, err
	}
	return slices.Clone(buf), tr.Counts().Sent - before, nil
}

// halfResult is what one rank's halfSum gave, by case name.
type halfResult struct {
	f16  []comm.Float16
	bf16 []comm.BFloat16
	sent int64
}

// TestHalfAccumDisagreeAlloc: GOCOLL_HALF_ACCUM is job-wide (comm's
// Environment): on a job of 3 ranks (where the two accumulations give
// different bits) whose ranks set it differently, Init fails on the rank
// that differs with ErrEnv naming the setting, rank 0's value and its
// own, and fails on the others too (the one that differs gave up), so no
// rank ever reaches a call, on the single copy or off it. Ranks that say
// the same in other words (unset is float32) form the job, and their
// Float16 and BFloat16 sums, in memory from Alloc (the single copy, no
// payload sent) and of the heap, have the same bits on every rank, those
// of the plan's accumulation: 1 + 6/8 ulp rounded once to 1 + 1 ulp on
// every element in float32, and some element at 1 where each partial
// sum rounds to 16 bits.
func TestHalfAccumDisagreeAlloc(t *testing.T) {
	const n = 3
	cases := []struct {
		name    string
		modes   [n]string
		differs int  // the rank whose setting differs from rank 0's, or -1
		round16 bool // the plan's accumulation, where they agree
	}{
		{"rank 1 rounds in 16 bits", [n]string{"float32", "16bit", "float32"}, 1, false},
		{"rank 2 keeps float32", [n]string{"16bit", "16bit", "float32"}, 2, false},
		{"unset against 16bit", [n]string{"", "", "16bit"}, 2, false},
		{"unset and float32 agree", [n]string{"", "float32", ""}, -1, false},
		{"16bit everywhere", [n]string{"16bit", "16bit", "16bit"}, -1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			token := []byte("0123456789abcdef0123456789abcdef")
			srv, err := bootstrap.Listen("127.0.0.1:0", token)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			errs := make([]error, n)
			results := make([]map[string]halfResult, n)
			made := make([]bool, n) // Init returned a communicator
			var wg sync.WaitGroup
			for r := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					var tr collectives.Traffic
					cfg := comm.Config{Rank: r, Size: n, LocalRank: r, LocalSize: n, Addr: srv.Addr(), Token: token, Source: "test", HalfAccum: tc.modes[r]}
					c, err := comm.New(ctx, cfg, comm.WithTraffic(&tr))
					if err != nil {
						errs[r] = err
						return
					}
					defer c.Close()
					made[r] = true
					results[r], errs[r] = halfSums(ctx, c, &tr)
				}()
			}
			wg.Wait()
			if tc.differs >= 0 {
				v0 := cmp.Or(tc.modes[0], "float32")
				want := fmt.Sprintf("GOCOLL_HALF_ACCUM is %q on rank 0 but %q on rank %d", v0, cmp.Or(tc.modes[tc.differs], "float32"), tc.differs)
				for r, err := range errs {
					switch {
					case made[r]:
						t.Errorf("rank %d: Init succeeded on a job whose ranks disagree on GOCOLL_HALF_ACCUM (its sums: %v)", r, err)
					case r == tc.differs && (!errors.Is(err, comm.ErrEnv) || !strings.Contains(err.Error(), want)):
						t.Errorf("rank %d: %v, want ErrEnv saying %s", r, err, want)
					case r != tc.differs && (!errors.Is(err, comm.ErrPeerLost) || !strings.Contains(err.Error(), want)):
						t.Errorf("rank %d: %v, want ErrPeerLost from rank %d's giving up, saying %s", r, err, tc.differs, want)
					}
				}
				return
			}
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if s := results[0]["alloc"].sent; s != 0 {
				t.Errorf("rank 0 sent %d payload bytes for its sums of memory from Alloc: not the single copy", s)
			}
			if s := results[0]["heap"].sent; s == 0 {
				t.Errorf("rank 0 sent nothing for its sums of the heap")
			}
			checkHalfSums(t, results, tc.round16)
		})
	}
}

// TestHalfAccumReplacement: a replacement that joins an elastic job
// takes the job's plan whatever its own GOCOLL_HALF_ACCUM says (comm's
// Environment), so the grown job of 3 sums Float16 and BFloat16 with
// the members' accumulation, the same bits on every rank, in memory
// from Alloc (over TCP, the usual path) and of the heap.
func TestHalfAccumReplacement(t *testing.T) {
	for _, tc := range []struct{ job, replacement string }{{"16bit", "float32"}, {"float32", "16bit"}} {
		t.Run("job "+tc.job+", replacement "+tc.replacement, func(t *testing.T) {
			t.Setenv("GOCOLL_HALF_ACCUM", tc.job)
			opts := []comm.Option{comm.WithElastic(true), comm.WithTransport("tcp"), comm.WithTimeout(time.Minute)}
			cs := local(t, 2, opts...)
			cfg := comm.JobConfig(cs[1])
			cfg.HalfAccum = tc.replacement
			results := make([]map[string]halfResult, 3)
			joined := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				c, err := comm.New(ctx, cfg, opts...)
				if err != nil {
					joined <- err
					return
				}
				defer c.Close()
				if c.Rank() != 2 {
					joined <- fmt.Errorf("the replacement is rank %d of the grown job, want 2", c.Rank())
					return
				}
				var err2 error
				results[2], err2 = halfSums(ctx, c, new(collectives.Traffic))
				joined <- err2
			}()
			deadline := time.Now().Add(30 * time.Second)
			for cs[0].Pending() == 0 || cs[1].Pending() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the replacement never shows in Pending")
				}
				time.Sleep(5 * time.Millisecond)
			}
			var grown [2]*comm.Communicator
			mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				nc, err := c.Grow(ctx)
				if err != nil {
					return err
				}
				grown[c.Rank()] = nc
				if nc.Size() != 3 {
					return fmt.Errorf("grown to %d ranks, want 3", nc.Size())
				}
				results[c.Rank()], err = halfSums(ctx, nc, new(collectives.Traffic))
				return err
			})
			if err := <-joined; err != nil {
				t.Fatalf("replacement: %v", err)
			}
			closeAll(t, grown[:])
			checkHalfSums(t, results, tc.job == "16bit")
		})
	}
}

// halfSums runs halfSum on rank c of 3 for Float16 and BFloat16, in
// memory from Alloc and of the heap.
func halfSums(ctx context.Context, c *comm.Communicator, tr *collectives.Traffic) (map[string]halfResult, error) {
	res := map[string]halfResult{}
	for _, viaAlloc := range []bool{true, false} {
		name := map[bool]string{true: "alloc", false: "heap"}[viaAlloc]
		f16, sent16, err := halfSum(ctx, c, tr, comm.Float16Of(1), comm.Float16Of(3*0x1p-13), viaAlloc)
		if err != nil {
			return nil, fmt.Errorf("%s float16: %w", name, err)
		}
		bf16, sentbf, err := halfSum(ctx, c, tr, comm.BFloat16Of(1), comm.BFloat16Of(3*0x1p-10), viaAlloc)
		if err != nil {
			return nil, fmt.Errorf("%s bfloat16: %w", name, err)
		}
		res[name] = halfResult{f16, bf16, sent16 + sentbf}
	}
	return res, nil
}

// checkHalfSums checks the ranks' halfSums: the same bits on every rank,
// those of the plan's accumulation (round16: 16-bit partial sums).
func checkHalfSums(t *testing.T, results []map[string]halfResult, round16 bool) {
	t.Helper()
	for _, name := range []string{"alloc", "heap"} {
		for r := 1; r < len(results); r++ {
			if !slices.Equal(results[r][name].f16, results[0][name].f16) || !slices.Equal(results[r][name].bf16, results[0][name].bf16) {
				t.Errorf("%s: rank %d's sums differ from rank 0's", name, r)
			}
		}
		checkHalfPath(t, name+" float16", results[0][name].f16, comm.Float16Of(1+0x1p-10), comm.Float16Of(1), round16)
		checkHalfPath(t, name+" bfloat16", results[0][name].bf16, comm.BFloat16Of(1+0x1p-7), comm.BFloat16Of(1), round16)
	}
}

// checkHalfPath checks TestHalfAccumDisagreeAlloc's sums: every element
// exact (1 + 6/8 ulp rounded once) in float32, or (16-bit partials) each
// exact or 1, and some 1.
func checkHalfPath[T comm.Float16 | comm.BFloat16](t *testing.T, what string, got []T, exact, one T, round16 bool) {
	t.Helper()
	ones := 0
	for i, v := range got {
		switch {
		case v == one && round16:
			ones++
		case v != exact:
			t.Errorf("%s: element %d has bits %#04x, want %#04x (16-bit partials: %v)", what, i, uint16(v), uint16(exact), round16)
			return
		}
	}
	if round16 && ones == 0 {
		t.Errorf("%s: every element rounded once from the exact sum, on a job whose plan rounds every partial sum to 16 bits", what)
	}
}
