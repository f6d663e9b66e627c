// Command straggler is a job in which one rank comes late to a
// collective, for the stall report tests: it sleeps in its own code
// (-how sleep) or stops itself with SIGSTOP (-how stop) before call -at.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/gocoll/gocoll/comm"
)

var (
	late  = flag.Int("late", 3, "rank that comes late")
	how   = flag.String("how", "sleep", "sleep or stop")
	at    = flag.Int("at", 2, "index of the call it comes late to")
	calls = flag.Int("calls", 4, "allreduces to run")
	nap   = flag.Duration("for", 3*time.Second, "how long it sleeps")
	mix   = flag.Bool("mix", false, "cycle through allreduce, broadcast, allgather, reducescatter and barrier")
)

func main() {
	flag.Parse()
	ctx := context.Background()
	c, err := comm.Init(ctx)
	if err != nil {
		fmt.Println("straggler:", err)
		os.Exit(1)
	}
	os.Exit(run(ctx, c))
}

func run(ctx context.Context, c *comm.Communicator) int {
	defer c.Close()
	buf := make([]float32, 1<<18)
	for i := range *calls {
		if i == *at && c.Rank() == *late {
			fmt.Printf("straggler: rank %d late at %d\n", c.Rank(), time.Now().UnixNano())
			if *how == "stop" {
				syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			} else {
				dawdle(*nap)
			}
		}
		if err := step(ctx, c, i, buf); err != nil {
			fmt.Printf("straggler: rank %d: %v\n", c.Rank(), err)
			return 1
		}
	}
	fmt.Printf("straggler: rank %d ok\n", c.Rank())
	return 0
}

// step is call i: an allreduce, or with -mix one of five kinds in turn.
func step(ctx context.Context, c *comm.Communicator, i int, buf []float32) error {
	if !*mix {
		return comm.AllReduce(ctx, c, buf, comm.Sum)
	}
	n := c.Size()
	switch i % 5 {
	case 1:
		return comm.Broadcast(ctx, c, buf, i%n)
	case 2:
		part := make([]float32, len(buf)/n)
		return comm.AllGather(ctx, c, part, buf[:len(part)*n])
	case 3:
		return comm.ReduceScatter(ctx, c, buf[:len(buf)/n*n], make([]float32, len(buf)/n), comm.Sum)
	case 4:
		return c.Barrier(ctx)
	}
	return comm.AllReduce(ctx, c, buf, comm.Sum)
}

// dawdle is the user's code the stall report's goroutine stacks show.
func dawdle(d time.Duration) { time.Sleep(d) }
