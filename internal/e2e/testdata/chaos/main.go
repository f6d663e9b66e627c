// Command chaos is the kill-at-a-random-point fault check. Started by grun,
// every rank runs the same seeded stream of allreduces, broadcasts and
// barriers of random sizes, checking each result, until -victim kills
// itself with SIGKILL after -after. Killing from inside the victim, not
// from the test, is what puts the death at an unplanned point of whatever
// collective is running, and lets the victim record the moment of death on
// the same clock the survivors use to record when they noticed.
//
// Lines printed, for the test to parse:
//
//	chaos: kill rank R at T            (the victim, just before SIGKILL)
//	chaos: rank R failed at T: ERR     (a survivor whose call failed)
//	chaos: rank R ok, N collectives    (nobody died: -victim -1)
//
// T is Unix nanoseconds.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"time"

	"github.com/gocoll/gocoll/comm"
)

var (
	seed   = flag.Uint64("seed", 1, "seed of the collective stream, the same on every rank")
	victim = flag.Int("victim", -1, "rank that kills itself (-1: nobody)")
	after  = flag.Duration("after", 100*time.Millisecond, "how long after Init the victim dies")
	calls  = flag.Int("calls", 1_000_000, "collectives to run when nobody dies")
)

func main() {
	flag.Parse()
	ctx := context.Background()
	// The clock starts before Init, so that a short -after kills the
	// victim while the job is still connecting.
	if rank := launcherRank(); rank == fmt.Sprint(*victim) {
		go func() {
			time.Sleep(*after)
			fmt.Printf("chaos: kill rank %s at %d\n", rank, time.Now().UnixNano())
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}()
	}
	c, err := comm.Init(ctx)
	if err != nil {
		fmt.Printf("chaos: rank %s failed at %d: %v\n", launcherRank(), time.Now().UnixNano(), err)
		os.Exit(1)
	}
	me := c.Rank()
	n, err := stream(ctx, c)
	if err != nil {
		fmt.Printf("chaos: rank %d failed at %d: %v\n", me, time.Now().UnixNano(), err)
		c.Close()
		os.Exit(1)
	}
	fmt.Printf("chaos: rank %d ok, %d collectives\n", me, n)
	c.Close()
}

// stream runs the seeded mix. Sizes go from empty to several transport
// slots, so that a death lands in every phase: between collectives, in
// the first message, in the middle of a pipelined ring.
func stream(ctx context.Context, c *comm.Communicator) (int, error) {
	rng := rand.New(rand.NewPCG(*seed, 0))
	size, me := c.Size(), c.Rank()
	for i := 0; i < *calls; i++ {
		count := []int{0, 1, 7, 1000, 65_536, 400_000}[rng.IntN(6)]
		switch rng.IntN(3) {
		case 0:
			buf := make([]int32, count)
			for j := range buf {
				buf[j] = int32(me + j)
			}
			if err := comm.AllReduce(ctx, c, buf, comm.Sum); err != nil {
				return i, err
			}
			for j, v := range buf {
				if want := int32(size*j + size*(size-1)/2); v != want {
					return i, fmt.Errorf("allreduce #%d: element %d is %d, want %d", i, j, v, want)
				}
			}
		case 1:
			root := rng.IntN(size)
			buf := make([]float32, count)
			for j := range buf {
				buf[j] = float32(me*1000 + j%1000)
			}
			if err := comm.Broadcast(ctx, c, buf, root); err != nil {
				return i, err
			}
			for j, v := range buf {
				if want := float32(root*1000 + j%1000); v != want {
					return i, fmt.Errorf("broadcast #%d from %d: element %d is %v, want %v", i, root, j, v, want)
				}
			}
		default:
			if err := c.Barrier(ctx); err != nil {
				return i, err
			}
		}
	}
	return *calls, nil
}

// launcherRank is this process's rank as its launcher says, before Init:
// grun's, srun's, Open MPI's or torchrun's variable.
func launcherRank() string {
	for _, v := range []string{"GRUN_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "RANK"} {
		if r := os.Getenv(v); r != "" {
			return r
		}
	}
	return "?"
}
