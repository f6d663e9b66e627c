package comm_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

var growSeed = flag.Uint64("growseed", 0, "seed of TestGrowEveryAlgorithm's victim and step (0: from the clock; the test logs it)")

// growCalls are the allreduces of TestGrowEveryAlgorithm's steps, in
// turn: float64 from 32 KiB to 2 MiB and float16 at 32 KiB and 1 MiB, so
// that on 3 and 4 ranks, over shared memory alone and beside TCP, they
// run recursive doubling, the ring, Rabenseifner and the pairwise
// reduce-scatter.
var growCalls = []struct {
	half  bool
	count int
}{
	{false, 4 << 10}, {false, 16 << 10}, {false, 128 << 10}, {false, 256 << 10},
	{true, 16 << 10}, {true, 512 << 10},
}

// TestGrowEveryAlgorithm: an elastic job on one host with the default
// transports (shared memory, and shared memory beside TCP on two fake
// hosts), of 3 and 4 ranks, runs allreduces of every algorithm's sizes;
// a random rank dies at a random step (seeded: -growseed replays a
// seed the log prints), the survivors shrink, a replacement joins over
// TCP and the job runs every size again. Every call's result is checked
// on every rank. The replacement's links differ from the members', so
// this fails if the algorithm of a call depends on a rank's own
// transport rather than on the job's plan.
func TestGrowEveryAlgorithm(t *testing.T) {
	seed := *growSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -growseed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x47524f57))
	for _, setup := range []struct{ name, fakeHosts string }{{"shm", ""}, {"shm+tcp", "2"}} {
		for _, n := range []int{3, 4} {
			victim, death := 1+rng.IntN(n-1), rng.IntN(len(growCalls))
			t.Run(fmt.Sprintf("%s/%d ranks/rank %d dies at step %d", setup.name, n, victim, death), func(t *testing.T) {
				if setup.fakeHosts != "" {
					t.Setenv("GOCOLL_FAKE_HOSTS", setup.fakeHosts)
				}
				growEveryAlgorithm(t, n, victim, death)
			})
		}
	}
}

// growStep runs step's allreduce on c and checks its result: rank q
// contributes q+1+i%5 at element i, so the sum is n(n+1)/2 + n(i%5),
// exact in float16 too.
func growStep(ctx context.Context, c *comm.Communicator, step int) error {
	call := growCalls[step%len(growCalls)]
	n, r := c.Size(), c.Rank()
	want := func(i int) float64 { return float64(n*(n+1)/2 + n*(i%5)) }
	what := fmt.Sprintf("rank %d of %d, step %d", r, n, step)
	if call.half {
		buf := make([]comm.Float16, call.count)
		for i := range buf {
			buf[i] = comm.Float16Of(float32(r + 1 + i%5))
		}
		if err := comm.AllReduce(ctx, c, buf, comm.Sum); err != nil {
			return err
		}
		for i, v := range buf {
			if float64(v.Float32()) != want(i) {
				return fmt.Errorf("%s: %d float16: element %d = %v, want %v: %w", what, call.count, i, v.Float32(), want(i), errWrongResult)
			}
		}
		return nil
	}
	buf := make([]float64, call.count)
	for i := range buf {
		buf[i] = float64(r + 1 + i%5)
	}
	if err := comm.AllReduce(ctx, c, buf, comm.Sum); err != nil {
		return err
	}
	for i, v := range buf {
		if v != want(i) {
			return fmt.Errorf("%s: %d float64: element %d = %v, want %v: %w", what, call.count, i, v, want(i), errWrongResult)
		}
	}
	return nil
}

var errWrongResult = errors.New("wrong result")

func growEveryAlgorithm(t *testing.T, n, victim, death int) {
	opts := []comm.Option{comm.WithElastic(true), comm.WithTimeout(30 * time.Second)}
	cs := local(t, n, opts...)
	cfg := comm.JobConfig(cs[victim])
	steps := death + 1 + len(growCalls) // every call again after the grow
	final := make([]*comm.Communicator, n+1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var joinErr error
	// run takes c through the steps from step on, and returns the
	// communicator it ends on.
	run := func(ctx context.Context, c *comm.Communicator, step int) (*comm.Communicator, error) {
		for ; step < steps; step++ {
			if err := growStep(ctx, c, step); err != nil {
				return c, err
			}
		}
		return c, c.Barrier(ctx)
	}
	// The victim dies once the others are out of the steps before the
	// death: a death seen while a survivor is still in one would fail
	// that call too, rightly.
	var before sync.WaitGroup
	before.Add(n - 1)
	errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		r := c.Rank()
		step := 0
		err := func() error {
			for ; step < death; step++ {
				if err := growStep(ctx, c, step); err != nil {
					return err
				}
			}
			return nil
		}()
		if r != victim {
			before.Done()
		}
		if err != nil {
			return err
		}
		if r == victim {
			before.Wait()
			comm.Die(c)
			return nil
		}
		err = growStep(ctx, c, step)
		if !errors.Is(err, comm.ErrPeerLost) && !errors.Is(err, comm.ErrBroken) {
			return fmt.Errorf("step %d, rank %d dead: %v, want ErrPeerLost or ErrBroken", step, victim, err)
		}
		sc, err := c.Shrink(ctx)
		if err != nil {
			return fmt.Errorf("shrink: %w", err)
		}
		if r == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				jc, err := comm.New(ctx, cfg, opts...)
				if err == nil {
					s := []int64{0}
					if err = comm.Broadcast(ctx, jc, s, 0); err == nil {
						jc, err = run(ctx, jc, int(s[0]))
					}
				}
				mu.Lock()
				final[n], joinErr = jc, err
				mu.Unlock()
			}()
		}
		for {
			p := []int64{int64(sc.Pending())}
			if err := comm.AllReduce(ctx, sc, p, comm.Sum); err != nil {
				return fmt.Errorf("waiting for the replacement: %w", err)
			}
			if p[0] > 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		gc, err := sc.Grow(ctx)
		if err != nil {
			return fmt.Errorf("grow: %w", err)
		}
		if gc.Size() != n {
			return fmt.Errorf("grown to %d ranks, want %d", gc.Size(), n)
		}
		// The state a program would broadcast: the step to redo.
		s := []int64{int64(step)}
		if err := comm.Broadcast(ctx, gc, s, 0); err != nil {
			return fmt.Errorf("state broadcast: %w", err)
		}
		gc, err = run(ctx, gc, step)
		mu.Lock()
		final[r] = gc
		mu.Unlock()
		return err
	})
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if joinErr != nil {
		t.Errorf("replacement: %v", joinErr)
	}
	closeAll(t, final)
}
