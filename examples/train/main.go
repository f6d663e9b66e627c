// Command train is a small data-parallel training program: a multi-layer
// perceptron fitted to synthetic data by minibatch gradient descent, each
// rank computing the gradient of its share of every batch. The gradients
// are averaged by a comm.Bucketer while the backward pass goes on (the
// output layer's bucket goes out while the hidden layers' gradients are
// computed); rank 0 checkpoints the model, and a restarted job resumes
// from the checkpoint; comm.Elastic shrinks the job when a rank dies and
// grows it when a replacement comes (under grun --elastic). At the end
// every rank checks that the parameters agree, bit for bit, on every rank,
// and rank 0 that they agree with a run of the same steps in one process
// (to rounding: the ranks add their shares in another order), and prints
// the loss curve's last line and ok.
//
//	go run ./cmd/grun -n 4 go run ./examples/train
//	go run ./examples/train                       # one rank, no launcher
//	go run ./cmd/grun -n 4 --elastic 2 go run ./examples/train -kill 2@100
//	go run ./cmd/grun -n 2 go run ./examples/train -ckpt /tmp/mlp.ckpt -steps 100
//	go run ./cmd/grun -n 2 go run ./examples/train -ckpt /tmp/mlp.ckpt -steps 300   # resumes at 100
//
// -bench times the steps instead (median, min and max step time, rank 0),
// with the bucketer's overlap or, with -overlap=false, with one
// AllReduceMany after the whole backward pass:
//
//	go run ./cmd/grun -n 2 go run ./examples/train -bench -hidden 512 -layers 4 -batch 32 -steps 40
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
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/comm"
)

type opts struct {
	steps, batch, samples   int
	dim, hidden, layers     int
	lr                      float64
	bucketBytes             int
	overlap, check, verbose bool
	bench                   bool
	ckpt                    string
	ckptEvery               int
	kill                    string
}

func main() {
	var o opts
	flag.IntVar(&o.steps, "steps", 300, "gradient steps in all (a resumed run counts those before it)")
	flag.IntVar(&o.batch, "batch", 256, "samples per step, shared out among the ranks")
	flag.IntVar(&o.samples, "samples", 4096, "samples in the data set")
	flag.IntVar(&o.dim, "dim", 8, "input features")
	flag.IntVar(&o.hidden, "hidden", 32, "units per hidden layer")
	flag.IntVar(&o.layers, "layers", 2, "hidden layers")
	flag.Float64Var(&o.lr, "lr", 0.05, "learning rate")
	flag.IntVar(&o.bucketBytes, "bucket-bytes", 0, "gradient bucket size (0: comm.DefaultBucketBytes)")
	flag.BoolVar(&o.overlap, "overlap", true, "average gradients with the bucketer during the backward pass (false: one AllReduceMany after it)")
	flag.BoolVar(&o.check, "check", true, "check the parameters against a run in one process at the end")
	flag.BoolVar(&o.verbose, "v", false, "print the loss every 50 steps")
	flag.BoolVar(&o.bench, "bench", false, "print the step time's median, min and max instead of checking")
	flag.StringVar(&o.ckpt, "ckpt", "", "checkpoint file: resume from it if it exists, and rank 0 writes it every -ckpt-every steps and at the end")
	flag.IntVar(&o.ckptEvery, "ckpt-every", 50, "steps between checkpoints")
	flag.StringVar(&o.kill, "kill", "", "R@S,...: job rank R kills itself (SIGKILL) at step S")
	flag.Parse()
	if err := run(o); err != nil {
		log.Fatal(err) // after run closed the communicator
	}
}

// trainer is one rank's state: the model, the step it is at, and the
// gradient buffers the bucketer averages.
type trainer struct {
	o      opts
	x      [][]float64
	y      []float64
	m      *model
	grads  []float64
	gw, gb [][]float64
	wk     work
	b      *comm.Bucketer[float64]
	bc     *comm.Communicator // the communicator b was made for
	times  []time.Duration
}

