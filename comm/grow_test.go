package comm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

// TestGrowAfterDeath: in an elastic job of 4 ranks, over tcp, shm and
// shm+tcp (two fake hosts; auto, so shm+rdma where there is an RDMA
// device), and rdma where there is one (GOCOLL_IB_DEV, which
// vmtest/run sets), rank 2 dies; the survivors shrink to 3, and
// a replacement started with rank 2's configuration joins the running
// job over TCP: its New waits until the survivors, who see it in Pending
// and agree on it through an allreduce, call Grow. All four get the same
// communicator: the survivors ranked 0..2 in their order, the joiner 3.
// Its collectives give the right results (a broadcast of 1000 float64s,
// more than one message where shared memory's slot is the job's cut, and
// one of 1 MiB, several), a broadcast brings the joiner up to date, and
// the communicators before the Grow are broken.
func TestGrowAfterDeath(t *testing.T) {
	setups := slices.Clone(elasticSetups)
	if os.Getenv("GOCOLL_IB_DEV") != "" {
		setups = append(setups, elasticSetups[0])
		setups[len(setups)-1].name, setups[len(setups)-1].opts = "rdma", []comm.Option{comm.WithTransport("rdma")}
	}
	for _, setup := range setups {
		t.Run(setup.name, func(t *testing.T) {
			if setup.fakeHosts != "" {
				t.Setenv("GOCOLL_FAKE_HOSTS", setup.fakeHosts)
			}
			growAfterDeath(t, append([]comm.Option{comm.WithElastic(true), comm.WithTimeout(20 * time.Second)}, setup.opts...))
		})
	}
}

func growAfterDeath(t *testing.T, opts []comm.Option) {
	cs := local(t, 4, opts...)
	const victim = 2
	cfg := comm.JobConfig(cs[victim])
	grown := make([]*comm.Communicator, 5) // by old rank; 4: the joiner
	var joinerStart time.Time
	var mu sync.Mutex
	var wg sync.WaitGroup
	var joinErr error
	errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		r := c.Rank()
		if r == victim {
			comm.Die(c)
			return nil
		}
		err := comm.AllReduce(ctx, c, make([]float32, 1<<16), comm.Sum)
		if !errors.Is(err, comm.ErrPeerLost) {
			return fmt.Errorf("allreduce during the death = %v; want ErrPeerLost", err)
		}
		sc, err := c.Shrink(ctx)
		if err != nil {
			return fmt.Errorf("shrink: %w", err)
		}
		if r == 0 {
			// The replacement starts once the survivors have shrunk,
			// as grun would start it once the death is reaped.
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Its own context: it outlives the survivors' calls.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				mu.Lock()
				joinerStart = time.Now()
				mu.Unlock()
				jc, err := comm.New(ctx, cfg, opts...)
				if err == nil {
					err = checkGrown(ctx, jc)
				}
				mu.Lock()
				grown[4], joinErr = jc, err
				mu.Unlock()
			}()
		}
		// Steps until a replacement waits, agreed on with an allreduce.
		for step := 0; ; step++ {
			p := []int64{int64(sc.Pending())}
			if err := comm.AllReduce(ctx, sc, p, comm.Sum); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
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
		mu.Lock()
		grown[r] = gc
		mu.Unlock()
		if want := map[int]int{0: 0, 1: 1, 3: 2}[r]; gc.Rank() != want || gc.Size() != 4 {
			return fmt.Errorf("grown to rank %d of %d, want %d of 4", gc.Rank(), gc.Size(), want)
		}
		// At once, not at the watcher's next look at the store: ranks
		// that grow again on a positive sum would admit nobody.
		if n := gc.Pending(); n != 0 {
			return fmt.Errorf("Pending = %d right after the Grow that admitted the only replacement, want 0", n)
		}
		if err := checkGrown(ctx, gc); err != nil {
			return err
		}
		if r == 0 {
			mu.Lock()
			t.Logf("%s: replacement's start to the state broadcast on the grown communicator: %v", c.Transport(), time.Since(joinerStart).Round(time.Millisecond))
			mu.Unlock()
		}
		if err := sc.Barrier(ctx); !errors.Is(err, comm.ErrBroken) {
			return fmt.Errorf("the shrunk communicator after the grow: %v, want ErrBroken", err)
		}
		if _, err := sc.Grow(ctx); !errors.Is(err, comm.ErrInvalid) {
			return fmt.Errorf("a second Grow of the same communicator = %v, want ErrInvalid", err)
		}
		return nil
	})
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if joinErr != nil {
		t.Errorf("replacement: %v", joinErr)
	} else if grown[4].Rank() != 3 || grown[4].Size() != 4 || !grown[4].Joined() {
		t.Errorf("replacement is rank %d of %d (joined: %v), want 3 of 4, joined", grown[4].Rank(), grown[4].Size(), grown[4].Joined())
	}
	for r, gc := range grown[:4] {
		if gc != nil && gc.Joined() {
			t.Errorf("rank %d says it joined a running job", r)
		}
	}
	closeAll(t, grown)
}

