package comm_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gocoll/gocoll/comm"
)

// Buffers a program allreduces again and again (gradients) can live in
// memory from Alloc: on the ranks of one host, each rank then reads its
// peers' buffers in place instead of through the transport's rings.
// Every rank allocates the same count; the memory stays until Free (or
// Close).
func ExampleAlloc() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2) // two ranks in this process, for the example
	if err != nil {
		log.Fatal(err)
	}
	sums := make([][]float32, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		grads, err := comm.Alloc[float32](ctx, c, 4)
		if err != nil {
			log.Print(err)
			return
		}
		defer grads.Free()
		g := grads.Slice()
		for i := range g {
			g[i] = float32((c.Rank() + 1) * i)
		}
		if err := comm.AllReduce(ctx, c, g, comm.Sum); err != nil {
			log.Print(err)
			return
		}
		sums[c.Rank()] = append([]float32(nil), g...)
	})
	fmt.Println(sums[0], sums[1])
	// Output: [0 3 6 9] [0 3 6 9]
}
