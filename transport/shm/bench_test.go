//go:build linux

package shm_test

import (
	"context"
	"testing"

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
