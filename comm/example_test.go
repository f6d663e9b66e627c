package comm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"

	"github.com/gocoll/gocoll/comm"
)

// onEveryRank runs f on each communicator of an in-process job in its own
// goroutine, as each would run in its own process, and waits for all.
func onEveryRank(cs []*comm.Communicator, f func(c *comm.Communicator)) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(c)
		}()
	}
	wg.Wait()
}

// A program started by grun (or torchrun, mpirun, srun) joins its job with
// Init and leaves it with Close. It returns its errors from a function
// that defers Close and exits after that function, so that its peers see
// it leave rather than die.
func ExampleInit() {
	run := func(ctx context.Context) error {
		c, err := comm.Init(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		grads := make([]float32, 1<<20)
		// ... compute this rank's gradients into grads ...
		return comm.AllReduce(ctx, c, grads, comm.Avg)
	}
	// In main:
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1) // run's deferred Close has run
	}
}

func ExampleAllReduce() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 4) // four ranks in this process, for the example
	if err != nil {
		log.Fatal(err)
	}
	results := make([][]float64, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		grads := []float64{float64(c.Rank()), 1, 0.5}
		if err := comm.AllReduce(ctx, c, grads, comm.Sum); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = grads
	})
	fmt.Println(results)
	// Output: [[6 4 2] [6 4 2] [6 4 2] [6 4 2]]
}

func ExampleBroadcast() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	results := make([][]int32, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		params := make([]int32, 3)
		if c.Rank() == 0 {
			params = []int32{7, 8, 9} // only the root has the values
		}
		if err := comm.Broadcast(ctx, c, params, 0); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = params
	})
	fmt.Println(results)
	// Output: [[7 8 9] [7 8 9] [7 8 9]]
}

func ExampleAllGather() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	results := make([][]uint16, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		mine := []uint16{uint16(10 * c.Rank()), uint16(10*c.Rank() + 1)}
		all := make([]uint16, c.Size()*len(mine))
		if err := comm.AllGather(ctx, c, mine, all); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = all
	})
	fmt.Println(results[2])
	// Output: [0 1 10 11 20 21]
}

func ExampleReduceScatter() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	results := make([][]float32, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		// Two blocks of two: rank r keeps block r of the sum.
		send := []float32{1, 2, 3, 4}
		recv := make([]float32, 2)
		if err := comm.ReduceScatter(ctx, c, send, recv, comm.Sum); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = recv
	})
	fmt.Println(results)
	// Output: [[2 4] [6 8]]
}

func ExampleCommunicator_Barrier() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		if err := c.Barrier(ctx); err != nil {
			log.Fatal(err)
		}
	})
	fmt.Println("every rank reached the barrier")
	// Output: every rank reached the barrier
}

func ExampleNewLocal() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2, comm.WithTransport("tcp"))
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range cs {
		fmt.Printf("rank %d of %d\n", c.Rank(), c.Size())
	}
	onEveryRank(cs, func(c *comm.Communicator) { c.Close() })
	// Output:
	// rank 0 of 2
	// rank 1 of 2
}

// A training loop registers its gradient buffer once, on every rank:
// over shared memory the ranks then read each other's gradients in
// place of copying them through the rings (the single copy, from 1 MiB);
// over RDMA its large messages are sent straight from it; over TCP,
// registering does nothing, so the same code runs everywhere.
func ExampleRegister() {
	ctx := context.Background()
	c, err := comm.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	grads := make([]float32, 1<<24)
	reg, err := comm.Register(ctx, c, grads)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	for step := 0; step < 1000; step++ {
		// ... compute this step's gradients into grads ...
		if err := comm.AllReduce(ctx, c, grads, comm.Avg); err != nil {
			log.Fatalf("rank %d, step %d: %v", c.Rank(), step, err)
		}
	}
}

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