func run(o opts) error {
	ctx := context.Background()
	c, err := comm.Init(ctx)
	if errors.Is(err, comm.ErrExcluded) {
		fmt.Printf("train: a replacement left out: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { c.Close() }()
	me := c.Rank()
	killAt, err := parseKills(o.kill, me)
	if err != nil {
		return err
	}
	if c.Joined() {
		killAt = -1 // the kills were for the rank it replaces
	}
	t := &trainer{o: o, m: newModel(o.dim, o.hidden, o.layers, 1)}
	t.x, t.y = data(o.samples, o.dim)
	t.grads = make([]float64, len(t.m.params))
	t.gw, t.gb = t.m.views(t.grads)

	step := 0
	if !c.Joined() {
		// A replacement takes the state in Elastic's first Resync
		// instead, from ranks that read the checkpoint long ago.
		if step, err = t.resume(ctx, c); err != nil {
			return err
		}
		if step > 0 && me == 0 {
			fmt.Printf("train: resumed from %s at step %d\n", o.ckpt, step)
		}
	}
	shrinks, grows := 0, 0
	loop := comm.Elastic{
		Step: func(ctx context.Context, c *comm.Communicator, step int) (bool, error) {
			if step >= o.steps {
				return true, nil
			}
			if step == killAt {
				fmt.Printf("train: rank %d kills itself at step %d\n", me, step)
				p, _ := os.FindProcess(os.Getpid())
				p.Kill()
				os.Exit(137)
			}
			if err := t.step(ctx, c, step); err != nil {
				return false, err
			}
			if o.verbose && c.Rank() == 0 && (step+1)%50 == 0 {
				fmt.Printf("train: step %d loss %.5f\n", step+1, t.m.loss(t.x, t.y))
			}
			if o.ckpt != "" && c.Rank() == 0 && ((step+1)%o.ckptEvery == 0 || step+1 == o.steps) {
				if err := t.save(step + 1); err != nil {
					return false, err
				}
			}
			return step+1 >= o.steps, nil
		},
		Resync: func(ctx context.Context, c *comm.Communicator, step int) (int, error) {
			if err := comm.Broadcast(ctx, c, t.m.params, 0); err != nil {
				return 0, err
			}
			return step, comm.BroadcastValue(ctx, c, &step, 0)
		},
		Event: func(ev comm.ElasticEvent) {
			switch ev.Kind {
			case "shrank":
				shrinks++
				fmt.Printf("train: rank %d: %d ranks left, going on from step %d\n", me, ev.Comm.Size(), ev.Step)
			case "grew":
				grows++
				if ev.Comm.Rank() == 0 {
					fmt.Printf("train: grew to %d ranks at step %d\n", ev.Comm.Size(), ev.Step)
				}
			case "joined":
				fmt.Printf("train: replacement joined %d ranks at step %d\n", ev.Comm.Size(), ev.Step)
			}
		},
	}
	c, step, err = loop.Run(ctx, c, step)
	if err != nil {
		return fmt.Errorf("rank %d: %w", me, err)
	}
	if o.bench {
		return t.report(c)
	}
	return t.finish(ctx, c, step)
}

// step runs one step: this rank's share of the batch, the gradient
// averaged with the bucketer as the backward pass completes each layer
// (or after it, with one AllReduceMany), and the update.
func (t *trainer) step(ctx context.Context, c *comm.Communicator, step int) error {
	start := time.Now()
	if t.bc != c {
		// A new communicator (Shrink or Grow): a new bucketer on it.
		b, err := comm.NewBucketer(c, t.m.backwardOrder(t.gw, t.gb), comm.BucketOptions{BucketBytes: t.o.bucketBytes, Sum: true})
		if err != nil {
			return err
		}
		t.b, t.bc = b, c
	}
	var idx []int
	for j := c.Rank(); j < t.o.batch; j += c.Size() {
		idx = append(idx, (step*t.o.batch+j)%t.o.samples)
	}
	clear(t.grads)
	L := len(t.m.w)
	var readyErr error
	ready := func(l int) {
		if !t.o.overlap {
			return
		}
		// Layer l's weights and biases are tensors 2(L-1-l) and the next.
		for _, i := range []int{2 * (L - 1 - l), 2*(L-1-l) + 1} {
			if err := t.b.MarkReady(ctx, i); err != nil && readyErr == nil {
				readyErr = err
			}
		}
	}
	t.m.gradient(t.x, t.y, idx, t.o.batch, t.gw, t.gb, &t.wk, ready)
	if readyErr != nil {
		return readyErr
	}
	var err error
	if t.o.overlap {
		err = t.b.Wait(ctx)
	} else {
		err = comm.AllReduceMany(ctx, c, t.m.backwardOrder(t.gw, t.gb), comm.Sum)
	}
	if err != nil {
		return err
	}
	for i, g := range t.grads {
		t.m.params[i] -= t.o.lr * g
	}
	t.times = append(t.times, time.Since(start))
	return nil
}

// finish checks that every rank holds the same parameters, bit for bit,
// and rank 0 that they are those of the same steps run in one process,
// to rounding; rank 0 prints the loss and ok.
func (t *trainer) finish(ctx context.Context, c *comm.Communicator, step int) error {
	sum := sha256.Sum256(bytesOf(t.m.params))
	h := binary.LittleEndian.Uint64(sum[:])
	lo, hi := h, h
	if err := comm.AllReduceValues(ctx, c, comm.Min, &lo); err != nil {
		return err
	}
	if err := comm.AllReduceValues(ctx, c, comm.Max, &hi); err != nil {
		return err
	}
	if lo != hi {
		return fmt.Errorf("rank %d: the ranks' parameters differ (checksums from %x to %x)", c.Rank(), lo, hi)
	}
	if c.Rank() != 0 {
		return nil
	}
	diff := "unchecked"
	if t.o.check {
		ref := t.single(step)
		worst := 0.0
		for i, p := range t.m.params {
			worst = max(worst, math.Abs(p-ref[i])/max(1, math.Abs(ref[i])))
		}
		if worst > 1e-9 || math.IsNaN(worst) {
			return fmt.Errorf("the parameters differ from one process's by %.3g (relative), more than rounding", worst)
		}
		diff = fmt.Sprintf("%.2g", worst)
	}
	fmt.Printf("train: step %d of %d, loss %.5f, %d ranks, parameters agree on every rank (%x), with one process to %s\n",
		step, t.o.steps, t.m.loss(t.x, t.y), c.Size(), sum[:6], diff)
	fmt.Println("ok")
	return nil
}

// single runs the steps in one process, from the same start, and
// returns its parameters.
func (t *trainer) single(steps int) []float64 {
	m := newModel(t.o.dim, t.o.hidden, t.o.layers, 1)
	grads := make([]float64, len(m.params))
	gw, gb := m.views(grads)
	var wk work
	idx := make([]int, t.o.batch)
	for step := range steps {
		for j := range idx {
			idx[j] = (step*t.o.batch + j) % t.o.samples
		}
		clear(grads)
		m.gradient(t.x, t.y, idx, t.o.batch, gw, gb, &wk, func(int) {})
		for i, g := range grads {
			m.params[i] -= t.o.lr * g
		}
	}
	return m.params
}

// report prints, on rank 0, the step time's median, min and max, the
// first steps left out as warm-up.
func (t *trainer) report(c *comm.Communicator) error {
	if c.Rank() != 0 {
		return nil
	}
	ts := slices.Clone(t.times[min(3, len(t.times)):])
	if len(ts) == 0 {
		return errors.New("-bench: no steps timed (more than 3 steps needed)")
	}
	slices.Sort(ts)
	mode := "overlap (bucketer)"
	if !t.o.overlap {
		mode = "no overlap (one AllReduceMany)"
	}
	fmt.Printf("train bench: %d ranks, %d parameters, %s: step median %v min %v max %v over %d steps\n",
		c.Size(), len(t.m.params), mode, ts[len(ts)/2].Round(10*time.Microsecond), ts[0].Round(10*time.Microsecond), ts[len(ts)-1].Round(10*time.Microsecond), len(ts))
	return nil
}

const ckptMagic = "gocoll-train-v1\n"

// resume takes the checkpoint rank 0 reads, if there is one, to every
// rank, and returns its step (0 without one).
func (t *trainer) resume(ctx context.Context, c *comm.Communicator) (int, error) {
	if t.o.ckpt == "" {
		return 0, comm.Broadcast(ctx, c, t.m.params, 0)
	}
	var b []byte
	if c.Rank() == 0 {
		var err error
		b, err = os.ReadFile(t.o.ckpt)
		if errors.Is(err, os.ErrNotExist) {
			b = nil
		} else if err != nil {
			return 0, err
		}
	}
	b, err := comm.BroadcastBytes(ctx, c, b, 0)
	if err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, nil
	}
	want := len(ckptMagic) + 8 + 8*len(t.m.params)
	if len(b) != want || string(b[:len(ckptMagic)]) != ckptMagic {
		return 0, fmt.Errorf("checkpoint %s: %d bytes, want %d of a model of %d parameters (another -hidden or -layers?)", t.o.ckpt, len(b), want, len(t.m.params))
	}
	b = b[len(ckptMagic):]
	step := int(binary.LittleEndian.Uint64(b))
	for i := range t.m.params {
		t.m.params[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8+8*i:]))
	}
	return step, nil
}

// save writes the checkpoint, whole or not at all (a new file renamed
// over the old).
func (t *trainer) save(step int) error {
	b := append([]byte(ckptMagic), binary.LittleEndian.AppendUint64(nil, uint64(step))...)
	b = append(b, bytesOf(t.m.params)...)
	tmp := t.o.ckpt + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, t.o.ckpt)
}

func bytesOf(p []float64) []byte {
	b := make([]byte, 0, 8*len(p))
	for _, v := range p {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// parseKills returns the step at which job rank me is to kill itself,
// or -1.
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
