package shm_test

import (
	"context"
	"testing"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport/shm"
)

func BenchmarkZZMux8(b *testing.B) {
	ts := mesh(b, 2, shm.Options{})
	var g [2]*collectives.Group
	for i := range 2 {
		ch, err := collectives.NewMux(ts[i]).Channel(1, []int{0, 1})
		if err != nil {
			b.Fatal(err)
		}
		g[i] = collectives.NewGroup(ch, collectives.Options{})
	}
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
