package collectives_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// pipes is an in-process mesh whose sends copy the payload once, as the
// shared-memory rings do, into queues deep enough that no collective here
// waits for credit.
type pipes struct {
	rank, size int
	in         []chan []byte // in[p]: messages from p
	mesh       []*pipes
}

func newPipes(n int) []*pipes {
	m := make([]*pipes, n)
	for r := range m {
		m[r] = &pipes{rank: r, size: n, in: make([]chan []byte, n), mesh: m}
		for p := range m[r].in {
			m[r].in[p] = make(chan []byte, 4096)
		}
	}
	return m
}

func (p *pipes) Rank() int       { return p.rank }
func (p *pipes) Size() int       { return p.size }
func (p *pipes) MaxMessage() int { return 64 << 10 }
func (p *pipes) Close() error    { return nil }

func (p *pipes) Send(ctx context.Context, to int, b []byte) error {
	select {
	case p.mesh[to].in[p.rank] <- append([]byte(nil), b...):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipes) Recv(ctx context.Context, from int) (transport.Message, error) {
	select {
	case b := <-p.in[from]:
		return transport.Message{Data: b, Peer: int32(from)}, nil
	case <-ctx.Done():
		return transport.Message{}, ctx.Err()
	}
}

func (p *pipes) Release(transport.Message) {}

// TestTrafficModel pins the bytes each allreduce algorithm moves (see
// docs/traffic.md) at 2, 4 and 16 ranks, summed over the ranks, for an
// allreduce of S bytes: the algorithms that reduce each block once and
// copy each result once (ring, Rabenseifner, tree, pairwise, hier and
// pipelined hier) send
// 2(n-1)S in all, reduce (n-1)S (reading twice that, writing it once) and
// copy (n-1)S, 9(n-1)S moved against the bound's (3n-1)S; recursive
// doubling sends, and reduces, the whole buffer log2(n) times on every
// rank. The tree also pins its root's share, the most any rank moves.
// The single copy (buffers every rank reads in place) sends nothing,
// reads every rank's input once to reduce it (nS, S written) and copies
// (n-1)S: the bound itself.
func TestTrafficModel(t *testing.T) {
	const S = 1 << 20 // float32, divisible into 16 equal chunks
	ring := func(n int64) collectives.TrafficCounts {
		return collectives.TrafficCounts{Sent: 2 * (n - 1) * S, ReduceRead: 2 * (n - 1) * S, ReduceWritten: (n - 1) * S, Copied: (n - 1) * S}
	}
	log2 := func(n int64) int64 {
		k := int64(0)
		for ; n > 1; n >>= 1 {
			k++
		}
		return k
	}
	rd := func(n int64) collectives.TrafficCounts {
		k := n * log2(n)
		return collectives.TrafficCounts{Sent: k * S, ReduceRead: 2 * k * S, ReduceWritten: k * S}
	}
	single := func(n int64) collectives.TrafficCounts {
		return collectives.TrafficCounts{ReduceRead: n * S, ReduceWritten: S, Copied: (n - 1) * S}
	}
	type tc struct {
		algo  collectives.Algo
		n     int
		hosts int // 0: one host
		want  func(n int64) collectives.TrafficCounts
	}
	var cases []tc
	for _, n := range []int{2, 4, 16} {
		cases = append(cases,
			tc{collectives.Ring, n, 0, ring},
			tc{collectives.Rabenseifner, n, 0, ring},
			tc{collectives.Tree, n, 0, ring},
			tc{collectives.Pairwise, n, 0, ring},
			tc{collectives.RecursiveDoubling, n, 0, rd},
			tc{collectives.SingleCopy, n, 0, single})
		if n > 2 {
			// Hier needs a host with several ranks and more than one
			// host: two of n/2.
			cases = append(cases, tc{collectives.Hier, n, 2, ring}, tc{collectives.HierPipe, n, 2, ring})
		}
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v/%d", c.algo, c.n), func(t *testing.T) {
			per := runCounted(t, c.algo, c.n, c.hosts, S)
			var sum collectives.TrafficCounts
			for _, k := range per {
				sum.Sent += k.Sent
				sum.ReduceRead += k.ReduceRead
				sum.ReduceWritten += k.ReduceWritten
				sum.Copied += k.Copied
			}
			if want := c.want(int64(c.n)); sum != want {
				t.Errorf("counted %+v over %d ranks, the model says %+v", sum, c.n, want)
			}
			bound := int64(3*c.n-1) * S
			if sum.Moved() < bound {
				t.Errorf("moved %d bytes, below the bound's %d: the counts miss something", sum.Moved(), bound)
			}
			if c.algo == collectives.SingleCopy && sum.Moved() != bound {
				t.Errorf("the single copy moved %d bytes, not the bound's %d", sum.Moved(), bound)
			}
			if c.algo == collectives.Tree {
				// Rank 0 reduces what each of its log2(n) children sends
				// and sends each the result.
				k := int64(0)
				for m := c.n; m > 1; m >>= 1 {
					k++
				}
				root := collectives.TrafficCounts{Sent: k * S, ReduceRead: 2 * k * S, ReduceWritten: k * S}
				if per[0] != root {
					t.Errorf("root counted %+v, want %+v", per[0], root)
				}
			}
		})
	}
}

// runCounted runs one float32 sum allreduce of size bytes on n goroutine
// ranks with algo forced, checks every rank's result, and returns what
// each rank's Traffic counted. SingleCopy is not forced but taken: the
// ranks' buffers are one another's views, as comm.Alloc's would be.
func runCounted(t *testing.T, algo collectives.Algo, n, hosts, size int) []collectives.TrafficCounts {
	t.Helper()
	var hostOf []int
	if hosts > 0 {
		for r := 0; r < n; r++ {
			hostOf = append(hostOf, r*hosts/n)
		}
	}
	mesh := newPipes(n)
	tallies := make([]collectives.Traffic, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	views := make([][]byte, n)
	for r := range views {
		views[r] = make([]byte, size)
	}
	errs := onRanks(n, func(r int) error {
		algos := map[collectives.Kind]collectives.Algo{collectives.AllReduce: algo}
		if algo == collectives.SingleCopy {
			algos = nil
		}
		g := collectives.NewGroup(mesh[r], collectives.Options{
			Algos: algos, Hosts: hostOf, Traffic: &tallies[r],
			// HierPipe in stages of 64 KiB: 16 of them, the same
			// bytes moved as by Hier.
			HierSegment: 64 << 10})
		buf := views[r]
		for i := 0; i < size/4; i++ {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(r+i%7)))
		}
		var err error
		if algo == collectives.SingleCopy {
			err = g.SingleCopyAllReduce(ctx, views, reduce.Float32, reduce.Sum, 0)
		} else {
			err = g.AllReduce(ctx, buf, reduce.Float32, reduce.Sum)
		}
		if err != nil {
			return err
		}
		for i := 0; i < size/4; i++ {
			got := math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			if want := float32(n*(n-1)/2 + n*(i%7)); got != want {
				return fmt.Errorf("element %d is %v, want %v", i, got, want)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	counts := make([]collectives.TrafficCounts, n)
	for r := range tallies {
		counts[r] = tallies[r].Counts()
	}
	return counts
}
