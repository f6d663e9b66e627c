package comm_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gocoll/gocoll/comm"
)

// Split makes one communicator per color: here the even and the odd ranks
// of a job of four, each summing within its half while sharing the job's
// connections.
func ExampleCommunicator_Split() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 4)
	if err != nil {
		log.Fatal(err)
	}
	results := make([]string, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		half, err := c.Split(ctx, c.Rank()%2, c.Rank())
		if err != nil {
			log.Fatal(err)
		}
		defer half.Close()
		v := []int32{int32(c.Rank())}
		if err := comm.AllReduce(ctx, half, v, comm.Sum); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = fmt.Sprintf("rank %d: rank %d of %d in its half, sum %d", c.Rank(), half.Rank(), half.Size(), v[0])
	})
	for _, s := range results {
		fmt.Println(s)
	}
	// Output:
	// rank 0: rank 0 of 2 in its half, sum 2
	// rank 1: rank 0 of 2 in its half, sum 4
	// rank 2: rank 1 of 2 in its half, sum 2
	// rank 3: rank 1 of 2 in its half, sum 4
}

// An async allreduce runs while the program computes; Wait collects it.
func ExampleAllReduceAsync() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	results := make([]string, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		grads := []float32{1, 2, 3}
		req := comm.AllReduceAsync(ctx, c, grads, comm.Sum)
		work := 0
		for i := range 1000 { // computation that does not touch grads
			work += i
		}
		if err := req.Wait(ctx); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = fmt.Sprint(grads, work)
	})
	fmt.Println(results)
	// Output: [[2 4 6] 499500 [2 4 6] 499500]
}

// AllReduceMany fuses many small allreduces into one.
func ExampleAllReduceMany() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	results := make([][][]float64, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		layers := [][]float64{{1}, {2, 2}, {float64(c.Rank())}}
		if err := comm.AllReduceMany(ctx, c, layers, comm.Avg); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = layers
	})
	fmt.Println(results[0])
	// Output: [[1] [2 2] [1]]
}

// SendRecv passes a message around a ring without any rank having to
// order its send and receive.
func ExampleSendRecv() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	results := make([]string, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		n, r := c.Size(), c.Rank()
		in := make([]int64, 4)
		got, err := comm.SendRecv(ctx, c, []int64{int64(r * 10)}, (r+1)%n, 0, in, (r+n-1)%n, 0)
		if err != nil {
			log.Fatal(err)
		}
		results[r] = fmt.Sprintf("rank %d got %v", r, in[:got])
	})
	for _, s := range results {
		fmt.Println(s)
	}
	// Output:
	// rank 0 got [20]
	// rank 1 got [0]
	// rank 2 got [10]
}

func ExampleReduce() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	var atRoot []int32
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		var recv []int32
		if c.Rank() == 0 {
			recv = make([]int32, 2)
		}
		if err := comm.Reduce(ctx, c, []int32{int32(c.Rank()), 1}, recv, comm.Sum, 0); err != nil {
			log.Fatal(err)
		}
		if c.Rank() == 0 {
			atRoot = recv
		}
	})
	fmt.Println(atRoot)
	// Output: [3 3]
}

func ExampleAllToAll() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	results := make([][]uint8, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		r := uint8(c.Rank())
		send := []uint8{10*r + 0, 10*r + 1} // block q goes to rank q
		recv := make([]uint8, 2)
		if err := comm.AllToAll(ctx, c, send, recv); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = recv
	})
	fmt.Println(results)
	// Output: [[0 10] [1 11]]
}
