package comm_test

import (
	"context"
	"errors"
	"github.com/gocoll/gocoll/transport"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/transport/tcp"
)

// local starts an in-process job of n ranks and closes it when the test ends.
func local(t *testing.T, n int, opts ...comm.Option) []*comm.Communicator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := comm.NewLocal(ctx, n, opts...)
	if err != nil {
		t.Fatalf("NewLocal(%d): %v", n, err)
	}
	t.Cleanup(func() { closeAll(t, cs) })
	return cs
}

// each runs f on every rank at once, as separate processes would, and
// returns each rank's error. A call that hangs fails the test.
func each(t *testing.T, cs []*comm.Communicator, f func(ctx context.Context, c *comm.Communicator) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(ctx, c)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("collective did not finish within a minute: %v", errs)
	}
	return errs
}

func mustEach(t *testing.T, cs []*comm.Communicator, f func(ctx context.Context, c *comm.Communicator) error) {
	t.Helper()
	for r, err := range each(t, cs, f) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(strings.Repeat("r", n), func(t *testing.T) {
			cs := local(t, n)
			const count = 1031 // not a multiple of anything the algorithms cut by
			mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				r := c.Rank()
				// float64 sum: exact for small integers.
				f := make([]float64, count)
				for i := range f {
					f[i] = float64(r*count + i)
				}
				if err := comm.AllReduce(ctx, c, f, comm.Sum); err != nil {
					return err
				}
				for i, v := range f {
					want := float64(n*i + count*n*(n-1)/2)
					if v != want {
						t.Errorf("rank %d: float64 sum[%d] = %v, want %v", r, i, v, want)
						break
					}
				}
				// int8 max and min; uint32 prod.
				b := make([]int8, count)
				for i := range b {
					b[i] = int8(r - i%7)
				}
				if err := comm.AllReduce(ctx, c, b, comm.Max); err != nil {
					return err
				}
				for i, v := range b {
					if want := int8(n - 1 - i%7); v != want {
						t.Errorf("rank %d: int8 max[%d] = %d, want %d", r, i, v, want)
						break
					}
				}
				p := []uint32{uint32(r + 1), 2, 0xFFFFFFFF}
				if err := comm.AllReduce(ctx, c, p, comm.Prod); err != nil {
					return err
				}
				fact, pow, wrap := uint32(1), uint32(1), uint32(1)
				for k := 1; k <= n; k++ {
					fact *= uint32(k)
					pow *= 2
					wrap *= 0xFFFFFFFF
				}
				if p[0] != fact || p[1] != pow || p[2] != wrap {
					t.Errorf("rank %d: uint32 prod = %v, want [%d %d %d]", r, p, fact, pow, wrap)
				}
				// float32 avg.
				a := []float32{float32(r), 1, -2}
				if err := comm.AllReduce(ctx, c, a, comm.Avg); err != nil {
					return err
				}
				if want := float32(n-1) / 2; a[0] != want || a[1] != 1 || a[2] != -2 {
					t.Errorf("rank %d: float32 avg = %v, want [%v 1 -2]", r, a, want)
				}
				// 16-bit floats: rounded to nearest even after each step.
				h := []comm.Float16{comm.Float16Of(1.5), comm.Float16Of(float32(r))}
				if err := comm.AllReduce(ctx, c, h, comm.Sum); err != nil {
					return err
				}
				if got, want := h[0].Float32(), 1.5*float32(n); got != want {
					t.Errorf("rank %d: float16 sum = %v, want %v", r, got, want)
				}
				if got, want := h[1].Float32(), float32(n*(n-1)/2); got != want {
					t.Errorf("rank %d: float16 sum of ranks = %v, want %v", r, got, want)
				}
				bf := []comm.BFloat16{comm.BFloat16Of(float32(-r)), comm.BFloat16Of(0.25)}
				if err := comm.AllReduce(ctx, c, bf, comm.Min); err != nil {
					return err
				}
				if bf[0].Float32() != float32(1-n) || bf[1].Float32() != 0.25 {
					t.Errorf("rank %d: bfloat16 min = %v %v, want %v 0.25", r, bf[0].Float32(), bf[1].Float32(), 1-n)
				}
				// Broadcast from every root.
				for root := range n {
					v := []int64{int64(r), int64(r) * 1000}
					if err := comm.Broadcast(ctx, c, v, root); err != nil {
						return err
					}
					if v[0] != int64(root) || v[1] != int64(root)*1000 {
						t.Errorf("rank %d: broadcast from %d = %v", r, root, v)
					}
				}
				// AllGather, out of place and in place.
				all := make([]uint16, 3*n)
				if err := comm.AllGather(ctx, c, []uint16{uint16(r), 7, uint16(r * 3)}, all); err != nil {
					return err
				}
				for q := range n {
					if all[3*q] != uint16(q) || all[3*q+1] != 7 || all[3*q+2] != uint16(3*q) {
						t.Errorf("rank %d: allgather block %d = %v", r, q, all[3*q:3*q+3])
					}
				}
				in := make([]int32, 2*n)
				in[2*r], in[2*r+1] = int32(r), -int32(r)
				if err := comm.AllGather(ctx, c, in[2*r:2*r+2], in); err != nil {
					return err
				}
				for q := range n {
					if in[2*q] != int32(q) || in[2*q+1] != -int32(q) {
						t.Errorf("rank %d: in-place allgather block %d = %v", r, q, in[2*q:2*q+2])
					}
				}
				// ReduceScatter: block q of every rank's send holds q.
				send := make([]float32, 4*n)
				for i := range send {
					send[i] = float32(i / 4)
				}
				recv := make([]float32, 4)
				if err := comm.ReduceScatter(ctx, c, send, recv, comm.Sum); err != nil {
					return err
				}
				for _, v := range recv {
					if v != float32(r*n) {
						t.Errorf("rank %d: reducescatter = %v, want all %d", r, recv, r*n)
						break
					}
				}
				return c.Barrier(ctx)
			})
		})
	}
}

