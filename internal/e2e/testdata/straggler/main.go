// Command straggler is a job in which one rank comes late to a
// collective, for the stall report tests: it sleeps in its own code
// (-how sleep) or stops itself with SIGSTOP (-how stop) before call -at.
// Every allreduce's result is checked, element by element.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
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
				stop()
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
	if !*mix || i%5 == 0 {
		return allReduce(ctx, c, i, buf)
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
	}
	return c.Barrier(ctx)
}

// allReduce sums, as call i, a buffer whose element j is rank + i + j%61
// on each rank, and checks every element of the result.
func allReduce(ctx context.Context, c *comm.Communicator, i int, buf []float32) error {
	rank, n := c.Rank(), c.Size()
	for j := range buf {
		buf[j] = float32(rank + i + j%61)
	}
	if err := comm.AllReduce(ctx, c, buf, comm.Sum); err != nil {
		return err
	}
	for j, got := range buf {
		if want := float32(n*(n-1)/2 + n*(i+j%61)); got != want {
			return fmt.Errorf("allreduce %d: element %d is %v, want %v", i, j, got, want)
		}
	}
	return nil
}

// stop stops this process with SIGSTOP before it returns. kill(2) of the
// process's own pid hands the signal to a thread the kernel picks,
// usually the main thread, and this goroutine may run on another: it goes
// on until that thread is scheduled and stops the process, which under
// load was long enough to enter the next call and send part of it.
// Sent to the calling thread itself (tgkill), the signal is taken on the
// way out of the system call, before this goroutine runs again.
func stop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

// dawdle is the user's code the stall report's goroutine stacks show.
func dawdle(d time.Duration) { time.Sleep(d) }
