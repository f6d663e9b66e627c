package comm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// BenchmarkBucketing compares k small allreduces issued one by one with
// the same buffers fused by AllReduceMany (gradient bucketing), on 4
// in-process ranks. One op is the whole set of k buffers on every rank.
//
//	go test -run '^$' -bench Bucketing -benchtime 200x ./comm
func BenchmarkBucketing(b *testing.B) {
	const ranks, k, elems = 4, 64, 256
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, ranks)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
		wg.Wait()
	}()
	bufs := make([][][]float32, ranks)
	for r := range bufs {
		bufs[r] = make([][]float32, k)
		for i := range bufs[r] {
			bufs[r][i] = make([]float32, elems)
		}
	}
	onAll := func(b *testing.B, f func(c *comm.Communicator, bufs [][]float32) error) {
		var wg sync.WaitGroup
		errs := make([]error, ranks)
		for r, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range b.N {
					if err := f(c, bufs[r]); err != nil {
						errs[r] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run(fmt.Sprintf("one-by-one/%dx%d", k, elems), func(b *testing.B) {
		onAll(b, func(c *comm.Communicator, bufs [][]float32) error {
			for _, buf := range bufs {
				if err := comm.AllReduce(ctx, c, buf, comm.Sum); err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run(fmt.Sprintf("async-one-by-one/%dx%d", k, elems), func(b *testing.B) {
		onAll(b, func(c *comm.Communicator, bufs [][]float32) error {
			reqs := make([]*comm.Request, len(bufs))
			for i, buf := range bufs {
				reqs[i] = comm.AllReduceAsync(ctx, c, buf, comm.Sum)
			}
			return comm.WaitAll(ctx, reqs...)
		})
	})
	b.Run(fmt.Sprintf("fused/%dx%d", k, elems), func(b *testing.B) {
		onAll(b, func(c *comm.Communicator, bufs [][]float32) error {
			return comm.AllReduceMany(ctx, c, bufs, comm.Sum)
		})
	})
}
