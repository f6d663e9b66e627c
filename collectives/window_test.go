package collectives_test

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
)

// slices is a PeerReader over the ranks' buffers in this process, as
// comm.Register's reader is over other processes'.
type slices [][]byte

func (s slices) ReadPeer(q, off int, dst []byte) error {
	copy(dst, s[q][off:])
	return nil
}

// TestSingleCopyRead: the single copy of buffers read through a
// PeerReader, on 2, 3, 4 and 16 ranks with no limit on the rank count
// (Options.SingleCopyReadRanks 0), has the ring's bits, hands the
// transport nothing, and moves (5n-3)/n bytes per byte per rank
// (docs/traffic.md): the mapped path's bound, 3 - 1/n, plus the reads
// of the peers' blocks into scratch, which are copies.
func TestSingleCopyRead(t *testing.T) {
	const size = 1<<20 + 12 // from the floor, in odd blocks longer than a piece
	for _, n := range []int{2, 3, 4, 16} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			input := func(r int) []byte {
				b := make([]byte, size)
				for i := 0; i < size/4; i++ {
					binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r*7+i%13)/10))
				}
				return b
			}
			run := func(read bool) ([][]byte, []collectives.Traffic) {
				mesh, bufs, tallies := newPipes(n), make(slices, n), make([]collectives.Traffic, n)
				for r := range bufs {
					bufs[r] = input(r)
				}
				errs := onRanks(n, func(r int) error {
					opts := collectives.Options{Traffic: &tallies[r], SmallAllReduce: 64 << 10, SingleCopyMin: 1 << 20}
					if !read {
						opts.Algos = map[collectives.Kind]collectives.Algo{collectives.AllReduce: collectives.Ring}
						return collectives.NewGroup(mesh[r], opts).AllReduce(ctx, bufs[r], reduce.Float32, reduce.Sum)
					}
					return collectives.NewGroup(mesh[r], opts).SingleCopyAllReduceRead(ctx, bufs[r], bufs, reduce.Float32, reduce.Sum, 7)
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				return bufs, tallies
			}
			got, tallies := run(true)
			ring, _ := run(false)
			for r := range got {
				if string(got[r]) != string(ring[0]) {
					t.Fatalf("rank %d's result differs from the ring's", r)
				}
			}
			var sum collectives.TrafficCounts
			for i := range tallies {
				c := tallies[i].Counts()
				sum.Sent += c.Sent
				sum.ReduceRead += c.ReduceRead
				sum.ReduceWritten += c.ReduceWritten
				sum.Copied += c.Copied
			}
			S := int64(size)
			want := collectives.TrafficCounts{ReduceRead: int64(n) * S, ReduceWritten: S, Copied: 2 * int64(n-1) * S}
			if sum != want {
				t.Errorf("counted %+v, want %+v", sum, want)
			}
		})
	}
}
