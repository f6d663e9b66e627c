package comm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// TestAllReduceManyLayout: ranks whose AllReduceMany buffers differ fail,
// every one of them, with ErrMismatch naming the first buffer that
// differs and its lengths, including when the packed totals agree (which
// would otherwise reduce the wrong elements together); a layout every
// rank shares runs, and runs again without a new check.
func TestAllReduceManyLayout(t *testing.T) {
	cases := []struct {
		name  string
		lens  func(rank int) []int
		says  string
		fails bool
	}{
		{"same", func(int) []int { return []int{3, 5, 1} }, "", false},
		{"one short", func(r int) []int {
			if r == 2 {
				return []int{4096, 4095, 1160}
			}
			return []int{4096, 4096, 1160}
		}, "buffer 1 of 3 holds from 4095 to 4096 elements", true},
		{"same total, split apart", func(r int) []int {
			if r == 0 {
				return []int{5, 3}
			}
			return []int{3, 5}
		}, "buffer 0 of 2 holds from 3 to 5 elements", true},
		{"buffer count", func(r int) []int {
			if r == 1 {
				return []int{8}
			}
			return []int{4, 4}
		}, "from 1 to 2 buffers", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := local(t, 3)
			errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				for range 2 {
					var bufs [][]float64
					for _, n := range tc.lens(c.Rank()) {
						b := make([]float64, n)
						for i := range b {
							b[i] = float64(i + 1)
						}
						bufs = append(bufs, b)
					}
					if err := comm.AllReduceMany(ctx, c, bufs, comm.Sum); err != nil {
						return err
					}
					for _, b := range bufs {
						for i, x := range b {
							if x != 3*float64(i+1) {
								t.Errorf("rank %d: %v", c.Rank(), b)
								return nil
							}
						}
					}
				}
				return nil
			})
			for r, err := range errs {
				if !tc.fails {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
					continue
				}
				if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "allreduce") {
					t.Errorf("rank %d: %v, want ErrMismatch saying %q", r, err, tc.says)
				}
			}
			if !tc.fails {
				// Two calls of one layout: the check ran once (two
				// small allreduces), then two packed calls.
				if got := cs[0].Stats().Calls["allreduce"]; got != 4 {
					t.Errorf("%d allreduces, want 4", got)
				}
			}
		})
	}
}

// TestOneNamePerKind: an AllReduceMany given up before it starts is an
// allreduce, as Stats and traces name it.
func TestOneNamePerKind(t *testing.T) {
	c := local(t, 1)[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := comm.AllReduceMany(ctx, c, [][]float32{{1}, {2}}, comm.Sum)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if strings.Contains(err.Error(), "allreducemany") || !strings.Contains(err.Error(), "allreduce") {
		t.Errorf("err = %q, want the call named allreduce", err)
	}
	r := comm.AllReduceManyAsync(ctx, c, [][]float32{{1}, {2}}, comm.Sum)
	if err := r.Wait(context.Background()); err == nil || strings.Contains(err.Error(), "allreducemany") {
		t.Errorf("async: %v, want a failure naming allreduce", err)
	}
}
