package comm_test

import (
	"context"
	"math"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/testmode"
)

// TestHierPipeHosts runs large allreduces on fake hosts of real shared
// memory and TCP links (GOCOLL_FAKE_HOSTS: 2x2, 3+1 and 1+4), at a size
// that is no whole number of the plan's stages: the pipelined
// hierarchical allreduce must be the one chosen, and logged with its
// reason; its sums of integers must be exact, and its sums of random
// floats bitwise those of the phase-by-phase path forced with
// GOCOLL_ALGO (allreduce=hier), on every rank.
func TestHierPipeHosts(t *testing.T) {
	const count = 5<<18 + 13 // float32: 2.5 MiB and a bit, over two stages of 4 slots
	layouts := []string{"2,2", "3,1", "1,4"}
	if testmode.Quick() {
		layouts = layouts[1:2] // the uneven one; the full run has all three
	}
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			t.Setenv("GOCOLL_FAKE_HOSTS", layout)
			n := 4
			if layout == "1,4" {
				n = 5
			}
			rng := rand.New(rand.NewSource(int64(len(layout) + n)))
			exact := make([][]float32, n)
			random := make([][]float32, n)
			for r := range n {
				exact[r], random[r] = make([]float32, count), make([]float32, count)
				for i := range count {
					exact[r][i] = float32((r*31+i)%1000 - 500)
					random[r][i] = float32(math.Ldexp(rng.Float64()*2-1, rng.Intn(12)-6))
				}
			}
			pipe, logs := newLocalLogged(t, n)
			gotExact := allReduceCopies(t, pipe, exact)
			gotPipe := allReduceCopies(t, pipe, random)
			if out := logs.String(); !strings.Contains(out, "algo=hierpipe") || !strings.Contains(out, "overlaps the reduce within hosts") {
				t.Errorf("the log does not show the pipelined hierarchical allreduce and why:\n%s", out)
			}
			old, logs := newLocalLogged(t, n, comm.WithAlgorithm("allreduce=hier"))
			gotOld := allReduceCopies(t, old, random)
			if out := logs.String(); strings.Contains(out, "algo=hierpipe") {
				t.Errorf("allreduce=hier forced, but the pipelined path ran:\n%s", out)
			}
			for r := range n {
				for i := range count {
					var want float32
					for q := range n {
						want += exact[q][i]
					}
					if gotExact[r][i] != want {
						t.Fatalf("rank %d, element %d: %v, want %v", r, i, gotExact[r][i], want)
					}
					if a, b := math.Float32bits(gotPipe[r][i]), math.Float32bits(gotOld[r][i]); a != b || a != math.Float32bits(gotPipe[0][i]) {
						t.Fatalf("rank %d, element %d: pipelined %08x (rank 0: %08x), phase by phase %08x", r, i, a, math.Float32bits(gotPipe[0][i]), b)
					}
				}
			}
		})
	}
}

// allReduceCopies sums copies of ins on cs, one per rank, and returns them.
func allReduceCopies(t *testing.T, cs []*comm.Communicator, ins [][]float32) [][]float32 {
	t.Helper()
	out := make([][]float32, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		out[r] = append([]float32(nil), ins[r]...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = comm.AllReduce(context.Background(), c, out[r], comm.Sum)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}
