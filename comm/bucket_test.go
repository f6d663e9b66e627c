package comm_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// gradients is rank r's tensors of the given lengths for step s: random
// values of every magnitude, so that the order of additions shows in the
// last bits.
func gradients[T float32 | float64](lens []int, r, s int) [][]T {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(s)))
	ts := make([][]T, len(lens))
	for i, n := range lens {
		ts[i] = make([]T, n)
		for j := range ts[i] {
			ts[i][j] = T(rng.NormFloat64() * math.Exp(rng.Float64()*20-10))
		}
	}
	return ts
}

// bucketMatchesMany runs three steps on every rank: the tensors through a
// Bucketer, marked in an order of each rank's own, and copies of them
// through one AllReduceMany; the two must agree bit for bit.
func bucketMatchesMany[T float32 | float64](t *testing.T, cs []*comm.Communicator, lens []int, bucketBytes int) {
	t.Helper()
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		grads := make([][]T, len(lens))
		for i, n := range lens {
			grads[i] = make([]T, n)
		}
		b, err := comm.NewBucketer(c, grads, comm.BucketOptions{BucketBytes: bucketBytes})
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(uint64(c.Rank()), 7))
		for step := range 3 {
			fresh := gradients[T](lens, c.Rank(), step)
			for i := range grads {
				copy(grads[i], fresh[i])
			}
			for _, i := range rng.Perm(len(grads)) {
				if err := b.MarkReady(ctx, i); err != nil {
					return err
				}
			}
			if err := b.Wait(ctx); err != nil {
				return err
			}
			if err := comm.AllReduceMany(ctx, c, fresh, comm.Avg); err != nil {
				return err
			}
			for i := range grads {
				for j := range grads[i] {
					if math.Float64bits(float64(grads[i][j])) != math.Float64bits(float64(fresh[i][j])) {
						t.Errorf("rank %d step %d: tensor %d[%d] = %v by bucket, %v by one AllReduceMany", c.Rank(), step, i, j, grads[i][j], fresh[i][j])
						return nil
					}
				}
			}
		}
		return nil
	})
}

// TestBucketerMatchesAllReduceMany: bit for bit, on 2 ranks whatever the
// algorithm, and on 4 with recursive doubling (see Bucketer).
func TestBucketerMatchesAllReduceMany(t *testing.T) {
	lens := []int{1000, 7, 300000, 64, 64, 5000, 1}
	if testing.Short() {
		// Under the race detector: the tensor larger than a default
		// bucket runs in full without it (.ci/test).
		lens[2] = 30000
	}
	for _, tc := range []struct {
		name  string
		ranks int
		opts  []comm.Option
	}{
		{"2 ranks", 2, nil},
		{"4 ranks recursive doubling", 4, []comm.Option{comm.WithAlgorithm("allreduce=rd")}},
	} {
		for _, size := range []int{1, 4 << 10, 0, 1 << 30} {
			cs := local(t, tc.ranks, tc.opts...)
			t.Run(tc.name, func(t *testing.T) {
				bucketMatchesMany[float64](t, cs, lens, size)
				bucketMatchesMany[float32](t, cs, lens, size)
			})
		}
	}
}

// TestBucketerBuckets: a bucket takes tensors in order while they fit,
// and a tensor larger than a bucket is one of its own.
func TestBucketerBuckets(t *testing.T) {
	c := local(t, 1)[0]
	lens := []int{100, 100, 100, 1000, 10}
	for _, tc := range []struct{ bytes, want int }{{1, 5}, {800, 5}, {1600, 4}, {8000, 3}, {8880, 2}, {1 << 20, 1}} {
		grads := make([][]float64, len(lens))
		for i, n := range lens {
			grads[i] = make([]float64, n)
		}
		b, err := comm.NewBucketer(c, grads, comm.BucketOptions{BucketBytes: tc.bytes})
		if err != nil {
			t.Fatal(err)
		}
		if b.Buckets() != tc.want {
			t.Errorf("%d-byte buckets: %d, want %d", tc.bytes, b.Buckets(), tc.want)
		}
	}
	for _, bad := range []struct {
		name  string
		grads [][]float32
		opts  comm.BucketOptions
	}{
		{"none", nil, comm.BucketOptions{}},
		{"empty tensor", [][]float32{{1}, {}}, comm.BucketOptions{}},
		{"negative size", [][]float32{{1}}, comm.BucketOptions{BucketBytes: -1}},
	} {
		if _, err := comm.NewBucketer(c, bad.grads, bad.opts); !errors.Is(err, comm.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", bad.name, err)
		}
	}
}

// TestBucketerMisuse: a tensor marked twice is refused at once; Wait with
// a tensor not marked fails on that rank with ErrInvalid naming it and,
// rather than hang, on the others too.
func TestBucketerMisuse(t *testing.T) {
	cs := local(t, 2)
	errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		grads := [][]float64{make([]float64, 10), make([]float64, 10)}
		b, err := comm.NewBucketer(c, grads, comm.BucketOptions{BucketBytes: 1, Sum: true})
		if err != nil {
			return err
		}
		if err := b.MarkReady(ctx, 0); err != nil {
			return err
		}
		if err := b.MarkReady(ctx, 0); !errors.Is(err, comm.ErrInvalid) {
			t.Errorf("rank %d: marked twice: %v, want ErrInvalid", c.Rank(), err)
		}
		if err := b.MarkReady(ctx, 2); !errors.Is(err, comm.ErrInvalid) {
			t.Errorf("rank %d: tensor out of range: %v, want ErrInvalid", c.Rank(), err)
		}
		if c.Rank() == 0 {
			if err := b.MarkReady(ctx, 1); err != nil {
				return err
			}
		}
		if err := b.Wait(ctx); err != nil {
			return err
		}
		return c.Barrier(ctx)
	})
	if !errors.Is(errs[1], comm.ErrInvalid) {
		t.Errorf("rank 1 (tensor 1 unmarked): %v, want ErrInvalid", errs[1])
	}
	if errs[0] == nil {
		t.Errorf("rank 0 went on as if rank 1 had sent its bucket")
	}
}