// In an elastic job the survivors of a failure shrink the communicator
// and go on. Here rank 2 leaves (it aborts and closes; a rank killed
// outright is left out the same way), the others' barrier fails with
// ErrPeerLost, and they shrink to a communicator of two.
func ExampleCommunicator_Shrink() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3, comm.WithElastic(true))
	if err != nil {
		log.Fatal(err)
	}
	results := make([]string, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		if c.Rank() == 2 {
			c.Abort(errors.New("rank 2 is done"))
			c.Close()
			results[2] = "rank 2: left"
			return
		}
		defer c.Close()
		err := c.Barrier(ctx)
		if !errors.Is(err, comm.ErrPeerLost) {
			log.Fatalf("barrier: %v", err)
		}
		nc, err := c.Shrink(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer nc.Close()
		v := []int32{1}
		if err := comm.AllReduce(ctx, nc, v, comm.Sum); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = fmt.Sprintf("rank %d: rank %d of %d after the shrink, sum %d", c.Rank(), nc.Rank(), nc.Size(), v[0])
	})
	for _, s := range results {
		fmt.Println(s)
	}
	// Output:
	// rank 0: rank 0 of 2 after the shrink, sum 2
	// rank 1: rank 1 of 2 after the shrink, sum 2
	// rank 2: left
}

// A data-parallel loop of an elastic job (grun --elastic 2:4, say): the
// survivors of a death shrink and redo the step; when a replacement
// grun started waits to join, every rank learns it from the step's
// allreduce, whose last element carries Pending, and all grow together
// at that step boundary. The replacement runs the same program: its
// Init returns once the others' Grow admitted it. So every rank
// broadcasts the state (the model and the step) from rank 0 after Init
// and after each Grow: the original ranks once at the start, to no
// effect, and the replacement receives it in the broadcast that follows
// the others' Grow.
func ExampleCommunicator_Grow() {
	ctx := context.Background()
	c, err := comm.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	const params = 1000
	state := make([]float64, params+1) // the model, then the step
	grads := make([]float64, params+1) // the gradient, then Pending
	synced := false
	for state[params] < 100 {
		if !synced {
			if err := comm.Broadcast(ctx, c, state, 0); err != nil {
				log.Fatal(err)
			}
			synced = true
		}
		clear(grads) // ... this rank's gradient of the model goes here
		grads[params] = float64(c.Pending())
		err := comm.AllReduce(ctx, c, grads, comm.Sum)
		if errors.Is(err, comm.ErrPeerLost) {
			if c, err = c.Shrink(ctx); err != nil {
				log.Fatal(err)
			}
			continue // redo the step with c.Size() ranks
		} else if err != nil {
			log.Fatal(err)
		}
		for i := range params {
			state[i] -= 0.01 * grads[i] / float64(c.Size())
		}
		state[params]++
		if grads[params] > 0 {
			if c, err = c.Grow(ctx); err != nil {
				log.Fatal(err)
			}
			synced = false
		}
	}
	c.Close()
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

// AllReduceValues sums a step's scalars across the ranks in one
// collective.
func ExampleAllReduceValues() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	type stats struct{ loss, tokens, correct float64 }
	results := make([]stats, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		defer c.Close()
		s := stats{loss: 0.5 * float64(c.Rank()+1), tokens: 1000, correct: float64(100 * c.Rank())}
		if err := comm.AllReduceValues(ctx, c, comm.Sum, &s.loss, &s.tokens, &s.correct); err != nil {
			log.Fatal(err)
		}
		results[c.Rank()] = s
	})
	fmt.Printf("loss %.1f over %.0f tokens, %.0f correct\n", results[0].loss, results[0].tokens, results[0].correct)
	// Output: loss 3.0 over 3000 tokens, 300 correct
}

