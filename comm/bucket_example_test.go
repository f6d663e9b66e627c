package comm_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gocoll/gocoll/comm"
)

// The backward pass hands each gradient over as soon as it is computed;
// full buckets are averaged in the background while it goes on, and Wait
// comes before the optimizer step.
func ExampleBucketer() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	results := make([][]float64, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		// Registered in the order the backward pass makes them: the
		// output layer's gradient first.
		out, hidden := make([]float64, 2), make([]float64, 3)
		b, err := comm.NewBucketer(c, [][]float64{out, hidden}, comm.BucketOptions{BucketBytes: 16})
		if err != nil {
			log.Fatal(err)
		}
		for step := range 2 {
			for i := range out {
				out[i] = float64(c.Rank() + step) // ... the output layer's backward ...
			}
			if err := b.MarkReady(ctx, 0); err != nil { // its bucket goes out now
				log.Fatal(err)
			}
			for i := range hidden {
				hidden[i] = float64(10 * c.Rank()) // ... the hidden layer's, meanwhile ...
			}
			if err := b.MarkReady(ctx, 1); err != nil {
				log.Fatal(err)
			}
			if err := b.Wait(ctx); err != nil {
				log.Fatal(err)
			}
			// ... optimizer step with out and hidden ...
		}
		results[c.Rank()] = append(out, hidden...)
	})
	fmt.Println(results[0], results[1])
	// Output: [1.5 1.5 5 5 5] [1.5 1.5 5 5 5]
}