func TestNilAndEmptySlices(t *testing.T) {
	cs := local(t, 3)
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		if err := comm.AllReduce[float32](ctx, c, nil, comm.Sum); err != nil {
			return err
		}
		if err := comm.Broadcast(ctx, c, []int8{}, 2); err != nil {
			return err
		}
		if err := comm.AllGather[uint8](ctx, c, nil, nil); err != nil {
			return err
		}
		return comm.ReduceScatter[int64](ctx, c, nil, nil, comm.Max)
	})
}

// TestBadArguments: every bad argument is refused before anything is sent,
// with an error naming it, leaving the caller's memory untouched; the
// other ranks are told (see checkRefusalTold).
func TestBadArguments(t *testing.T) {
	ctx := context.Background()
	guarded := make([]float32, 12) // 4 guard, 4 payload, 4 guard
	for i := range guarded {
		guarded[i] = float32(100 + i)
	}
	buf := guarded[4:8]
	ints := make([]int32, 8)
	cases := []struct {
		name string
		call func(c *comm.Communicator) error
		want error
		says string
	}{
		{"broadcast root -1", func(c *comm.Communicator) error { return comm.Broadcast(ctx, c, buf, -1) }, comm.ErrInvalid, "root -1"},
		{"broadcast root size", func(c *comm.Communicator) error { return comm.Broadcast(ctx, c, buf, 2) }, comm.ErrInvalid, "root 2"},
		{"allgather recv too short", func(c *comm.Communicator) error { return comm.AllGather(ctx, c, buf, guarded[:7]) }, comm.ErrInvalid, "len(recv) = 7"},
		{"allgather overlap", func(c *comm.Communicator) error { return comm.AllGather(ctx, c, guarded[1:5], guarded[2:10]) }, comm.ErrInvalid, "overlaps"},
		{"reducescatter send too long", func(c *comm.Communicator) error { return comm.ReduceScatter(ctx, c, guarded[:9], buf, comm.Sum) }, comm.ErrInvalid, "len(send) = 9"},
		{"reducescatter overlap", func(c *comm.Communicator) error {
			return comm.ReduceScatter(ctx, c, guarded[:8], guarded[1:5], comm.Sum)
		}, comm.ErrInvalid, "overlaps"},
		{"avg on ints", func(c *comm.Communicator) error { return comm.AllReduce(ctx, c, ints, comm.Avg) }, comm.ErrUnsupported, "avg"},
		{"avg on ints reducescatter", func(c *comm.Communicator) error { return comm.ReduceScatter(ctx, c, ints, ints[:4], comm.Avg) }, comm.ErrUnsupported, "avg"},
		{"unknown op", func(c *comm.Communicator) error { return comm.AllReduce(ctx, c, buf, comm.Op(200)) }, comm.ErrInvalid, "op 200"},
		{"nil communicator", func(c *comm.Communicator) error { return comm.AllReduce(ctx, nil, buf, comm.Sum) }, comm.ErrInvalid, "nil"},
		{"nil communicator broadcast", func(c *comm.Communicator) error { return comm.Broadcast(ctx, nil, buf, 0) }, comm.ErrInvalid, "nil"},
		{"nil communicator barrier", func(c *comm.Communicator) error { return (*comm.Communicator)(nil).Barrier(ctx) }, comm.ErrInvalid, "nil"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := local(t, 2)
			err := tc.call(cs[0])
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.says)) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
			if !strings.HasPrefix(tc.name, "nil communicator") {
				checkRefusalTold(t, cs, tc.says)
			}
		})
	}
	for i, v := range guarded {
		if v != float32(100+i) {
			t.Fatalf("guarded[%d] = %v: a refused call wrote to the caller's memory", i, v)
		}
	}
}