// A program that exits on an error must close the communicator first:
// log.Fatal and os.Exit skip deferred calls, so the peers would see this
// rank die (ErrPeerLost) rather than leave. Returning the error from a
// function whose deferred Close runs, and exiting after it, does both.
func Example_exit() {
	run := func(ctx context.Context) error {
		c, err := comm.Init(ctx)
		if err != nil {
			return err
		}
		defer c.Close() // runs before main exits
		grads := make([]float32, 1024)
		return comm.AllReduce(ctx, c, grads, comm.Sum)
	}
	// In main:
	if err := run(context.Background()); err != nil {
		log.Print(err)
		// os.Exit(1), once run's deferred Close has run
	}
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

// A call that fails part-way returns a *CallError: one line naming the
// call and the rank at the root of the failure, with the whole chain this
// rank saw behind it. Here rank 2 gives its call up, and rank 0 reads why.
func ExampleCallError() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3, comm.WithTransport("tcp"))
	if err != nil {
		log.Fatal(err)
	}
	errs := make([]error, len(cs))
	onEveryRank(cs, func(c *comm.Communicator) {
		ctx := ctx
		if c.Rank() == 2 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			cancel() // say, the program was told to stop
		}
		errs[c.Rank()] = comm.AllReduce(ctx, c, []float64{1, 2, 3}, comm.Sum)
	})
	var ce *comm.CallError
	if errors.As(errs[0], &ce) {
		fmt.Printf("rank %d lost rank %d: %v\n", ce.Rank, ce.Culprit, errors.Is(errs[0], comm.ErrPeerLost))
		// The whole story, for a log: ce.Err
	}
	onEveryRank(cs, func(c *comm.Communicator) { c.Close() })
	// Output:
	// rank 0 lost rank 2: true
}

// The flight recorder: the last calls, with what each was, from any
// goroutine (a watchdog of the program's own, an HTTP handler).
func ExampleCommunicator_Records() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2, comm.WithTransport("tcp"))
	if err != nil {
		log.Fatal(err)
	}
	onEveryRank(cs, func(c *comm.Communicator) {
		comm.AllReduce(ctx, c, []float64{1, 2}, comm.Sum)
		comm.Broadcast(ctx, c, []int32{7}, 1)
	})
	for _, r := range cs[0].Records() {
		fmt.Printf("#%d %s of %d x %s, %d bytes, running: %v\n", r.Seq, r.Kind, r.Count, r.Type, r.Bytes, r.Running)
	}
	st := cs[0].Stats()
	fmt.Println("allreduces:", st.Calls["allreduce"], "bytes:", st.Bytes["allreduce"])
	onEveryRank(cs, func(c *comm.Communicator) { c.Close() })
	// Output:
	// #1 allreduce of 2 x float64, 16 bytes, running: false
	// #2 broadcast of 1 x int32, 4 bytes, running: false
	// allreduces: 1 bytes: 16
}

// ExactSum returns the exact sum of the ranks' inputs rounded once, so
// its bits do not depend on the algorithm (or the rank count, transport
// or arrival order), where Sum's follow the order of its additions.
// Here four ranks hold 1e8, 4, 4 and -1e8 in float32, whose spacing at
// 1e8 is 8: the ring adds 4+4 first and keeps the 8, recursive doubling
// adds each 4 to a 1e8 first and loses both to ties-to-even.
func ExampleExactSum() {
	ctx := context.Background()
	inputs := []float32{1e8, 4, 4, -1e8}
	for _, algo := range []string{"ring", "rd", "tree"} {
		cs, err := comm.NewLocal(ctx, len(inputs), comm.WithAlgorithm("allreduce="+algo))
		if err != nil {
			log.Fatal(err)
		}
		var sum, exact [4]float32
		onEveryRank(cs, func(c *comm.Communicator) {
			defer c.Close()
			buf := []float32{inputs[c.Rank()]}
			if err := comm.AllReduce(ctx, c, buf, comm.Sum); err != nil {
				log.Fatal(err)
			}
			sum[c.Rank()] = buf[0]
			buf[0] = inputs[c.Rank()]
			if err := comm.AllReduce(ctx, c, buf, comm.ExactSum); err != nil {
				log.Fatal(err)
			}
			exact[c.Rank()] = buf[0]
		})
		fmt.Printf("%-4s Sum %v, ExactSum %v\n", algo, sum[0], exact[0])
	}
	// Output:
	// ring Sum 8, ExactSum 8
	// rd   Sum 0, ExactSum 8
	// tree Sum 0, ExactSum 8
}