// checkGrown runs, on every rank of the grown communicator, the state
// broadcast a program would, an allreduce and a second Grow with nobody
// waiting.
func checkGrown(ctx context.Context, gc *comm.Communicator) error {
	state := make([]float64, 1000)
	if gc.Rank() == 0 {
		for i := range state {
			state[i] = float64(i) / 3
		}
	}
	if err := comm.Broadcast(ctx, gc, state, 0); err != nil || state[999] != 333 {
		return fmt.Errorf("rank %d: broadcast on the grown communicator: %v (state[999] = %v)", gc.Rank(), err, state[999])
	}
	big := make([]byte, 1<<20)
	if gc.Rank() == 3 {
		for i := range big {
			big[i] = byte(i % 251)
		}
	}
	if err := comm.Broadcast(ctx, gc, big, 3); err != nil || big[1<<20-1] != byte((1<<20-1)%251) {
		return fmt.Errorf("rank %d: 1 MiB broadcast from the joiner: %v", gc.Rank(), err)
	}
	v := []int64{int64(gc.Rank())}
	if err := comm.AllReduce(ctx, gc, v, comm.Sum); err != nil || v[0] != 6 {
		return fmt.Errorf("rank %d: allreduce on the grown communicator: %v, %v", gc.Rank(), v, err)
	}
	same, err := gc.Grow(ctx)
	if err != nil || same != gc {
		return fmt.Errorf("rank %d: Grow with nobody waiting = %p, %v; want the same communicator", gc.Rank(), same, err)
	}
	return nil
}

// TestGrowMistakes: Grow refuses a job that is not elastic and a
// communicator split from another (ErrInvalid), and a transport that cannot link to new processes (ErrUnsupported,
// naming it); a replacement of such a job fails at once the same way.
func TestGrowMistakes(t *testing.T) {
	t.Run("not elastic", func(t *testing.T) {
		cs := local(t, 2)
		if _, err := cs[0].Grow(context.Background()); !errors.Is(err, comm.ErrInvalid) {
			t.Fatalf("Grow on a job that is not elastic = %v, want ErrInvalid", err)
		}
		if n := cs[0].Pending(); n != 0 {
			t.Fatalf("Pending on a job that is not elastic = %d", n)
		}
	})
	t.Run("split", func(t *testing.T) {
		cs := local(t, 2, comm.WithElastic(true), comm.WithTransport("tcp"), comm.WithTimeout(20*time.Second))
		subs := make([]*comm.Communicator, 2)
		mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
			sub, err := c.Split(ctx, 0, c.Rank())
			subs[c.Rank()] = sub
			return err
		})
		if _, err := subs[0].Grow(context.Background()); !errors.Is(err, comm.ErrInvalid) || !strings.Contains(err.Error(), "split") {
			t.Fatalf("Grow on a split communicator = %v, want ErrInvalid", err)
		}
		closeAll(t, subs)
	})
	t.Run("eager tcp", func(t *testing.T) {
		t.Setenv("GOCOLL_TCP_CONNECT", "eager")
		cs := local(t, 2, comm.WithElastic(true), comm.WithTransport("tcp"), comm.WithTimeout(20*time.Second))
		_, err := cs[0].Grow(context.Background())
		if !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), "tcp") {
			t.Fatalf("Grow over eager tcp = %v, want ErrUnsupported naming tcp", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cfg := comm.JobConfig(cs[1])
		_, err = comm.New(ctx, cfg, comm.WithElastic(true), comm.WithTransport("tcp"))
		if !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), "GOCOLL_TCP_CONNECT=eager") {
			t.Fatalf("a replacement joining a job over eager tcp = %v, want ErrUnsupported naming GOCOLL_TCP_CONNECT=eager", err)
		}
	})
}

