// Command elastic is a small data-parallel training loop that survives
// the loss of ranks: it fits a linear model to synthetic data by gradient
// descent, each rank taking its share of the samples, and when a rank dies
// the survivors shrink the communicator, agree on the model again and go
// on with the step they were at. Under grun --elastic MIN:MAX, grun
// starts a replacement for a rank that died; the ranks see it waiting
// (Pending), grow the communicator back at the next step boundary and
// broadcast the model and the step to it. comm.Elastic runs that loop:
// the program gives it the step and how to agree on the model. It ends by printing, on every rank, the loss and a checksum of
// the parameters, which must be the same on all.
//
//	go run ./cmd/grun -n 4 --elastic 2 go run ./examples/elastic
//	go run ./cmd/grun -n 4 --elastic 2 go run ./examples/elastic -kill 2@40,0@90
//	go build -o /tmp/elastic ./examples/elastic
//	go run ./cmd/grun -n 4 --elastic 2:4 /tmp/elastic -kill 2@40 -pace 5ms -final-size 4
//
// A job can also start small and grow as ranks join it from other
// terminals or hosts (grun --job-file and --join); the joiners take the
// model the same way:
//
//	grun -n 2 --elastic 2:4 --job-file job /tmp/elastic -pace 20ms -final-size 4
//	grun --join job /tmp/elastic -pace 20ms -final-size 4    # twice, elsewhere
//
// -kill R@S makes job rank R kill itself (SIGKILL, as the OOM killer
// would) at step S, to try it; -kill-in-shrink R makes rank R die while
// the survivors agree on who is left. -pace D makes each step last at
// least D, as a real step would, so that a replacement has time to start;
// -final-size N makes the ranks, once their steps are done, wait for
// replacements or joiners until the job has N ranks (up to -grow-wait).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/comm"
)

const (
	dim     = 16   // parameters of the model
	samples = 4096 // in the whole data set, shared out among the live ranks
)

func main() {
	steps := flag.Int("steps", 150, "gradient steps")
	lr := flag.Float64("lr", 0.1, "learning rate")
	kills := flag.String("kill", "", "R@S,...: job rank R kills itself at step S")
	inShrink := flag.Int("kill-in-shrink", -1, "job rank that kills itself while the survivors agree")
	pace := flag.Duration("pace", 0, "least time per step")
	finalSize := flag.Int("final-size", 0, "after the last step, wait for replacements until the job has this many ranks")
	growWait := flag.Duration("grow-wait", time.Minute, "how long -final-size waits")
	pad := flag.String("pad", "", "N,...: step s adds N[s % len] float64s to the gradient's allreduce, checked, so that the steps run the algorithms of larger buffers")
	flag.Parse()
	padding, err := parsePad(*pad)
	if err != nil {
		log.Fatal(err)
	}
	o := opts{steps: *steps, lr: *lr, kills: *kills, inShrink: *inShrink, pace: *pace, finalSize: *finalSize, growWait: *growWait, pad: padding}
	if err := run(o); err != nil {
		log.Fatal(err) // after run closed the communicator
	}
}

type opts struct {
	steps     int
	lr        float64
	kills     string
	inShrink  int
	pace      time.Duration
	finalSize int
	growWait  time.Duration
	pad       []int
}

