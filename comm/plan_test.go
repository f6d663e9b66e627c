package comm_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

var planSeed = flag.Uint64("planseed", 0, "seed of TestPlanAgreedEverywhere's job shapes (0: from the clock; the test logs it)")

// planOp is one step of TestPlanAgreedEverywhere's sequence: a split
// (twice nested if deep), or the death of original process victim
// followed by Shrink and the Grow that admits its replacement.
type planOp struct {
	grow   bool
	deep   bool
	victim int
	colors int
}

func (o planOp) String() string {
	switch {
	case o.grow:
		return fmt.Sprintf("kill %d, shrink, grow", o.victim)
	case o.deep:
		return fmt.Sprintf("split %d ways, split again", o.colors)
	}
	return fmt.Sprintf("split %d ways", o.colors)
}

// TestPlanAgreedEverywhere forms communicators by Init, Shrink, Grow and
// Split in a random order (seeded: -planseed replays the seed it logs),
// over tcp, shm and shm+tcp on two fake hosts, with replacements that
// link over TCP among members that do not, and checks on every
// communicator that its members would choose the same algorithm for
// every collective over a sweep of sizes and element types: each
// member's fingerprint of its plan and of its choices
// (comm.ChoiceFingerprint), allgathered, must be the same everywhere.
func TestPlanAgreedEverywhere(t *testing.T) {
	seed := *planSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -planseed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x504c414e))
	for _, setup := range elasticSetups {
		n := 3 + rng.IntN(3)
		alive := make([]int, 0, n) // original processes that may die: not 0, whose communicator holds the store
		for i := 1; i < n; i++ {
			alive = append(alive, i)
		}
		var ops []planOp
		for range 3 + rng.IntN(3) {
			if len(alive) > 1 && rng.IntN(3) == 0 {
				i := rng.IntN(len(alive))
				ops = append(ops, planOp{grow: true, victim: alive[i]})
				alive = append(alive[:i], alive[i+1:]...)
				continue
			}
			ops = append(ops, planOp{deep: rng.IntN(2) == 0, colors: 1 + rng.IntN(3)})
		}
		var names []string
		for _, o := range ops {
			names = append(names, o.String())
		}
		t.Run(fmt.Sprintf("%s/%d ranks/%s", setup.name, n, strings.Join(names, "; ")), func(t *testing.T) {
			if setup.fakeHosts != "" {
				t.Setenv("GOCOLL_FAKE_HOSTS", setup.fakeHosts)
			}
			planAgreed(t, n, ops, append([]comm.Option{comm.WithElastic(true), comm.WithTimeout(30 * time.Second)}, setup.opts...), seed)
		})
	}
}

// agreeOn checks that every member of c has the same choice
// fingerprint, and says where it was checked if not.
func agreeOn(ctx context.Context, c *comm.Communicator, where string) error {
	mine := []uint64{comm.ChoiceFingerprint(c)}
	all := make([]uint64, c.Size())
	if err := comm.AllGather(ctx, c, mine, all); err != nil {
		return fmt.Errorf("%s: allgather of the fingerprints: %w", where, err)
	}
	for q, f := range all {
		if f != all[0] {
			return fmt.Errorf("%s: rank %d's choices (%x) differ from rank 0's (%x)", where, q, f, all[0])
		}
	}
	// And the choices hold: an allreduce from every algorithm's range.
	for _, count := range []int{1, 4 << 10, 64 << 10} {
		v := make([]float32, count)
		for i := range v {
			v[i] = 1
		}
		if err := comm.AllReduce(ctx, c, v, comm.Sum); err != nil {
			return fmt.Errorf("%s: allreduce of %d float32: %w", where, count, err)
		}
		if v[count-1] != float32(c.Size()) {
			return fmt.Errorf("%s: allreduce of %d float32 gave %v, want %d", where, count, v[count-1], c.Size())
		}
	}
	return nil
}

