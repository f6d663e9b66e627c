// Command collcheck is the multi-process conformance check: started by
// grun, every rank runs each public collective for every element type and
// op at a few sizes, compares its result with a serial reference it
// computes itself (every rank's input is a known function of its rank),
// and checks that all ranks hold the same bytes. It prints one "ok" line
// per rank, or fails naming the first wrong element.
package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/gocoll/gocoll/comm"
)

var (
	dieRank  = flag.Int("die-rank", -1, "this rank exits with status 3 part-way (fault test)")
	dieAfter = flag.Int("die-after", 10, "checks run before -die-rank exits")
	dieHow   = flag.String("die-how", "exit", "how -die-rank dies: exit (status 3) or kill (SIGKILL to itself)")
	rounds   = flag.Int("rounds", 1, "run the whole check this many times (a long job, for tests that kill it)")
	addrs    = flag.Bool("addrs", false, "first print this rank's non-loopback IPv4 addresses (where did it run?)")
	hold     = flag.String("hold", "", "after Init, wait until this file exists before the checks (a test's stranger knocks meanwhile)")
	light    = flag.Bool("light", false, "check float32 alone (for tests about who may join, not about the data)")
	small    = flag.Bool("small", false, "every type at the small sizes only; the large sizes stay in the float32 checks (the quick check's cut)")
)

type checker struct {
	ctx    context.Context
	c      *comm.Communicator
	checks int
}

