//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport/shm"
)

// BenchmarkPingPong is the round trip of an 8-byte message between two
// ranks of this process: two transport sends and two receives.
func BenchmarkPingPong(b *testing.B) {
	ts := mesh(b, 2, shm.Options{})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			m, err := ts[1].Recv(ctx, 0)
			if err != nil {
				done <- err
				return
			}
			ts[1].Release(m)
			if err := ts[1].Send(ctx, 0, make([]byte, 8)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	p := make([]byte, 8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ts[0].Send(ctx, 1, p); err != nil {
			b.Fatal(err)
		}
		m, err := ts[0].Recv(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		ts[0].Release(m)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAllReduce8 is an 8-byte allreduce between two ranks of this
// process, through the collectives layer.
func BenchmarkAllReduce8(b *testing.B) {
	ts := mesh(b, 2, shm.Options{})
	g := []*collectives.Group{collectives.NewGroup(ts[0], collectives.Options{}), collectives.NewGroup(ts[1], collectives.Options{})}
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 8)
		for i := 0; i < b.N; i++ {
			if err := g[1].AllReduce(ctx, buf, reduce.Float32, reduce.Sum); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, 8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := g[0].AllReduce(ctx, buf, reduce.Float32, reduce.Sum); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSegment is one ring-allreduce step's work on a segment of
// float32s, both ends in one goroutine: the sender's copy of the body
// behind a head (the mux's header, or that and the call's) into the ring,
// and the receiver's reduce out of it into a 64-byte-aligned buffer. What
// it measures is the memory work alone, which the body's alignment in
// the slot decides, not the wait for a peer.
func BenchmarkSegment(b *testing.B) {
	for _, head := range []int{16, 48} {
		// The largest is a channel's segment in a default slot: the
		// slot less the mux's and the call's headers, to 64 bytes.
		for _, size := range []int{64 << 10, shm.DefaultSlotSize - 64} {
			b.Run(fmt.Sprintf("head=%d/size=%d", head, size), func(b *testing.B) {
				ts := mesh(b, 2, shm.Options{})
				ctx := context.Background()
				h, body := make([]byte, head), make([]byte, size)
				dst := alignedFloats(size)
				b.SetBytes(int64(size))
				// The thread's CPU time, beside the wall time: on a
				// shared machine the wall time is mostly other work's.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				cpu0 := threadCPU(b)
				for i := 0; i < b.N; i++ {
					if _, err := ts[0].SendParts(ctx, 1, h, body, true); err != nil {
						b.Fatal(err)
					}
					m, err := ts[1].Recv(ctx, 0)
					if err != nil {
						b.Fatal(err)
					}
					reduce.Reduce(reduce.Float32, reduce.Sum, dst, dst, m.Data[head:])
					ts[1].Release(m)
				}
				b.ReportMetric(float64(threadCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// threadCPU is the CPU time of the calling thread, in nanoseconds.
func threadCPU(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}

// alignedFloats is n zero bytes starting on a 64-byte boundary.
func alignedFloats(n int) []byte {
	b := make([]byte, n+63)
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & 63)
	return b[skip : skip+n]
}
