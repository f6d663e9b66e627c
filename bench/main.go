// Command collbench measures gocoll's collectives in the columns of
// nccl-tests, so its output lines up with ../shared/peers/run-mpi.sh:
//
//	go build -o collbench ./bench
//	grun -n 2 ./collbench -op allreduce -min 8 -max 64M
//
// Only rank 0 prints. time_us is the slowest rank's mean per iteration;
// algbw is size/time; busbw scales algbw by the nccl-tests factor of the
// collective (allreduce 2(n-1)/n, allgather and reducescatter (n-1)/n,
// broadcast 1) so that figures compare across rank counts.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/comm"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "collbench:", err)
		os.Exit(1)
	}
}

type sizeFlag int64

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

// Set accepts a byte count with an optional K, M or G suffix (powers of 1024).
func (s *sizeFlag) Set(v string) error {
	mult := int64(1)
	switch strings.ToUpper(v[len(v)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	if mult > 1 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a size (examples: 8, 64K, 16M)", v)
	}
	*s = sizeFlag(n * mult)
	return nil
}

func run() error {
	op := flag.String("op", "allreduce", "collective: allreduce, broadcast, allgather, reducescatter, barrier")
	minB, maxB := sizeFlag(8), sizeFlag(64<<20)
	flag.Var(&minB, "min", "smallest size in bytes (K/M/G suffixes)")
	flag.Var(&maxB, "max", "largest size in bytes (K/M/G suffixes)")
	factor := flag.Int("factor", 2, "size multiplier between rows")
	iters := flag.Int("iters", 0, "timed iterations per size (0: 200 below 1 MiB, 20 below 16 MiB, else 5, as run-mpi.sh)")
	warmup := flag.Int("warmup", 3, "untimed iterations per size")
	settle := flag.Int("settle", 3000, "untimed barriers before the sweep")
	check := flag.Bool("check", true, "verify every result")
	flag.Parse()
	if *factor < 2 || minB < 1 || maxB < minB {
		return fmt.Errorf("want 1 <= -min <= -max and -factor >= 2")
	}

	ctx := context.Background()
	c, err := comm.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	n := c.Size()
	busFactor := map[string]float64{
		"allreduce": 2 * float64(n-1) / float64(n), "broadcast": 1,
		"allgather": float64(n-1) / float64(n), "reducescatter": float64(n-1) / float64(n), "barrier": 0,
	}[*op]

	maxCount := int(maxB) / 4
	send := make([]float32, maxCount)
	recv := make([]float32, maxCount)
	// Fault the buffers in and finish the garbage collection their
	// allocation set off now, so neither lands in the first rows' timings.
	for i := range send {
		send[i], recv[i] = float32(c.Rank()+1), 0
	}
	runtime.GC()
	// The first few tens of milliseconds after Init run slow on a 2-core
	// machine (the freshly started runtimes of every rank are still busy),
	// so the sweep starts after a spell of untimed barriers (a fixed count:
	// every rank must make the same calls).
	for i := 0; i < *settle; i++ {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	if c.Rank() == 0 {
		fmt.Printf("%12s %12s %10s %10s %10s %6s\n", "size", "count", "time_us", "algbw", "busbw", "wrong")
	}
	for size := int(minB); size <= int(maxB); size *= *factor {
		count := size / 4
		if count == 0 && *op != "barrier" {
			continue
		}
		it := *iters
		if it == 0 {
			it = 200
			if size >= 1<<20 {
				it = 20
			}
			if size >= 16<<20 {
				it = 5
			}
		}
		var once func() error
		var verify func() int
		switch *op {
		case "allreduce":
			buf := send[:count]
			once = func() error { return comm.AllReduce(ctx, c, buf, comm.Sum) }
			want := float32(n * (n + 1) / 2)
			verify = func() int {
				for i := range buf {
					buf[i] = float32(c.Rank() + 1)
				}
				if err := once(); err != nil {
					return -1
				}
				return countWrong(buf, func(int) float32 { return want })
			}
		case "broadcast":
			buf := send[:count]
			once = func() error { return comm.Broadcast(ctx, c, buf, 0) }
			verify = func() int {
				for i := range buf {
					buf[i] = float32(c.Rank()*1000 + i%1000)
				}
				if err := once(); err != nil {
					return -1
				}
				return countWrong(buf, func(i int) float32 { return float32(i % 1000) })
			}
		case "allgather":
			per := count / n
			if per == 0 {
				continue
			}
			s, r := send[:per], recv[:per*n]
			once = func() error { return comm.AllGather(ctx, c, s, r) }
			verify = func() int {
				for i := range s {
					s[i] = float32(c.Rank())
				}
				if err := once(); err != nil {
					return -1
				}
				return countWrong(r, func(i int) float32 { return float32(i / per) })
			}
		case "reducescatter":
			per := count / n
			if per == 0 {
				continue
			}
			s, r := send[:per*n], recv[:per]
			once = func() error { return comm.ReduceScatter(ctx, c, s, r, comm.Sum) }
			want := float32(n * (n + 1) / 2)
			verify = func() int {
				for i := range s {
					s[i] = float32(c.Rank() + 1)
				}
				if err := once(); err != nil {
					return -1
				}
				return countWrong(r, func(int) float32 { return want })
			}
		case "barrier":
			once = func() error { return c.Barrier(ctx) }
			verify = func() int { return 0 }
		default:
			return fmt.Errorf("unknown -op %q", *op)
		}
		for w := 0; w < *warmup; w++ {
			if err := once(); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		start := time.Now()
		for i := 0; i < it; i++ {
			if err := once(); err != nil {
				return err
			}
		}
		mean := []float64{time.Since(start).Seconds() / float64(it)}
		if err := comm.AllReduce(ctx, c, mean, comm.Max); err != nil {
			return err
		}
		wrong := 0
		if *check {
			if wrong = verify(); wrong < 0 {
				wrong = max(count, 1)
			}
		}
		total := []float64{float64(wrong)}
		if err := comm.AllReduce(ctx, c, total, comm.Sum); err != nil {
			return err
		}
		if c.Rank() == 0 {
			algbw := float64(size) / mean[0] / 1e9
			fmt.Printf("%12d %12d %10.2f %10.3f %10.3f %6d\n", size, count, mean[0]*1e6, algbw, algbw*busFactor, int(math.Max(total[0], 0)))
		}
		if *op == "barrier" && size >= int(maxB) {
			break
		}
	}
	return nil
}

// countWrong counts the elements of b that differ from want(i); a failed
// collective counts as every element wrong.
func countWrong(b []float32, want func(int) float32) int {
	wrong := 0
	for i, v := range b {
		if v != want(i) {
			wrong++
		}
	}
	return wrong
}