func main() {
	flag.Parse()
	ctx := context.Background()
	c, err := comm.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "collcheck:", err)
		os.Exit(1)
	}
	defer c.Close()
	if *addrs {
		fmt.Printf("rank %d addrs %s\n", c.Rank(), strings.Join(ipv4Addrs(), ","))
	}
	if *hold != "" {
		fmt.Printf("rank %d holding\n", c.Rank())
		for {
			if _, err := os.Stat(*hold); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	k := &checker{ctx: ctx, c: c}
	for i := 0; i < *rounds; i++ {
		if err := k.all(); err != nil {
			fmt.Fprintf(os.Stderr, "collcheck: rank %d: %v\n", c.Rank(), err)
			os.Exit(1)
		}
	}
	fmt.Printf("rank %d of %d: ok, %d checks\n", c.Rank(), c.Size(), k.checks)
}

// ipv4Addrs lists the host's IPv4 addresses but loopback ones: in a test
// that runs ranks in network namespaces, they say which namespace.
func ipv4Addrs() []string {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var out []string
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}

func (k *checker) tick() {
	k.checks++
	if k.c.Rank() == *dieRank && k.checks == *dieAfter {
		if *dieHow == "kill" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		os.Exit(3)
	}
}

// sizes: empty, one element, a prime, and one that spans several transport
// slots and is not a multiple of the rank count.
var sizes = []int{0, 1, 1009, 300_007}

func (k *checker) all() error {
	if *light {
		if err := run[float32](k, true); err != nil {
			return err
		}
		return k.c.Barrier(k.ctx)
	}
	for _, err := range []error{
		run[float32](k, true), run[float64](k, true),
		run[int8](k, false), run[int16](k, false), run[int32](k, false), run[int64](k, false),
		run[uint8](k, false), run[uint16](k, false), run[uint32](k, false), run[uint64](k, false),
		run[comm.Float16](k, true), run[comm.BFloat16](k, true),
		k.randomFloats(),
		k.registered(),
		k.c.Barrier(k.ctx),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// conv turns a small integer into T exactly (all values used are exact in
// every type, including float16 and bfloat16).
func conv[T comm.Element](v int) T {
	var z T
	switch any(z).(type) {
	case comm.Float16:
		return any(comm.Float16Of(float32(v))).(T)
	case comm.BFloat16:
		return any(comm.BFloat16Of(float32(v))).(T)
	case float32:
		return any(float32(v)).(T)
	case float64:
		return any(float64(v)).(T)
	case int8:
		return any(int8(v)).(T)
	case int16:
		return any(int16(v)).(T)
	case int32:
		return any(int32(v)).(T)
	case int64:
		return any(int64(v)).(T)
	case uint8:
		return any(uint8(v)).(T)
	case uint16:
		return any(uint16(v)).(T)
	case uint32:
		return any(uint32(v)).(T)
	default:
		return any(uint64(v)).(T)
	}
}

// input is rank r's element i: small, positive, varied across ranks.
func input(r, i int) int { return 1 + (r*7+i*3)%5 }

func run[T comm.Element](k *checker, float bool) error {
	c, n, me := k.c, k.c.Size(), k.c.Rank()
	name := fmt.Sprintf("%T", *new(T))
	ops := []comm.Op{comm.Sum, comm.Prod, comm.Min, comm.Max}
	if float {
		ops = append(ops, comm.Avg)
	}
	for _, count := range sizes {
		if *small && count > 1009 {
			break
		}
		for _, op := range ops {
			if op == comm.Prod && count > 1009 {
				continue // products of many ranks leave the exact range; small sizes cover Prod
			}
			buf := make([]T, count)
			want := make([]T, count)
			for i := range buf {
				buf[i] = conv[T](input(me, i))
				acc := input(0, i)
				for r := 1; r < n; r++ {
					v := input(r, i)
					switch op {
					case comm.Sum, comm.Avg:
						acc += v
					case comm.Prod:
						acc *= v
					case comm.Min:
						acc = min(acc, v)
					case comm.Max:
						acc = max(acc, v)
					}
				}
				want[i] = conv[T](acc)
			}
			if op == comm.Avg {
				// The sum of small integers is exact; dividing it by n once
				// is what every rank must do, so compare against that.
				for i := range want {
					want[i] = avg(want[i], n)
				}
			}
			if err := comm.AllReduce(k.ctx, c, buf, op); err != nil {
				return fmt.Errorf("allreduce %s %v x%d: %w", name, op, count, err)
			}
			if err := same(buf, want); err != nil {
				return fmt.Errorf("allreduce %s %v x%d: %w", name, op, count, err)
			}
			k.tick()
		}
		for root := 0; root < n; root++ {
			buf := make([]T, count)
			want := make([]T, count)
			for i := range buf {
				buf[i] = conv[T](input(me, i))
				want[i] = conv[T](input(root, i))
			}
			if err := comm.Broadcast(k.ctx, c, buf, root); err != nil {
				return fmt.Errorf("broadcast %s x%d root %d: %w", name, count, root, err)
			}
			if err := same(buf, want); err != nil {
				return fmt.Errorf("broadcast %s x%d root %d: %w", name, count, root, err)
			}
			k.tick()
		}
		send := make([]T, count)
		recv := make([]T, count*n)
		want := make([]T, count*n)
		for i := range send {
			send[i] = conv[T](input(me, i))
			for r := 0; r < n; r++ {
				want[r*count+i] = conv[T](input(r, i))
			}
		}
		if err := comm.AllGather(k.ctx, c, send, recv); err != nil {
			return fmt.Errorf("allgather %s x%d: %w", name, count, err)
		}
		if err := same(recv, want); err != nil {
			return fmt.Errorf("allgather %s x%d: %w", name, count, err)
		}
		k.tick()
		// Reduce-scatter: rank r's send is recv-sized blocks; block b of the
		// sum lands on rank b.
		rsSend := make([]T, count*n)
		rsRecv := make([]T, count)
		rsWant := make([]T, count)
		for i := range rsSend {
			rsSend[i] = conv[T](input(me, i))
		}
		for i := range rsWant {
			acc := 0
			for r := 0; r < n; r++ {
				acc += input(r, me*count+i)
			}
			rsWant[i] = conv[T](acc)
		}
		if err := comm.ReduceScatter(k.ctx, c, rsSend, rsRecv, comm.Sum); err != nil {
			return fmt.Errorf("reducescatter %s x%d: %w", name, count, err)
		}
		if err := same(rsRecv, rsWant); err != nil {
			return fmt.Errorf("reducescatter %s x%d: %w", name, count, err)
		}
		k.tick()
	}
	return nil
}

func avg[T comm.Element](sum T, n int) T {
	switch v := any(sum).(type) {
	case float32:
		return any(v / float32(n)).(T)
	case float64:
		return any(v / float64(n)).(T)
	case comm.Float16:
		return any(comm.Float16Of(v.Float32() / float32(n))).(T)
	case comm.BFloat16:
		return any(comm.BFloat16Of(v.Float32() / float32(n))).(T)
	}
	return sum
}

func same[T comm.Element](got, want []T) error {
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("element %d of %d is %v, want %v", i, len(got), got[i], want[i])
		}
	}
	return nil
}

// randomFloats allreduces values whose sum depends on the order of the
// additions, then checks that every rank ended with the same bytes (by
// gathering a hash of each rank's result) and that the result is within
// the documented tolerance of a float64 reference.
func (k *checker) randomFloats() error {
	c, n, me := k.c, k.c.Size(), k.c.Rank()
	const count = 1 << 18
	val := func(r, i int) float32 {
		x := uint32(r*2654435761 + i*40503 + 12345)
		x ^= x >> 13
		x *= 0x5bd1e995
		x ^= x >> 15
		return float32(int32(x)) / float32(1<<31) * 1000
	}
	buf := make([]float32, count)
	for i := range buf {
		buf[i] = val(me, i)
	}
	if err := comm.AllReduce(k.ctx, c, buf, comm.Sum); err != nil {
		return fmt.Errorf("allreduce random float32: %w", err)
	}
	var maxErr float64
	for i := range buf {
		var ref, mag float64
		for r := 0; r < n; r++ {
			ref += float64(val(r, i))
			mag += math.Abs(float64(val(r, i)))
		}
		// Documented bound: (n-1) float32 roundings of partial sums, each
		// at most half an ulp of a partial-sum magnitude <= sum |x_r|.
		bound := float64(n-1) * mag * 0x1p-24
		if e := math.Abs(float64(buf[i]) - ref); e > bound {
			return fmt.Errorf("random float32 element %d: %v, reference %v: error %g above bound %g", i, buf[i], ref, e, bound)
		} else if e > maxErr {
			maxErr = e
		}
	}
	h := fnv.New64a()
	h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 4*len(buf)))
	sums := make([]uint64, n)
	if err := comm.AllGather(k.ctx, c, []uint64{h.Sum64()}, sums); err != nil {
		return fmt.Errorf("allgather hashes: %w", err)
	}
	for r, s := range sums {
		if s != sums[0] {
			return fmt.Errorf("random float32 allreduce: rank %d's result differs from rank 0's (hash %x vs %x): ranks must end bitwise identical", r, s, sums[0])
		}
	}
	k.tick()
	return nil
}

