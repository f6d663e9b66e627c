package comm_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// TestIntElements: int and uint reduce, broadcast and gather as the sized
// integers do, including values beyond 32 bits.
func TestIntElements(t *testing.T) {
	cs := local(t, 3)
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		n := c.Rank() << 40
		u := uint(c.Rank() + 1)
		if err := comm.AllReduceValues(ctx, c, comm.Max, &n); err != nil {
			return err
		}
		if err := comm.AllReduceValues(ctx, c, comm.Prod, &u); err != nil {
			return err
		}
		if n != 2<<40 || u != 6 {
			t.Errorf("rank %d: max %d, prod %d; want %d, 6", c.Rank(), n, u, 2<<40)
		}
		b := []int{-1, -1}
		if c.Rank() == 1 {
			b = []int{math.MinInt, math.MaxInt}
		}
		if err := comm.Broadcast(ctx, c, b, 1); err != nil {
			return err
		}
		if b[0] != math.MinInt || b[1] != math.MaxInt {
			t.Errorf("rank %d: broadcast %v", c.Rank(), b)
		}
		all := make([]uint, 3)
		if err := comm.AllGather(ctx, c, []uint{uint(c.Rank()) * 7}, all); err != nil {
			return err
		}
		if all[0] != 0 || all[1] != 7 || all[2] != 14 {
			t.Errorf("rank %d: allgather %v", c.Rank(), all)
		}
		if err := comm.AllReduce(ctx, c, []int{1}, comm.Avg); !errors.Is(err, comm.ErrUnsupported) && !errors.Is(err, comm.ErrInvalid) {
			t.Errorf("Avg of int: %v, want a refusal", err)
		}
		return nil
	})
}

type plain struct {
	Step  int
	Seed  [4]uint64
	LR    float32
	On    bool
	Inner struct{ A, B int16 }
}

// TestBroadcastValue: every rank ends with root's value, byte for byte,
// whichever the root.
func TestBroadcastValue(t *testing.T) {
	cs := local(t, 3)
	for root := range 3 {
		mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
			want := plain{Step: 9 + root, Seed: [4]uint64{1, 2, 3, math.MaxUint64}, LR: 0.5, On: true, Inner: struct{ A, B int16 }{-3, 4}}
			v := plain{Step: -1}
			if c.Rank() == root {
				v = want
			}
			if err := comm.BroadcastValue(ctx, c, &v, root); err != nil {
				return err
			}
			if v != want {
				t.Errorf("root %d, rank %d: %+v, want %+v", root, c.Rank(), v, want)
			}
			f := math.Pi * float64(c.Rank()+1)
			if err := comm.BroadcastValue(ctx, c, &f, root); err != nil {
				return err
			}
			if f != math.Pi*float64(root+1) {
				t.Errorf("root %d, rank %d: float %v", root, c.Rank(), f)
			}
			return nil
		})
	}
}

// TestBroadcastValueRefused: a type holding pointers is refused with
// ErrInvalid naming it; in a job of one rank nothing else happens, and in
// a larger job the others' call fails too (the refusal is told) rather
// than hang.
func TestBroadcastValueRefused(t *testing.T) {
	type withString struct {
		N    int
		Name string
	}
	cases := []struct {
		name string
		call func(ctx context.Context, c *comm.Communicator) error
		says string
	}{
		{"string field", func(ctx context.Context, c *comm.Communicator) error {
			return comm.BroadcastValue(ctx, c, &withString{}, 0)
		}, "string (field Name)"},
		{"slice", func(ctx context.Context, c *comm.Communicator) error {
			v := []int{1}
			return comm.BroadcastValue(ctx, c, &v, 0)
		}, "a slice"},
		{"pointer in array", func(ctx context.Context, c *comm.Communicator) error {
			var v [2]*int
			return comm.BroadcastValue(ctx, c, &v, 0)
		}, "a ptr"},
		{"map", func(ctx context.Context, c *comm.Communicator) error {
			v := map[int]int{}
			return comm.BroadcastValue(ctx, c, &v, 0)
		}, "a map"},
		{"nil", func(ctx context.Context, c *comm.Communicator) error {
			return comm.BroadcastValue[int](ctx, c, nil, 0)
		}, "nil value pointer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := local(t, 1)[0]
			err := tc.call(context.Background(), c)
			if !errors.Is(err, comm.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want ErrInvalid saying %q", err, tc.says)
			}
			if err := comm.AllReduce(context.Background(), c, []float64{1}, comm.Sum); err != nil {
				t.Errorf("a job of one rank after a refusal: %v", err)
			}
		})
	}
	t.Run("two ranks", func(t *testing.T) {
		cs := local(t, 2)
		errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
			if c.Rank() == 1 {
				return comm.BroadcastValue(ctx, c, &withString{}, 0)
			}
			// The root may finish its send before the refusal is
			// known; its next call cannot.
			var n int
			if err := comm.BroadcastValue(ctx, c, &n, 0); err != nil {
				return err
			}
			return c.Barrier(ctx)
		})
		if !errors.Is(errs[1], comm.ErrInvalid) {
			t.Errorf("refusing rank: %v, want ErrInvalid", errs[1])
		}
		if !errors.Is(errs[0], comm.ErrMismatch) && !errors.Is(errs[0], comm.ErrBroken) && !errors.Is(errs[0], comm.ErrPeerLost) {
			t.Errorf("the other rank: %v, want its calls to fail once rank 1 refused", errs[0])
		}
	})
}