// checkRefusalTold checks what a call refused on rank 0 alone leaves: rank
// 0's communicator broken, and rank 1's next collective failing within
// moments with ErrMismatch, saying that rank 0 refused and why (says).
func checkRefusalTold(t *testing.T, cs []*comm.Communicator, says string) {
	t.Helper()
	if err := cs[0].Err(); !errors.Is(err, comm.ErrBroken) {
		t.Errorf("rank 0: Err() = %v after a refused call, want ErrBroken", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := comm.AllReduce(ctx, cs[1], []float32{1}, comm.Sum)
	if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), "rank 0 refused") ||
		!strings.Contains(strings.ToLower(err.Error()), strings.ToLower(says)) {
		t.Errorf("rank 1, after rank 0 refused a call: %v; want ErrMismatch saying rank 0 refused (%s)", err, says)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("rank 1 learnt of rank 0's refusal after %v", d)
	}
}

func TestNewLocalBadSize(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := comm.NewLocal(context.Background(), n); !errors.Is(err, comm.ErrInvalid) {
			t.Errorf("NewLocal(%d) = %v, want ErrInvalid", n, err)
		}
	}
}

// TestMismatch: ranks that disagree get ErrMismatch saying what each side
// called, and the communicator is broken afterwards.
func TestMismatch(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, c *comm.Communicator) error
		says string
		// A broadcast root receives nothing, so it can finish before the
		// others see the mismatch; its next call must fail, not hang.
		rootMayFinish bool
	}{
		{"length", func(ctx context.Context, c *comm.Communicator) error {
			return comm.AllReduce(ctx, c, make([]float32, 4+c.Rank()), comm.Sum)
		}, "4 x float32", false},
		{"op", func(ctx context.Context, c *comm.Communicator) error {
			return comm.AllReduce(ctx, c, make([]float32, 4), []comm.Op{comm.Sum, comm.Max}[c.Rank()])
		}, "max", false},
		{"kind", func(ctx context.Context, c *comm.Communicator) error {
			if c.Rank() == 0 {
				return c.Barrier(ctx)
			}
			return comm.AllReduce(ctx, c, make([]float32, 4), comm.Sum)
		}, "barrier", false},
		{"broadcast root", func(ctx context.Context, c *comm.Communicator) error {
			if c.Rank() == 0 {
				return comm.Broadcast(ctx, c, make([]float32, 4), 0)
			}
			return comm.AllReduce(ctx, c, make([]float32, 4), comm.Sum)
		}, "broadcast", true},
		{"type", func(ctx context.Context, c *comm.Communicator) error {
			if c.Rank() == 0 {
				return comm.AllReduce(ctx, c, make([]int32, 4), comm.Sum)
			}
			return comm.AllReduce(ctx, c, make([]float32, 4), comm.Sum)
		}, "int32", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := local(t, 2)
			for r, err := range each(t, cs, tc.call) {
				if r == 0 && err == nil && tc.rootMayFinish {
					continue
				}
				if !errors.Is(err, comm.ErrMismatch) {
					t.Fatalf("rank %d: err = %v, want ErrMismatch", r, err)
				}
				if !strings.Contains(strings.ToLower(err.Error()), tc.says) {
					t.Errorf("rank %d: error %q does not say %q", r, err, tc.says)
				}
			}
			for r, err := range each(t, cs, func(ctx context.Context, c *comm.Communicator) error { return c.Barrier(ctx) }) {
				if r == 0 && tc.rootMayFinish {
					// Either rank 1's header or its closed connection
					// reaches the root first; both must be reported.
					mismatch := errors.Is(err, comm.ErrMismatch) && strings.Contains(err.Error(), "rank 1 called allreduce")
					lost := errors.Is(err, comm.ErrPeerLost) && strings.Contains(err.Error(), "rank 1")
					if !mismatch && !lost {
						t.Errorf("root's next call = %v, want ErrMismatch or ErrPeerLost naming rank 1", err)
					}
					continue
				}
				if !errors.Is(err, comm.ErrBroken) || !errors.Is(err, comm.ErrMismatch) {
					t.Errorf("rank %d: call after mismatch = %v, want ErrBroken wrapping ErrMismatch", r, err)
				}
			}
		})
	}
}