// registered runs allreduce, broadcast and allgather on registered
// buffers (over RDMA, the device reads them in place; over shm, the
// ranks read each other's and the allreduce takes the single copy; over
// TCP registering does nothing), large enough that their
// messages pass the zero-copy minimum, then once more after deregistering.
func (k *checker) registered() error {
	c, n, me := k.c, k.c.Size(), k.c.Rank()
	const count = 3 << 17 // 1.5 MiB of float32: several slots, odd per-rank chunks
	buf := make([]float32, count)
	all := make([]float32, count*n)
	regs := make([]*comm.Registration, 0, 2)
	for _, b := range [][]float32{buf, all} {
		r, err := comm.Register(k.ctx, c, b)
		if err != nil {
			return fmt.Errorf("register %d float32: %w", len(b), err)
		}
		regs = append(regs, r)
	}
	for round := 0; round < 2; round++ {
		for i := range buf {
			buf[i] = float32(input(me, i))
		}
		if err := comm.AllReduce(k.ctx, c, buf, comm.Sum); err != nil {
			return fmt.Errorf("registered allreduce (round %d): %w", round, err)
		}
		for i, v := range buf {
			want := 0
			for r := 0; r < n; r++ {
				want += input(r, i)
			}
			if v != float32(want) {
				return fmt.Errorf("registered allreduce (round %d): element %d is %v, want %v", round, i, v, want)
			}
		}
		k.tick()
		root := (round + 1) % n
		for i := range buf {
			buf[i] = float32(input(me, i))
		}
		if err := comm.Broadcast(k.ctx, c, buf, root); err != nil {
			return fmt.Errorf("registered broadcast (round %d): %w", round, err)
		}
		for i, v := range buf {
			if v != float32(input(root, i)) {
				return fmt.Errorf("registered broadcast (round %d): element %d is %v, want %v", round, i, v, input(root, i))
			}
		}
		k.tick()
		for i := range buf {
			buf[i] = float32(input(me, i))
		}
		if err := comm.AllGather(k.ctx, c, buf, all); err != nil {
			return fmt.Errorf("registered allgather (round %d): %w", round, err)
		}
		for i, v := range all {
			if r := i / count; v != float32(input(r, i%count)) {
				return fmt.Errorf("registered allgather (round %d): element %d is %v, want %v", round, i, v, input(r, i%count))
			}
		}
		k.tick()
		// The second round runs on the same buffers, deregistered.
		for _, r := range regs {
			if err := r.Close(); err != nil {
				return fmt.Errorf("deregister: %w", err)
			}
		}
	}
	return nil
}
