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

// resources reads the device's resource counts from the kernel
// (rdma-core's `rdma resource show`: "0: rxe0: pd 1 cq 1 qp 1 ... mr 0
// ..."), summed over devices, or nil without the tool.
func resources() map[string]int {
	out, err := exec.Command("rdma", "resource", "show").Output()
	if err != nil {
		return nil
	}
	m := map[string]int{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		for i := 2; i+1 < len(f); i += 2 {
			if n, err := strconv.Atoi(f[i+1]); err == nil {
				m[f[i]] += n
			}
		}
	}
	return m
}

// TestAllReduceFootprint runs an allreduce-only job of 8 in-process
// ranks, small and large, and reports what the ranks hold: queue pairs
// and memory registrations (counted by the kernel) and descriptors, per
// rank; the descriptors include the test's store connections, two per
// rank, client and server. The ranks use the partners of recursive
// doubling and of the large-message algorithm, fewer than the 7 peers
// each; descriptors grow with neither.
func TestAllReduceFootprint(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	const n = 8
	fds0, kinds0, res0 := openFDs(t), fdKinds(), resources()
	ts := newMesh(t, n, Options{})
	fds1, res1 := openFDs(t), resources()
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
		fds, res := openFDs(t), resources()
		t.Logf("after an allreduce of %d bytes: per rank %.2f queue pairs and %.2f memory registrations (after Connect: %.2f and %.2f), %.2f descriptors (%.2f after Connect)",
			size, float64(res["qp"]-res0["qp"])/n, float64(res["mr"]-res0["mr"])/n,
			float64(res1["qp"]-res0["qp"])/n, float64(res1["mr"]-res0["mr"])/n,
			float64(fds-fds0)/n, float64(fds1-fds0)/n)
		t.Logf("descriptors by kind: before Connect %v, now %v", kinds0, fdKinds())
		// Both algorithms pair rank r with r^1, r^2 and r^4 (recursive
		// doubling, and Rabenseifner's halving on 8 ranks): 3 queue
		// pairs a rank, where the full mesh had 7.
		for r, tr := range ts {
			if got := tr.(*Transport).queuePairs(); got != 3 {
				t.Errorf("after an allreduce of %d bytes rank %d holds %d queue pairs, want 3 (r^1, r^2, r^4)", size, r, got)
			}
		}
		if res != nil && res["qp"]-res0["qp"] != 3*n {
			t.Errorf("the kernel counts %d queue pairs for %d ranks, want %d", res["qp"]-res0["qp"], n, 3*n)
		}
	}
}
