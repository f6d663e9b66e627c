package comm_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/comm"
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
