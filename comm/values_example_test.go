package comm_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gocoll/gocoll/comm"
)

// Rank 0's training state reaches every rank in one call: a struct of
// fixed-size fields, no packing.
func ExampleBroadcastValue() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	type state struct {
		Step int
		Seed uint64
		LR   float64
		Warm bool
	}
	results := make([]state, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		var s state
		if c.Rank() == 0 {
			s = state{Step: 1200, Seed: 42, LR: 3e-4, Warm: true} // say, read from a checkpoint
		}
		if err := comm.BroadcastValue(ctx, c, &s, 0); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = s
	})
	fmt.Printf("%+v\n%+v\n", results[1], results[2])
	// Output:
	// {Step:1200 Seed:42 LR:0.0003 Warm:true}
	// {Step:1200 Seed:42 LR:0.0003 Warm:true}
}

// The other ranks learn the length with the bytes.
func ExampleBroadcastBytes() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	results := make([]string, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		var cfg []byte
		if c.Rank() == 0 {
			cfg = []byte(`{"layers":2,"hidden":64}`)
		}
		got, err := comm.BroadcastBytes(ctx, c, cfg, 0)
		if err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = string(got)
	})
	fmt.Println(results[1])
	// Output: {"layers":2,"hidden":64}
}

// Three ranks hold 683, 683 and 682 samples (2048 after a Shrink from 4):
// each passes its own mean with its count as the weight, and every rank
// gets the mean over all 2048. Avg would weigh the three means alike.
func ExampleAllReduceMean() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	counts := []int{683, 683, 682}
	results := make([]float64, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		// Sample i of the 2048 has the value i; this rank holds a
		// contiguous run of them.
		lo := 0
		for r := range c.Rank() {
			lo += counts[r]
		}
		sum := 0.0
		for i := lo; i < lo+counts[c.Rank()]; i++ {
			sum += float64(i)
		}
		mean := []float64{sum / float64(counts[c.Rank()])}
		if err := comm.AllReduceMean(ctx, c, mean, float64(counts[c.Rank()])); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = mean[0]
	})
	fmt.Printf("%.4f\n", results[0])
	// Output: 1023.5000
}

// An int, such as Pending's count, reduces as it is.
func ExampleAllReduceValues_int() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	results := make([]int, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		n := c.Pending() // 0 here: no replacements wait to join
		n += c.Rank()
		if err := comm.AllReduceValues(ctx, c, comm.Max, &n); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = n
	})
	fmt.Println(results)
	// Output: [2 2 2]
}
