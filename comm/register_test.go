package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/plan"
	"github.com/gocoll/gocoll/internal/testmode"
)

// TestRegister: registering is collective and accepted on every
// transport, collectives on registered buffers give the right results,
// and bad registrations fail on every rank alike.
func TestRegister(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			ctx := context.Background()
			cs, err := comm.NewLocal(ctx, 2, comm.WithTransport(tr))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := comm.Register[float32](ctx, nil, make([]float32, 4)); !errors.Is(err, comm.ErrInvalid) {
				t.Errorf("Register on a nil communicator: %v, want ErrInvalid", err)
			}
			bufs := make([][]float64, 2)
			errs := make([]error, 2)
			refused := make([][2]error, 2)
			onEveryRank(cs, func(c *comm.Communicator) {
				r := c.Rank()
				// Rank 1's buffer is empty, then overlaps one it registered.
				empty := make([]float32, 4-4*r)
				_, refused[r][0] = comm.Register(ctx, c, empty)
				bufs[r] = make([]float64, 1<<17)
				reg, err := comm.Register(ctx, c, bufs[r])
				if err != nil {
					errs[r] = err
					return
				}
				other := make([]float64, 8)
				if r == 1 {
					other = bufs[r][10:]
				}
				_, refused[r][1] = comm.Register(ctx, c, other)
				for i := range bufs[r] {
					bufs[r][i] = float64(i + r)
				}
				errs[r] = errors.Join(comm.AllReduce(ctx, c, bufs[r], comm.Sum), reg.Close(), reg.Close())
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				for i, err := range refused[r] {
					if !errors.Is(err, comm.ErrInvalid) || !strings.Contains(err.Error(), "rank 1's buffer") {
						t.Errorf("rank %d, refusal %d: %v, want ErrInvalid naming rank 1", r, i, err)
					}
				}
			}
			for r, b := range bufs {
				for i, v := range b {
					if v != float64(2*i+1) {
						t.Fatalf("rank %d: element %d is %v, want %v", r, i, v, 2*i+1)
					}
				}
			}
			onEveryRank(cs, func(c *comm.Communicator) { c.Close() })
			if _, err := comm.Register(ctx, cs[0], make([]int32, 8)); !errors.Is(err, comm.ErrClosed) {
				t.Errorf("Register after Close: %v, want ErrClosed", err)
			}
		})
	}
}

// TestRegisterMatchesRing: the single copy of registered buffers, which
// reads the peers' blocks with process_vm_readv (here from this process
// itself), gives the ring's bits, NaNs, signed zeros and rounding
// included, on 2 ranks; below its floor, and on 3 and 4 ranks
// (plan.SingleCopyReadRanks), the usual path's.
func TestRegisterMatchesRing(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var cases []ringCase
			cases = append(cases, ringCases[float32](n, true)...)
			cases = append(cases, ringCases[float64](n, true)...)
			cases = append(cases, ringCases[comm.BFloat16](n, true)...)
			matchRing(t, n, cases)
		})
	}
}

// TestRegisterTraffic pins the single copy's traffic for registered
// buffers on 2 ranks (docs/traffic.md): Alloc's, plus the read of every
// peer's block into scratch, a copy: (5n-3)/n bytes moved per byte per
// rank, 3.5 on 2. (TestSingleCopyRead, in collectives, pins it on more ranks.)
func TestRegisterTraffic(t *testing.T) {
	checkSingleTraffic(t, 2, true)
}

