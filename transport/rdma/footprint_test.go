//go:build cgo && linux

package rdma

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
)

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(des)
}

// fdKinds counts this process's descriptors by what they name: sockets
// (store connections and listeners among them), the verbs device, anon
// inodes (eventfds, completion channels), and the rest.
func fdKinds() map[string]int {
	des, _ := os.ReadDir("/proc/self/fd")
	m := map[string]int{}
	for _, de := range des {
		l, err := os.Readlink("/proc/self/fd/" + de.Name())
		switch {
		case err != nil:
		case strings.HasPrefix(l, "socket:"):
			m["socket"]++
		case strings.HasPrefix(l, "/dev/infiniband/"):
			m["uverbs"]++
		case strings.HasPrefix(l, "anon_inode:"):
			m[strings.TrimPrefix(l, "anon_inode:")]++
		default:
			m["other"]++
		}
	}
	return m
}

// queuePairs counts this process's RC queue pairs as the kernel lists
// them (rdma-core's `rdma` tool), or -1 without the tool.
func queuePairs() int {
	out, err := exec.Command("rdma", "resource", "show", "qp").Output()
	if err != nil {
		return -1
	}
	n, pid := 0, "pid "+strconv.Itoa(os.Getpid())+" "
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, " type RC ") && strings.Contains(l+" ", pid) {
			n++
		}
	}
	return n
}

// TestAllReduceFootprint runs an allreduce-only job of 8 in-process
// ranks, small and large, and reports what the ranks hold: queue pairs
// (counted by the kernel) and descriptors, per rank. The ranks use the
// partners of recursive doubling and of the large-message algorithm, far
// fewer than the 7 peers each; descriptors do not grow with either.
func TestAllReduceFootprint(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	const n = 8
	fds0, kinds0 := openFDs(t), fdKinds()
	ts := newMesh(t, n, Options{})
	fds1, qps1 := openFDs(t), queuePairs()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sizes := []int{1 << 10, 4 << 20}
	if testing.Short() {
		sizes = sizes[:1] // the large one takes long under emulation
	}
	for _, size := range sizes {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = collectives.NewGroup(ts[r], collectives.Options{}).AllReduce(ctx, make([]byte, size), reduce.Float32, reduce.Sum)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("allreduce of %d bytes, rank %d: %v", size, r, err)
			}
		}
		fds, qps := openFDs(t), queuePairs()
		t.Logf("after an allreduce of %d bytes: %.2f queue pairs per rank, %.2f descriptors per rank (%.2f after Connect, %d queue pairs then)",
			size, float64(qps)/n, float64(fds-fds0)/n, float64(fds1-fds0)/n, qps1)
		t.Logf("descriptors by kind: before Connect %v, now %v", kinds0, fdKinds())
		if qps > 0 && qps >= n*(n-1) {
			t.Errorf("%d queue pairs for %d ranks: every rank made one to every peer", qps, n)
		}
	}
}
