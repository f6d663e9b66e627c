// Command allreduce is the smallest complete gocoll program: join the job,
// sum a vector across every rank, check the answer, and report the speed.
//
//	go run ./cmd/grun -n 4 go run ./examples/allreduce
//	go run ./cmd/grun -n 4 go run ./examples/allreduce -count 4194304
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/gocoll/gocoll/comm"
)

func main() {
	count := flag.Int("count", 1<<20, "float32 elements per rank")
	iters := flag.Int("iters", 10, "timed iterations")
	flag.Parse()

	ctx := context.Background()
	c, err := comm.Init(ctx) // rank, size and rendezvous come from grun's environment
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Rank r contributes r+1 everywhere, so every element must end as
	// 1+2+...+size. Small integers are exact in float32, whatever the
	// order of the additions.
	grads := make([]float32, *count)
	want := float32(c.Size() * (c.Size() + 1) / 2)

	var elapsed time.Duration
	for it := 0; it <= *iters; it++ { // iteration 0 warms up
		for i := range grads {
			grads[i] = float32(c.Rank() + 1)
		}
		if err := c.Barrier(ctx); err != nil {
			log.Fatal(err)
		}
		start := time.Now()
		if err := comm.AllReduce(ctx, c, grads, comm.Sum); err != nil {
			log.Fatal(err)
		}
		if it > 0 {
			elapsed += time.Since(start)
		}
		for i, g := range grads {
			if g != want {
				log.Fatalf("rank %d: element %d is %v, want %v", c.Rank(), i, g, want)
			}
		}
	}

	if c.Rank() == 0 {
		per := elapsed / time.Duration(*iters)
		bytes := 4 * float64(*count)
		n := float64(c.Size())
		// Bus bandwidth, as nccl-tests defines it for allreduce: what each
		// rank's link carried, comparable across rank counts.
		busbw := bytes / per.Seconds() * 2 * (n - 1) / n / 1e9
		fmt.Printf("allreduce ok: %d ranks, %d float32 (%.1f MiB), %v per call, busbw %.2f GB/s\n",
			c.Size(), *count, bytes/(1<<20), per.Round(time.Microsecond), busbw)
	}
}