// TestBroadcastBytes: the non-roots learn the length, including zero.
func TestBroadcastBytes(t *testing.T) {
	cs := local(t, 3)
	for _, n := range []int{0, 1, 100003} {
		mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
			var b []byte
			if c.Rank() == 2 {
				b = make([]byte, n)
				for i := range b {
					b[i] = byte(i*7 + 1)
				}
			} else {
				b = []byte("ignored")
			}
			got, err := comm.BroadcastBytes(ctx, c, b, 2)
			if err != nil {
				return err
			}
			if len(got) != n {
				t.Fatalf("rank %d: %d bytes, want %d", c.Rank(), len(got), n)
			}
			for i, x := range got {
				if x != byte(i*7+1) {
					t.Fatalf("rank %d: byte %d is %d", c.Rank(), i, x)
				}
			}
			return nil
		})
	}
}

// TestAllReduceMean: the weighted mean of uneven shards, in both float
// types, against the mean computed over all the samples at once.
func TestAllReduceMean(t *testing.T) {
	cs := local(t, 3)
	counts := []int{683, 683, 682}
	var all []float64
	for i := range 2048 {
		all = append(all, math.Sin(float64(i)))
	}
	want := 0.0
	for _, x := range all {
		want += x
	}
	want /= 2048
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		lo := 0
		for r := range c.Rank() {
			lo += counts[r]
		}
		mine := all[lo : lo+counts[c.Rank()]]
		m := 0.0
		for _, x := range mine {
			m += x
		}
		m /= float64(len(mine))
		b64 := []float64{m, 1}
		b32 := []float32{float32(m)}
		if err := comm.AllReduceMean(ctx, c, b64, float64(len(mine))); err != nil {
			return err
		}
		if err := comm.AllReduceMean(ctx, c, b32, float64(len(mine))); err != nil {
			return err
		}
		if math.Abs(b64[0]-want) > 1e-15 || b64[1] != 1 {
			t.Errorf("rank %d: float64 mean %v, want %v", c.Rank(), b64, want)
		}
		if math.Abs(float64(b32[0])-want) > 1e-7 {
			t.Errorf("rank %d: float32 mean %v, want %v", c.Rank(), b32[0], want)
		}
		// Avg of the means is not the mean: the reason for the weights.
		avg := []float64{m}
		if err := comm.AllReduce(ctx, c, avg, comm.Avg); err != nil {
			return err
		}
		if avg[0] == b64[0] {
			t.Errorf("rank %d: Avg of uneven means equals the weighted mean (%v): the test shows nothing", c.Rank(), avg[0])
		}
		// Zero weights everywhere: every rank fails alike, buf untouched.
		z := []float64{5}
		if err := comm.AllReduceMean(ctx, c, z, 0); !errors.Is(err, comm.ErrInvalid) || z[0] != 5 {
			t.Errorf("rank %d: zero weights: %v, buf %v; want ErrInvalid and buf untouched", c.Rank(), err, z)
		}
		// The communicator goes on after that.
		return comm.AllReduceMean(ctx, c, z, 1)
	})
	c := local(t, 1)[0]
	for _, w := range []float64{-1, math.NaN(), math.Inf(1)} {
		if err := comm.AllReduceMean(context.Background(), c, []float64{1}, w); !errors.Is(err, comm.ErrInvalid) {
			t.Errorf("weight %v: %v, want ErrInvalid", w, err)
		}
	}
}
