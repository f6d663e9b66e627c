package comm_test

import (
	"context"
	"log"

	"github.com/gocoll/gocoll/comm"
)

// A data-parallel loop of an elastic job (grun --elastic 2:4, say): Run
// shrinks after a death, grows when a replacement waits, and calls Resync
// on every rank of each new communicator (and on the replacement at its
// start) to hand out rank 0's state; Step takes its share of the data by
// c.Rank() of c.Size(), so a changed communicator reshards by itself.
func ExampleElastic() {
	ctx := context.Background()
	c, err := comm.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	const steps, samples = 100, 4096
	params := make([]float64, 1000)
	loop := comm.Elastic{
		Step: func(ctx context.Context, c *comm.Communicator, step int) (bool, error) {
			if step >= steps {
				return true, nil // done already: a rank was lost just after
			}
			grads := make([]float64, len(params))
			n := 0
			for i := c.Rank(); i < samples; i += c.Size() {
				n++ // ... add sample i's gradient into grads ...
			}
			if err := comm.AllReduce(ctx, c, grads, comm.Sum); err != nil {
				return false, err
			}
			for i := range params {
				params[i] -= 0.01 * grads[i] / samples
			}
			return step+1 == steps, nil
		},
		Resync: func(ctx context.Context, c *comm.Communicator, step int) (int, error) {
			if err := comm.Broadcast(ctx, c, params, 0); err != nil {
				return 0, err
			}
			return step, comm.BroadcastValue(ctx, c, &step, 0)
		},
	}
	c, _, err = loop.Run(ctx, c, 0)
	c.Close() // the communicator Run ended on owns the job's connections
	if err != nil {
		log.Fatal(err)
	}
}
