package comm_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/exactref"
	"github.com/gocoll/gocoll/internal/testmode"
)

// exactF32 draws n ranks' adversarial float32 inputs of count elements
// and the reference sum of each element.
func exactF32(n, count int, seed int64) (ins [][]float32, want []float32) {
	rng := rand.New(rand.NewSource(seed))
	ins = make([][]float32, n)
	for q := range ins {
		ins[q] = make([]float32, count)
	}
	want = make([]float32, count)
	xs := make([]uint64, 0, n)
	for i := range want {
		xs = xs[:0]
		for q := range ins {
			v := exactref.Adversarial(rng, exactref.Float32, xs)
			xs = append(xs, v)
			ins[q][i] = math.Float32frombits(uint32(v))
		}
		want[i] = math.Float32frombits(uint32(exactref.Sum(exactref.Float32, xs)))
	}
	return ins, want
}

// sameBits reports the first element where got and want differ in bits.
func sameBits(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Errorf("element %d: got %#x (%v), want %#x (%v)", i, math.Float32bits(got[i]), got[i], math.Float32bits(want[i]), want[i])
		}
	}
	return nil
}

// TestExactSumEveryForm runs ExactSum through every call that takes an
// op, over TCP, shared memory and both (two fake hosts), with the
// algorithms chosen and forced, and compares the bits with the math/big
// reference.
func TestExactSumEveryForm(t *testing.T) {
	setups := []struct {
		name string
		opts []comm.Option
	}{
		{"tcp", []comm.Option{comm.WithTransport("tcp")}},
		{"shm", []comm.Option{comm.WithTransport("shm")}},
		{"shm+tcp", []comm.Option{comm.WithFakeHosts(2)}},
		{"tcp/forced", []comm.Option{comm.WithTransport("tcp"), comm.WithAlgorithm("allreduce=rd,reducescatter=ring")}},
		{"shm+tcp/forced", []comm.Option{comm.WithFakeHosts(2), comm.WithAlgorithm("allreduce=tree")}},
	}
	counts := []int{1, 3, 4, 8}
	if testmode.Quick() {
		counts = counts[:2] // the full run has the power of two and the 8 ranks
	}
	for _, n := range counts {
		for _, s := range setups {
			if n == 1 && s.name != "tcp" {
				continue
			}
			t.Run(fmt.Sprintf("%s/n=%d", s.name, n), func(t *testing.T) {
				cs := local(t, n, s.opts...)
				const count = 1031
				ins, want := exactF32(n, count, int64(n))
				mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
					r := c.Rank()
					check := func(what string, got, want []float32) error {
						if err := sameBits(got, want); err != nil {
							return fmt.Errorf("%s: %w", what, err)
						}
						return nil
					}
					buf := append([]float32(nil), ins[r]...)
					if err := comm.AllReduce(ctx, c, buf, comm.ExactSum); err != nil {
						return err
					}
					if err := check("AllReduce", buf, want); err != nil {
						return err
					}
					buf = append(buf[:0], ins[r]...)
					if err := comm.AllReduceAsync(ctx, c, buf, comm.ExactSum).Wait(ctx); err != nil {
						return err
					}
					if err := check("AllReduceAsync", buf, want); err != nil {
						return err
					}
					a, b := append([]float32(nil), ins[r][:500]...), append([]float32(nil), ins[r][500:]...)
					if err := comm.AllReduceMany(ctx, c, [][]float32{a, b}, comm.ExactSum); err != nil {
						return err
					}
					if err := check("AllReduceMany", append(a, b...), want); err != nil {
						return err
					}
					x, y := ins[r][0], ins[r][1]
					if err := comm.AllReduceValues(ctx, c, comm.ExactSum, &x, &y); err != nil {
						return err
					}
					if err := check("AllReduceValues", []float32{x, y}, want[:2]); err != nil {
						return err
					}
					block := count / n
					recv := make([]float32, block)
					if err := comm.ReduceScatter(ctx, c, ins[r][:n*block], recv, comm.ExactSum); err != nil {
						return err
					}
					if err := check("ReduceScatter", recv, want[r*block:(r+1)*block]); err != nil {
						return err
					}
					counts := make([]int, n)
					off := 0
					for q := range counts {
						counts[q] = (q*53 + 11) % 300
						if q < r {
							off += counts[q]
						}
					}
					total := 0
					for _, k := range counts {
						total += k
					}
					recv = make([]float32, counts[r])
					if err := comm.ReduceScatterVAsync(ctx, c, ins[r][:total], recv, counts, comm.ExactSum).Wait(ctx); err != nil {
						return err
					}
					if err := check("ReduceScatterVAsync", recv, want[off:off+counts[r]]); err != nil {
						return err
					}
					out := make([]float32, count)
					root := n - 1
					if err := comm.Reduce(ctx, c, ins[r], out, comm.ExactSum, root); err != nil {
						return err
					}
					if r == root {
						return check("Reduce", out, want)
					}
					return nil
				})
			})
		}
	}
}

// TestExactSumIntegersAreSum: on integers ExactSum is Sum, wrap-around
// included, and each rank's Sum and ExactSum calls agree.
func TestExactSumIntegersAreSum(t *testing.T) {
	cs := local(t, 3)
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		buf := []int8{100, -7, int8(c.Rank())}
		if err := comm.AllReduce(ctx, c, buf, comm.ExactSum); err != nil {
			return err
		}
		if want := []int8{44, -21, 3}; fmt.Sprint(buf) != fmt.Sprint(want) {
			return fmt.Errorf("got %v, want %v", buf, want)
		}
		return nil
	})
}

// TestExactSumHalf: Float16 and BFloat16 through AllReduce, against the
// reference, on 5 ranks.
func TestExactSumHalf(t *testing.T) {
	cs := local(t, 5)
	const count = 777
	for _, f := range []struct {
		name string
		fmt  exactref.Format
	}{{"float16", exactref.Float16}, {"bfloat16", exactref.BFloat16}} {
		rng := rand.New(rand.NewSource(5))
		ins := make([][]uint16, len(cs))
		for q := range ins {
			ins[q] = make([]uint16, count)
		}
		want := make([]uint16, count)
		for i := range want {
			var xs []uint64
			for q := range ins {
				v := exactref.Adversarial(rng, f.fmt, xs)
				xs = append(xs, v)
				ins[q][i] = uint16(v)
			}
			want[i] = uint16(exactref.Sum(f.fmt, xs))
		}
		mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
			r := c.Rank()
			var got []uint16
			if f.name == "float16" {
				buf := make([]comm.Float16, count)
				for i, v := range ins[r] {
					buf[i] = comm.Float16(v)
				}
				if err := comm.AllReduce(ctx, c, buf, comm.ExactSum); err != nil {
					return err
				}
				for _, v := range buf {
					got = append(got, uint16(v))
				}
			} else {
				buf := make([]comm.BFloat16, count)
				for i, v := range ins[r] {
					buf[i] = comm.BFloat16(v)
				}
				if err := comm.AllReduce(ctx, c, buf, comm.ExactSum); err != nil {
					return err
				}
				for _, v := range buf {
					got = append(got, uint16(v))
				}
			}
			for i := range got {
				if got[i] != want[i] {
					return fmt.Errorf("%s element %d: got %#x, want %#x", f.name, i, got[i], want[i])
				}
			}
			return nil
		})
	}
}