func planAgreed(t *testing.T, n int, ops []planOp, opts []comm.Option, seed uint64) {
	cs := local(t, n, opts...)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var final []*comm.Communicator
	var joinErrs []error
	// The victim of a grow step dies once the n-1 others reached that
	// step: Die resets its links at once, which would otherwise make a
	// survivor still finishing the previous step's calls fail there, a
	// death inside a call that this test does not model.
	arrived := make([]chan struct{}, len(ops))
	left := make([]int, len(ops))
	for i := range ops {
		arrived[i], left[i] = make(chan struct{}), n-1
	}
	// A survivor's failure ends the replacements' waits too, so that a
	// Grow that admitted nobody fails the test at once.
	joinCtx, endJoins := context.WithCancel(context.Background())
	defer endJoins()
	// proc is one process from step on: orig is its index in cs, or -1
	// for a replacement.
	var proc func(ctx context.Context, cur *comm.Communicator, orig, step int) error
	proc = func(ctx context.Context, cur *comm.Communicator, orig, step int) error {
		defer func() {
			mu.Lock()
			final = append(final, cur)
			mu.Unlock()
		}()
		for ; step < len(ops); step++ {
			op := ops[step]
			where := fmt.Sprintf("step %d (%v)", step, op)
			if !op.grow {
				// Each rank's color from the seed, the step and its rank.
				color := int((seed>>(cur.Rank()%32))+uint64(step*7+cur.Rank())) % op.colors
				sub, err := cur.Split(ctx, color, cur.Rank())
				if err != nil {
					return fmt.Errorf("%s: split: %w", where, err)
				}
				if err := agreeOn(ctx, sub, where+", split"); err != nil {
					return err
				}
				if op.deep {
					subsub, err := sub.Split(ctx, sub.Rank()%2, -sub.Rank())
					if err != nil {
						return fmt.Errorf("%s: split again: %w", where, err)
					}
					if err := agreeOn(ctx, subsub, where+", split again"); err != nil {
						return err
					}
					if err := subsub.Close(); err != nil {
						return fmt.Errorf("%s: close: %w", where, err)
					}
				}
				if err := sub.Close(); err != nil {
					return fmt.Errorf("%s: close: %w", where, err)
				}
				if err := agreeOn(ctx, cur, where+", the parent"); err != nil {
					return err
				}
				continue
			}
			if orig == op.victim {
				select {
				case <-arrived[step]:
				case <-ctx.Done():
					return fmt.Errorf("%s: waiting for the others before dying: %w", where, context.Cause(ctx))
				}
				comm.Die(cs[orig])
				cur = nil
				return nil
			}
			mu.Lock()
			if left[step]--; left[step] == 0 {
				close(arrived[step])
			}
			mu.Unlock()
			err := cur.Barrier(ctx)
			if !errors.Is(err, comm.ErrPeerLost) && !errors.Is(err, comm.ErrBroken) {
				return fmt.Errorf("%s: barrier with a dead rank: %v, want ErrPeerLost or ErrBroken", where, err)
			}
			sc, err := cur.Shrink(ctx)
			if err != nil {
				return fmt.Errorf("%s: shrink: %w", where, err)
			}
			if err := agreeOn(ctx, sc, where+", shrunk"); err != nil {
				return err
			}
			if orig == 0 {
				cfg := comm.JobConfig(cs[op.victim])
				wg.Add(1)
				go func(step int) {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(joinCtx, time.Minute)
					defer cancel()
					jc, err := comm.New(ctx, cfg, opts...)
					if err == nil {
						err = agreeOn(ctx, jc, fmt.Sprintf("step %d, grown (the replacement)", step))
						if err == nil {
							err = proc(ctx, jc, -1, step+1)
						} else {
							jc.Close()
						}
					}
					if err != nil {
						mu.Lock()
						joinErrs = append(joinErrs, err)
						mu.Unlock()
					}
				}(step)
			}
			for {
				p := []int64{int64(sc.Pending())}
				if err := comm.AllReduce(ctx, sc, p, comm.Sum); err != nil {
					return fmt.Errorf("%s: waiting for the replacement: %w", where, err)
				}
				if p[0] > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			gc, err := sc.Grow(ctx)
			if err != nil {
				return fmt.Errorf("%s: grow: %w", where, err)
			}
			// The replacement was seen waiting (the sum of Pending was
			// positive), so Grow must have admitted it: a Grow that
			// returns sc itself leaves it waiting until its timeout.
			if gc.Size() != sc.Size()+1 {
				return fmt.Errorf("%s: grow: the grown communicator has %d ranks, want %d (the %d survivors and the replacement)", where, gc.Size(), sc.Size()+1, sc.Size())
			}
			// Nor may Pending still count the replacement admitted: the
			// next grow step would then grow before its replacement came.
			if p := gc.Pending(); p != 0 {
				return fmt.Errorf("%s: grow: Pending = %d right after the Grow that admitted the only replacement, want 0", where, p)
			}
			cur = gc
			if err := agreeOn(ctx, cur, where+", grown"); err != nil {
				return err
			}
		}
		return cur.Barrier(ctx)
	}
	errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		err := proc(ctx, c, c.Rank(), 0)
		if err != nil {
			endJoins()
		}
		return err
	})
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("process %d: %v", r, err)
		}
	}
	for _, err := range joinErrs {
		t.Errorf("replacement: %v", err)
	}
	closeAll(t, final)
}