// TestRegisterProcesses runs jobs of 2, 3 and 4 processes over shared
// memory, each registering a buffer of its heap: float32, float64 and
// int32, Sum and Max, at sizes around the single copy's floor, in
// place (registerCases).
func TestRegisterProcesses(t *testing.T) {
	counts := []int{2, 3, 4}
	if testmode.Quick() {
		counts = counts[:2] // the single copy (2) and the usual path (3)
	}
	for _, n := range counts {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			for _, err := range runAllocJob(t, n, "register") {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// registerCases is one rank of TestRegisterProcesses's jobs (and of
// TestRegisterRefused's, where the ranks cannot read each other).
func registerCases(ctx context.Context, c *comm.Communicator, tr *collectives.Traffic, readable bool) error {
	for _, f := range []func(int, comm.Op) error{
		func(d int, op comm.Op) error { return checkRegistered[float32](ctx, c, tr, op, d, readable) },
		func(d int, op comm.Op) error { return checkRegistered[float64](ctx, c, tr, op, d, readable) },
		func(d int, op comm.Op) error { return checkRegistered[int32](ctx, c, tr, op, d, readable) },
	} {
		for _, op := range []comm.Op{comm.Sum, comm.Max} {
			for _, d := range []int{-1, 0, 1, 1003} {
				if err := f(d, op); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkRegistered registers a buffer of the heap and allreduces, in
// place, the part of it between guard elements: the single copy's floor
// plus d elements. The result must have the bits of the ring's order
// (block k is x_k op (x_{k-1} op (... op x_{k+1}))), which the ring
// and the single copy both keep (Rabenseifner, which 4 ranks take above
// 1 MiB, only the values); the guards must be untouched; and the call
// must hand the transport nothing exactly when it takes the single copy
// (readable, at the floor, on up to plan.SingleCopyReadRanks ranks).
func checkRegistered[T comm.Element](ctx context.Context, c *comm.Communicator, tr *collectives.Traffic, op comm.Op, d int, readable bool) error {
	n, r := c.Size(), c.Rank()
	es := int(unsafe.Sizeof(*new(T)))
	count := plan.SingleCopyMin/es + d
	name := fmt.Sprintf("rank %d: %d x %T %v on %d ranks", r, count, *new(T), op, n)
	all := make([]T, count+2*allocGuard)
	reg, err := comm.Register(ctx, c, all)
	if err != nil {
		return fmt.Errorf("%s: register: %w", name, err)
	}
	defer reg.Close()
	// Values of one decimal, which a sum in another order would round
	// otherwise; no ties for Max.
	x := func(q, i int) T { return T(float64((q*7919+i*31)%2001-1000) / 10 * float64(q+1)) }
	if !isFloat[T]() {
		x = func(q, i int) T { return T((q*7919+i*31)%2001 - 1000 + q) }
	}
	const poison = 77
	for i := range all {
		all[i] = poison
	}
	buf := all[allocGuard : allocGuard+count]
	for i := range buf {
		buf[i] = x(r, i)
	}
	f := map[comm.Op]func(a, b T) T{comm.Sum: func(a, b T) T { return a + b }, comm.Max: func(a, b T) T { return max(a, b) }}[op]
	before := tr.Counts()
	if err := comm.AllReduce(ctx, c, buf, op); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	sent := tr.Counts().Sent - before.Sent
	single := readable && count*es >= plan.SingleCopyMin && n <= plan.SingleCopyReadRanks
	if single != (sent == 0) {
		return fmt.Errorf("%s: single copy %v, but the call sent %d bytes", name, single, sent)
	}
	ringOrder := single || n < 4 || count*es <= 1<<20
	near := func(a, b T) bool {
		return a == b || !ringOrder && isFloat[T]() && math.Abs(float64(a)-float64(b)) <= 1e-4*math.Abs(float64(b))+1e-3
	}
	for k := range n {
		lo, hi := k*(count/n)+min(k, count%n), (k+1)*(count/n)+min(k+1, count%n)
		for i := lo; i < hi; i++ {
			acc := x((k+1)%n, i)
			for j := 2; j < n; j++ {
				acc = f(x((k+j)%n, i), acc)
			}
			if want := f(x(k, i), acc); !near(buf[i], want) {
				return fmt.Errorf("%s: element %d is %v, want %v, its bits in the ring's order", name, i, buf[i], want)
			}
		}
	}
	for i, v := range all {
		if (i < allocGuard || i >= allocGuard+count) && v != poison {
			return fmt.Errorf("%s: element %d of the registered slice, outside the buffer, was written: %v", name, i, v)
		}
	}
	return nil
}
