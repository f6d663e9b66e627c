package collectives_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/gocoll/gocoll/collectives"
)

// A Group runs gocoll's algorithms over any transport that keeps the
// contract of package transport, one of the program's own included:
// here pipes (traffic_test.go), four ranks in one process joined by Go
// channels, each summing three float32s.
func ExampleGroup_ownTransport() {
	const n = 4
	ctx := context.Background()
	sums := make([][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, t := range newPipes(n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := collectives.NewGroup(t, collectives.Options{})
			buf := make([]byte, 3*4)
			for i := range 3 {
				binary.NativeEndian.PutUint32(buf[4*i:], math.Float32bits(float32(r+1)*float32(i+1)))
			}
			errs[r] = g.AllReduce(ctx, buf, collectives.Float32, collectives.Sum)
			for i := range 3 {
				sums[r] = append(sums[r], math.Float32frombits(binary.NativeEndian.Uint32(buf[4*i:])))
			}
		}()
	}
	wg.Wait()
	for r := range n {
		fmt.Println(r, sums[r], errs[r])
	}
	// Output:
	// 0 [10 20 30] <nil>
	// 1 [10 20 30] <nil>
	// 2 [10 20 30] <nil>
	// 3 [10 20 30] <nil>
}