func run(o opts) error {
	born := time.Now()
	steps, lr, inShrink := o.steps, o.lr, o.inShrink
	ctx := context.Background()
	c, err := comm.Init(ctx)
	if errors.Is(err, comm.ErrExcluded) {
		// A replacement that came too late: the job ended without it.
		fmt.Printf("elastic: a replacement left out: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	// The communicator Shrink or Grow returns owns the job's
	// connections; close the newest one (closing it closes the ones
	// before it).
	defer func() { c.Close() }()
	me := c.Rank() // the job rank: ranks in c change as it shrinks
	who := fmt.Sprintf("rank %d", me)
	killAt, err := parseKills(o.kills, me)
	if err != nil {
		return err
	}
	if c.Joined() {
		// A replacement: its rank is in the grown communicator, and
		// the kills were meant for the rank it replaces.
		who, killAt, inShrink = fmt.Sprintf("replacement %d", me), -1, -1
	}
	// Under torchrun --max_restarts, which restarts every rank when one
	// fails, a kill is for the first attempt only; the later ones say
	// when their first step is done, to compare with a shrink.
	restarted := os.Getenv("TORCHELASTIC_RESTART_COUNT")
	if restarted != "" && restarted != "0" {
		killAt = -1
	}
	x, y := data()
	w := make([]float64, dim)
	shrinks, grows := 0, 0
	start := time.Now()
	var waitEnd time.Time
	// comm.Elastic runs the steps, shrinks when a rank is lost, grows
	// when replacements wait, and calls agree to give every rank of a
	// new communicator rank 0's model and step.
	loop := comm.Elastic{
		Step: func(ctx context.Context, c *comm.Communicator, step int) (bool, error) {
			if step == killAt {
				die(me, fmt.Sprintf("at step %d", step))
			}
			t0 := time.Now()
			rate := lr
			giveUp := false
			if step >= steps {
				// Done: only waiting for replacements (a step that
				// changes nothing, while Run watches Pending).
				rate = 0
				if waitEnd.IsZero() {
					waitEnd = time.Now().Add(o.growWait)
				}
				giveUp = time.Now().After(waitEnd)
			}
			pad := 0
			if len(o.pad) > 0 {
				pad = o.pad[step%len(o.pad)]
			}
			if err := trainStep(ctx, c, x, y, w, rate, pad); err != nil {
				return false, err
			}
			if step == 0 && restarted != "" && restarted != "0" {
				fmt.Printf("elastic: rank %d: restart %s by torchrun, first step done (t=%d)\n", me, restarted, time.Now().UnixNano())
			}
			if c.Joined() && !born.IsZero() {
				fmt.Printf("elastic: %s: from its start to its first step on %d ranks: %v\n",
					who, c.Size(), time.Since(born).Round(time.Millisecond))
				born = time.Time{}
			}
			if giveUp {
				fmt.Printf("elastic: %s: no replacement came within -grow-wait %v\n", who, o.growWait)
				return true, nil
			}
			if d := o.pace - time.Since(t0); d > 0 {
				time.Sleep(d)
			}
			return step+1 >= steps && o.finalSize <= c.Size(), nil
		},
		Resync: func(ctx context.Context, c *comm.Communicator, step int) (int, error) {
			return agree(ctx, c, w, step)
		},
		Event: func(ev comm.ElasticEvent) {
			switch ev.Kind {
			case "lost":
				if me == inShrink {
					go func() {
						time.Sleep(time.Millisecond)
						die(me, "while the others shrink")
					}()
				}
			case "shrank":
				shrinks++
				fmt.Printf("elastic: %s: %d ranks left, going on from step %d (shrink and resync took %v; t=%d)\n",
					who, ev.Comm.Size(), ev.Step, ev.Took.Round(time.Millisecond), time.Now().UnixNano())
			case "grew":
				grows++
				fmt.Printf("elastic: %s: grew to %d ranks at step %d (grow and resync took %v)\n",
					who, ev.Comm.Size(), ev.Step, ev.Took.Round(time.Millisecond))
			case "joined":
				fmt.Printf("elastic: %s: joined %d ranks at step %d (Init waited %v)\n",
					who, ev.Comm.Size(), ev.Step, time.Since(born).Round(time.Millisecond))
			}
		},
	}
	c, _, err = loop.Run(ctx, c, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	sum := sha256.Sum256(bytesOf(w))
	grown := ""
	if grows > 0 {
		grown = fmt.Sprintf(" and %d grows", grows)
	}
	fmt.Printf("elastic: %s: %d of %d steps done on %d ranks after %d shrinks%s in %v, loss %.3g, params %x\n",
		who, steps, steps, c.Size(), shrinks, grown, time.Since(start).Round(time.Millisecond), loss(x, y, w), sum[:8])
	return nil
}

// die kills this process as the OOM killer would, saying when first (t,
// in Unix nanoseconds, is for measuring how long the others take to go
// on).
func die(me int, when string) {
	fmt.Printf("elastic: rank %d kills itself %s (t=%d)\n", me, when, time.Now().UnixNano())
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Kill() // SIGKILL on Unix
	}
	os.Exit(137)
}

// trainStep computes this rank's share of the gradient of the squared
// error, sums it with the others' and takes one step. The shares are
// the samples i with i % size == rank, so the live ranks always cover
// the whole data set, however many there are. pad more elements, each
// rank's 1, ride along and must sum to the rank count: a larger buffer,
// which runs another algorithm, checked.
func trainStep(ctx context.Context, c *comm.Communicator, x [][]float64, y []float64, w []float64, lr float64, pad int) error {
	g := make([]float64, dim+pad)
	for i := dim; i < len(g); i++ {
		g[i] = 1
	}
	for i := c.Rank(); i < samples; i += c.Size() {
		d := dot(x[i], w) - y[i]
		for k := range dim {
			g[k] += d * x[i][k]
		}
	}
	if err := comm.AllReduce(ctx, c, g, comm.Sum); err != nil {
		return err
	}
	for i := dim; i < len(g); i++ {
		if g[i] != float64(c.Size()) {
			return fmt.Errorf("allreduce of %d float64s on %d ranks: element %d is %v, want %d", len(g), c.Size(), i, g[i], c.Size())
		}
	}
	for k := range w {
		w[k] -= lr * g[k] / samples
	}
	return nil
}

// agree makes every rank of c hold rank 0's model and step.
func agree(ctx context.Context, c *comm.Communicator, w []float64, step int) (int, error) {
	if err := comm.Broadcast(ctx, c, w, 0); err != nil {
		return 0, err
	}
	if err := comm.BroadcastValue(ctx, c, &step, 0); err != nil {
		return 0, err
	}
	return step, nil
}

// data is the same synthetic data set on every rank: y = x·w* + noise.
func data() ([][]float64, []float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	truth := make([]float64, dim)
	for k := range truth {
		truth[k] = rng.NormFloat64()
	}
	x := make([][]float64, samples)
	y := make([]float64, samples)
	for i := range x {
		x[i] = make([]float64, dim)
		for k := range x[i] {
			x[i][k] = rng.NormFloat64()
		}
		y[i] = dot(x[i], truth) + 0.01*rng.NormFloat64()
	}
	return x, y
}

func loss(x [][]float64, y []float64, w []float64) float64 {
	var s float64
	for i := range x {
		d := dot(x[i], w) - y[i]
		s += d * d
	}
	return s / float64(len(x))
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func bytesOf(w []float64) []byte {
	b := make([]byte, 0, 8*len(w))
	for _, v := range w {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// parseKills returns the step at which job rank me is to kill itself,
// or -1.
// parsePad reads -pad: element counts, comma-separated.
func parsePad(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-pad %q: want element counts such as 4096,131072", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseKills(s string, me int) (int, error) {
	if s == "" {
		return -1, nil
	}
	for _, f := range strings.Split(s, ",") {
		r, st, ok := strings.Cut(f, "@")
		rank, err1 := strconv.Atoi(r)
		step, err2 := strconv.Atoi(st)
		if !ok || err1 != nil || err2 != nil || step < 0 {
			return 0, fmt.Errorf("-kill %q: want RANK@STEP,...", s)
		}
		if rank == me {
			return step, nil
		}
	}
	return -1, nil
}
