package comm_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/comm"
)

// TestInitTimeout: a job whose rank 2 never starts. The ranks that came
// give up after their timeout with ErrTimeout (as the README promises),
// naming the rank that never arrived, and without blaming the rendezvous,
// which answered all along.
func TestInitTimeout(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, stall timers): beside the other such tests
	token := []byte("0123456789abcdef0123456789abcdef")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	errs := make([]error, 2)
	took := make([]time.Duration, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			cfg := comm.Config{Rank: r, Size: 3, LocalRank: r, LocalSize: 3, Addr: srv.Addr(), Token: token, Source: "test"}
			c, err := comm.New(context.Background(), cfg, comm.WithTimeout(time.Second))
			took[r], errs[r] = time.Since(start), err
			if c != nil {
				c.Close()
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), err)
		if !errors.Is(err, comm.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rank %d: %v, want ErrTimeout and DeadlineExceeded", r, err)
			continue
		}
		if !strings.Contains(err.Error(), "rank 2 never arrived") || strings.Contains(err.Error(), "unreachable") {
			t.Errorf("rank %d: %v: want it to name rank 2 as never arrived, and not to blame the rendezvous", r, err)
		}
		if took[r] > 3*time.Second {
			t.Errorf("rank %d: gave up after %v, with a 1 s timeout", r, took[r])
		}
	}
}

// TestTimeoutNamesAbsent: rank 2 of 3 is busy elsewhere when the others
// call an allgather with a deadline; their errors say rank 2 never
// reached the call.
func TestTimeoutNamesAbsent(t *testing.T) {
	cs := local(t, 3)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			errs[r] = comm.AllGather(ctx, cs[r], []int32{1}, make([]int32, 3))
		}()
	}
	wg.Wait()
	// The first to time out drops its links, so the other may see that
	// first: either way the error says which rank never came.
	for r, err := range errs {
		if !(errors.Is(err, comm.ErrTimeout) || errors.Is(err, comm.ErrPeerLost)) || !strings.Contains(err.Error(), "rank 2 never reached call #1") {
			t.Errorf("rank %d: %v, want ErrTimeout (or ErrPeerLost from the rank that timed out first) saying rank 2 never reached call #1", r, err)
		}
	}
	t.Logf("rank 0: %v", errs[0])
}

// TestInitHugeWorld: rank 0 of the largest job the environment may name,
// 16777216 ranks, of which none other ever comes (issue 41: it cost 1.1 GB
// and overran a 5 s timeout by 10 s). Rank 0 gives up on time, naming the
// first absent ranks and counting the rest, having allocated little.
func TestInitHugeWorld(t *testing.T) {
	const size = 16777216
	srv, err := bootstrap.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	cfg := comm.Config{Rank: 0, Size: size, LocalRank: -1, LocalSize: -1, Addr: srv.Addr(), Source: "test"}
	c, err := comm.New(context.Background(), cfg, comm.WithTimeout(time.Second))
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if c != nil {
		c.Close()
	}
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "ranks 1, 2, 3, 4, 5, 6, 7, 8, and 16777207 more never arrived") {
		t.Fatalf("New: %v, want ErrTimeout naming ranks 1-8 and 16777207 more as never arrived", err)
	}
	if took > 3*time.Second {
		t.Errorf("gave up after %v, with a 1 s timeout", took)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("allocated %d MB waiting for ranks that never came, want under 64", alloc>>20)
	}
	t.Logf("gave up after %v, %d KB allocated: %v", took.Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>10, err)
}