func TestClosed(t *testing.T) {
	cs := local(t, 2)
	// Closed at once, as ranks in processes of their own do: one closed
	// alone waits for the others' last calls (Close is collective).
	closeAll(t, cs)
	for _, c := range cs {
		if err := c.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := comm.AllReduce(context.Background(), c, []float32{1}, comm.Sum); !errors.Is(err, comm.ErrClosed) {
			t.Errorf("AllReduce after Close = %v, want ErrClosed", err)
		}
		if err := c.Err(); !errors.Is(err, comm.ErrClosed) {
			t.Errorf("Err after Close = %v, want ErrClosed", err)
		}
	}
}

// TestPeerClosesWhileOthersWait: a rank that leaves makes the others' call
// fail promptly instead of hanging.
func TestPeerClosesWhileOthersWait(t *testing.T) {
	cs := local(t, 3)
	go func() {
		time.Sleep(100 * time.Millisecond)
		cs[2].Close()
	}()
	start := time.Now()
	errs := each(t, cs[:2], func(ctx context.Context, c *comm.Communicator) error {
		return comm.AllReduce(ctx, c, make([]float64, 1<<16), comm.Sum)
	})
	for r, err := range errs {
		// Each survivor names the rank it lost: rank 2, or a survivor
		// that gave up first and closed in turn.
		if !errors.Is(err, comm.ErrPeerLost) || !strings.Contains(err.Error(), "rank ") {
			t.Errorf("rank %d: err = %v, want ErrPeerLost naming a rank", r, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to notice", d)
	}
	t.Logf("errors: %v", errs)
}

func TestContext(t *testing.T) {
	t.Run("already cancelled", func(t *testing.T) {
		cs := local(t, 2)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, c := range cs {
			if err := comm.AllReduce(ctx, c, []float32{1}, comm.Sum); !errors.Is(err, context.Canceled) {
				t.Errorf("rank %d: err = %v, want context.Canceled", c.Rank(), err)
			}
		}
		// Nothing was sent, but no rank can know that the others gave the
		// same call up: each breaks its communicator.
		for _, c := range cs {
			if err := c.Barrier(context.Background()); !errors.Is(err, comm.ErrBroken) || !errors.Is(err, context.Canceled) {
				t.Errorf("rank %d, after a call given up before it started: %v, want ErrBroken wrapping context.Canceled", c.Rank(), err)
			}
		}
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		cs := local(t, 2)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		err := comm.AllReduce(ctx, cs[0], make([]float32, 1024), comm.Sum) // rank 1 never comes
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("cancellation took %v", d)
		}
		if err := cs[0].Barrier(context.Background()); !errors.Is(err, comm.ErrBroken) || !errors.Is(err, context.Canceled) {
			t.Errorf("after a cancelled collective: %v, want ErrBroken wrapping context.Canceled", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		cs := local(t, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := cs[1].Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
	})
}

// TestInitEnv runs Init against environments, as a launcher would set them.
func TestInitEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want error
		says string
	}{
		{"no launcher: a job of one rank", nil, nil, ""},
		{"no launcher but a store address", map[string]string{"GRUN_ADDR": "127.0.0.1:1", "MASTER_ADDR": "127.0.0.1"}, nil, ""},
		{"grun's rank without its size", map[string]string{"GRUN_RANK": "0"}, comm.ErrEnv, "GRUN_SIZE"},
		{"rank out of range", map[string]string{"GRUN_RANK": "3", "GRUN_SIZE": "2", "GRUN_ADDR": "127.0.0.1:1"}, comm.ErrEnv, "GRUN_RANK=3"},
		{"bad transport", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_TRANSPORT": "carrier-pigeon"}, comm.ErrInvalid, "carrier-pigeon"},
		{"bad timeout", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_TIMEOUT": "abc"}, comm.ErrInvalid, "GOCOLL_TIMEOUT"},
		{"bad algorithm", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_ALGO": "allreduce=teleport"}, nil, "teleport"},
		{"size 1 torchrun", map[string]string{"RANK": "0", "WORLD_SIZE": "1"}, nil, ""},
		{"size 1 slurm", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, nil, ""},
		{"grun without its store", map[string]string{"GRUN_RANK": "0", "GRUN_SIZE": "1"}, comm.ErrEnv, "GRUN_ADDR"},
	}
	launcher := []string{"GRUN_RANK", "GRUN_SIZE", "GRUN_LOCAL_RANK", "GRUN_LOCAL_SIZE", "GRUN_ADDR", "GRUN_TOKEN",
		"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
		"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
		"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "GOCOLL_TRANSPORT", "GOCOLL_TIMEOUT", "GOCOLL_ALGO"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range launcher {
				if v, ok := tc.env[k]; ok {
					t.Setenv(k, v)
				} else {
					t.Setenv(k, "")
					os.Unsetenv(k)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := comm.Init(ctx)
			if tc.says == "" {
				if err != nil {
					t.Fatalf("Init: %v", err)
				}
				defer c.Close()
				v := []float64{math.Pi}
				if err := comm.AllReduce(ctx, c, v, comm.Sum); err != nil || v[0] != math.Pi {
					t.Fatalf("size-1 allreduce = %v, %v", v, err)
				}
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("Init succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

func TestUnavailableTransport(t *testing.T) {
	if os.Getenv("GOCOLL_IB_DEV") != "" {
		return // vmtest/run sets it where there is a device: rdma can be had there
	}
	// No RDMA device here: asking for rdma must say why it cannot be had.
	for _, name := range []string{"rdma"} {
		_, err := comm.NewLocal(context.Background(), 2, comm.WithTransport(name))
		if !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), name) {
			t.Errorf("transport %s: err = %v, want ErrUnsupported naming it", name, err)
		}
	}
}

// tcpSmall makes every message span many small slots, so that senders
// wait on credits all the time.
func tcpSmall() tcp.Options {
	return tcp.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4 << 10}}
}
