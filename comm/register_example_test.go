package comm_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gocoll/gocoll/comm"
)

// A buffer the program already has (here 1 MiB of gradients, the single
// copy's floor) is registered once, by every rank: on the ranks of one
// host over shared memory, each rank then reads its peers' blocks with
// process_vm_readv where the kernel allows it, instead of copying them
// through the rings; where it does not, the same code takes the usual
// path, with the same results.
func ExampleRegister_sharedMemory() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2) // two ranks in this process, for the example
	if err != nil {
		log.Fatal(err)
	}
	sums := make([][]float32, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		grads := make([]float32, 1<<18)
		reg, err := comm.Register(ctx, c, grads)
		if err != nil {
			log.Print(err)
			return
		}
		defer reg.Close()
		for i := range grads {
			grads[i] = float32((c.Rank() + 1) * i)
		}
		if err := comm.AllReduce(ctx, c, grads, comm.Sum); err != nil {
			log.Print(err)
			return
		}
		sums[c.Rank()] = grads[len(grads)-3:]
	})
	fmt.Println(sums[0], sums[1])
	// Output: [786423 786426 786429] [786423 786426 786429]
}