// TestGrowWithoutDeath: a job that lost nobody grows too (Grow on the
// job's communicator), and a replacement that gives up waiting before
// any Grow leaves no trace: the ranks' calls go on (its departure is not
// a member's), Pending drops back to 0, and Grow admits nobody.
func TestGrowWithoutDeath(t *testing.T) {
	cs := local(t, 3, comm.WithElastic(true), comm.WithTransport("tcp"), comm.WithTimeout(20*time.Second))
	cfg := comm.JobConfig(cs[1])
	waitPending := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, c := range cs {
			for c.Pending() != want {
				if time.Now().After(deadline) {
					t.Fatalf("rank %d: Pending = %d, want %d", c.Rank(), c.Pending(), want)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}

	// One that gives up.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := comm.New(ctx, cfg, comm.WithElastic(true), comm.WithTransport("tcp"))
		gaveUp <- err
	}()
	waitPending(1)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "no Grow admitted it") {
		t.Fatalf("a replacement whose context ended = %v, want context.Canceled, saying no Grow admitted it", err)
	}
	time.Sleep(300 * time.Millisecond) // the watchers see its departure
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		v := []int32{1}
		if err := comm.AllReduce(ctx, c, v, comm.Sum); err != nil || v[0] != 3 {
			return fmt.Errorf("allreduce after a replacement gave up: %v, %v", v, err)
		}
		nc, err := c.Grow(ctx)
		if err != nil || nc != c {
			return fmt.Errorf("Grow after the only replacement gave up = %p, %v; want the same communicator", nc, err)
		}
		return nil
	})
	waitPending(0)

	// One that is admitted.
	var joined *comm.Communicator
	var joinErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		joined, joinErr = comm.New(ctx, cfg, comm.WithElastic(true), comm.WithTransport("tcp"))
		if joinErr == nil {
			v := []int32{int32(joined.Rank())}
			joinErr = comm.AllReduce(ctx, joined, v, comm.Sum)
			if joinErr == nil && v[0] != 6 {
				joinErr = fmt.Errorf("allreduce on the grown communicator = %d, want 6", v[0])
			}
		}
	}()
	waitPending(1)
	grown := growBy1(t, cs)
	<-done
	if joinErr != nil {
		t.Fatalf("replacement: %v", joinErr)
	}
	closeAll(t, append(grown, joined))
}

// TestGrowJobEnded: a replacement waiting to join a job whose members
// all leave before admitting it is not left waiting for its timeout: its
// New fails with ErrExcluded, saying the job ended.
func TestGrowJobEnded(t *testing.T) {
	cs := local(t, 2, comm.WithElastic(true), comm.WithTransport("tcp"), comm.WithTimeout(20*time.Second))
	cfg := comm.JobConfig(cs[1])
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := comm.New(ctx, cfg, comm.WithElastic(true), comm.WithTransport("tcp"))
		res <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for cs[0].Pending() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the replacement never shows in Pending")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	comm.Die(cs[1])
	comm.Die(cs[0]) // its process serves the store, which lives on
	select {
	case err := <-res:
		if !errors.Is(err, comm.ErrExcluded) || !strings.Contains(err.Error(), "the job ended") {
			t.Fatalf("replacement of a job that ended = %v, want ErrExcluded saying the job ended", err)
		}
		t.Logf("the replacement gave up %v after the last member left", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the replacement still waits 10 s after every member left")
	}
}

// growBy1 grows every communicator of cs by the one replacement waiting
// to join, checks that each keeps its rank in a communicator one larger,
// and that an allreduce of the ranks over it sums them all; it returns
// the grown communicators, by rank.
func growBy1(t *testing.T, cs []*comm.Communicator) []*comm.Communicator {
	t.Helper()
	n := len(cs) + 1
	grown := make([]*comm.Communicator, len(cs))
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		nc, err := c.Grow(ctx)
		if err != nil {
			return err
		}
		grown[c.Rank()] = nc
		if nc.Size() != n || nc.Rank() != c.Rank() {
			return fmt.Errorf("grown to rank %d of %d, want %d of %d", nc.Rank(), nc.Size(), c.Rank(), n)
		}
		v := []int32{int32(nc.Rank())}
		if err := comm.AllReduce(ctx, nc, v, comm.Sum); err != nil || v[0] != int32(n*(n-1)/2) {
			return fmt.Errorf("allreduce on the grown communicator: %v, %v", v, err)
		}
		return nil
	})
	return grown
}
