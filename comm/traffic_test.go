package comm_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/comm"
)

// TestWithTraffic runs a ring allreduce over shared memory on two ranks
// counting into one Traffic, and checks the counts against the ring's
// model (collectives.TestTrafficModel pins every algorithm's): for S
// bytes on n ranks, 2(n-1)S sent, (n-1)S reduced and (n-1)S copied in
// all.
func TestWithTraffic(t *testing.T) {
	const n, count = 2, 1 << 18
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var tr collectives.Traffic
	cs, err := comm.NewLocal(ctx, n, comm.WithTraffic(&tr), comm.WithTransport("shm"), comm.WithAlgorithm("allreduce=ring"))
	if err != nil {
		t.Fatal(err)
	}
	// Every rank at once, as a job's processes would: a Close waits for
	// the other ranks' to compare the last calls.
	defer closeAll(t, cs)
	before := tr.Counts()
	errs := make([]error, n)
	bufs := make([][]float32, n)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs[r] = make([]float32, count)
			for i := range bufs[r] {
				bufs[r][i] = float32(r + 1)
			}
			errs[r] = comm.AllReduce(ctx, c, bufs[r], comm.Sum)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if bufs[r][0] != 3 || bufs[r][count-1] != 3 {
			t.Fatalf("rank %d: result %v ... %v, want 3", r, bufs[r][0], bufs[r][count-1])
		}
	}
	got := tr.Counts()
	got.Sent -= before.Sent
	got.ReduceRead -= before.ReduceRead
	got.ReduceWritten -= before.ReduceWritten
	got.Copied -= before.Copied
	const S = 4 * count
	want := collectives.TrafficCounts{Sent: 2 * (n - 1) * S, ReduceRead: 2 * (n - 1) * S, ReduceWritten: (n - 1) * S, Copied: (n - 1) * S}
	if got != want {
		t.Errorf("counted %+v, want %+v", got, want)
	}
}
