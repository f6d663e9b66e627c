package collectives_test

import (
	"context"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport/shm"
)

// memStore is a rendezvous store for ranks in one process.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStore) Put(_ context.Context, k string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = v
	return nil
}

func (s *memStore) Get(ctx context.Context, k string) ([]byte, error) {
	for {
		s.mu.Lock()
		v, ok := s.m[k]
		s.mu.Unlock()
		if ok {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// BenchmarkStackShm is one 8-byte float32 allreduce between two ranks of
// this process, each on a goroutine locked to a CPU of its own, through
// the whole stack under a communicator: the collectives layer, the mux and
// the shared-memory rings. Its time is the latency between two cores plus
// the layers' work on both sides; the layers' work alone is best counted
// in instructions, which, unlike the time on a shared machine, do not
// drift:
//
//	go test -c -o /tmp/coll.test ./collectives
//	GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
//	    /tmp/coll.test -test.run '^$' -test.bench StackShm -test.benchtime 20000x
//
// and callgrind_annotate's exclusive counts of gocoll's functions (and
// memmove) divided by 2 x 20000, as both ranks run the loop, leaving out
// the waiting (shm's wait and its ready function). (callgrind sometimes
// trips over one of the runtime's signals all the same; run it again.)
func BenchmarkStackShm(b *testing.B) {
	cpus, err := onlineCPUs()
	if err != nil || len(cpus) < 2 {
		b.Skipf("needs two CPUs to pin the ranks to: have %v (%v)", cpus, err)
	}
	ctx := context.Background()
	st := &memStore{m: map[string][]byte{}}
	var ts [2]*shm.Transport
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts[r], errs[r] = shm.Connect(ctx, st, r, 2, []byte("stack benchmark"), shm.Options{})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
		defer ts[r].Close()
	}
	var groups [2]*collectives.Group
	for r := range 2 {
		ch, err := collectives.NewMux(ts[r], 0).Channel(0, []int{0, 1})
		if err != nil {
			b.Fatal(err)
		}
		groups[r] = collectives.NewGroup(ch, collectives.Options{})
	}
	var sums [2]float32
	b.ResetTimer()
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The thread's affinity is put back before it is unlocked,
			// so that the runtime's next goroutine on it (the main
			// thread's, perhaps) is not pinned; if that fails, the
			// thread stays locked and ends with the goroutine.
			runtime.LockOSThread()
			var old, set unix.CPUSet
			if err := unix.SchedGetaffinity(0, &old); err != nil {
				errs[r] = err
				return
			}
			defer func() {
				if unix.SchedSetaffinity(0, &old) == nil {
					runtime.UnlockOSThread()
				}
			}()
			set.Set(cpus[r])
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs[r] = err
				return
			}
			v := []float32{float32(r + 1), 1}
			buf := unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8)
			for range b.N {
				v[0], v[1] = float32(r+1), 1
				if err := groups[r].AllReduce(ctx, buf, reduce.Float32, reduce.Sum); err != nil {
					errs[r] = err
					return
				}
			}
			sums[r] = v[0] + v[1]
		}()
	}
	wg.Wait()
	b.StopTimer()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
		if sums[r] != 3+2 {
			b.Fatalf("rank %d: allreduce gave elements summing to %v, want 5", r, sums[r])
		}
	}
}

// onlineCPUs are the CPUs this process may run on (its main thread's).
func onlineCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
