package comm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// BenchmarkAllReduceAlgos times each allreduce algorithm, forced with
// WithAlgorithm, by rank count and size: the measurements behind the
// selection table in collectives/group.go (choose).
//
//	go test -run '^$' -bench AllReduceAlgos -benchtime 20x ./comm
func BenchmarkAllReduceAlgos(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{2, 3, 4, 6} {
		for _, algo := range []string{"rd", "rabenseifner", "tree", "ring"} {
			cs, err := comm.NewLocal(ctx, n, comm.WithAlgorithm("allreduce="+algo))
			if err != nil {
				b.Fatal(err)
			}
			for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20, 8 << 20} {
				b.Run(fmt.Sprintf("n=%d/%dB/%s", n, size, algo), func(b *testing.B) {
					b.SetBytes(int64(size))
					var wg sync.WaitGroup
					errs := make([]error, n)
					for r, c := range cs {
						wg.Add(1)
						go func() {
							defer wg.Done()
							buf := make([]float32, size/4)
							for range b.N {
								if err := comm.AllReduce(ctx, c, buf, comm.Sum); err != nil {
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
				})
			}
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Add(1)
				go func() { defer wg.Done(); c.Close() }()
			}
			wg.Wait()
		}
	}
}
