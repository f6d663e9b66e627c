package collectives_test

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand"
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
				return onSlices(t, n, input, func(g func(collectives.Options) *collectives.Group, bufs slices, r int) error {
					opts := collectives.Options{SmallAllReduce: 64 << 10, SingleCopyMin: 1 << 20}
					if !read {
						opts.Algos = map[collectives.Kind]collectives.Algo{collectives.AllReduce: collectives.Ring}
						return g(opts).AllReduce(ctx, bufs[r], reduce.Float32, reduce.Sum)
					}
					return g(opts).SingleCopyAllReduceRead(ctx, bufs[r], bufs, reduce.Float32, reduce.Sum, 7)
				})
			}
			got, tallies := run(true)
			ring, _ := run(false)
			for r := range got {
				if string(got[r]) != string(ring[0]) {
					t.Fatalf("rank %d's result differs from the ring's", r)
				}
			}
			sum := sumTraffic(tallies)
			S := int64(size)
			want := collectives.TrafficCounts{ReduceRead: int64(n) * S, ReduceWritten: S, Copied: 2 * int64(n-1) * S}
			if sum != want {
				t.Errorf("counted %+v, want %+v", sum, want)
			}
		})
	}
}

// TestSingleCopyWide: the single copy of 16-bit Sum, Avg and Prod with
// float32 partials, mapped and read through a PeerReader, on 2 (Avg
// only: Sum and Prod are not wide there), 3, 4 and 9 ranks, has the bits
// of the wide ring forced on the same inputs (rounding ties, subnormals
// and infinities among them) on every rank, and counts the mapped
// path's bytes, 3 - 1/n per byte per rank (read: (5n-3)/n), nothing
// sent: the float32 partials stay in a scratch piece, not in a buffer of
// the call, and no rank fell back to the rings.
func TestSingleCopyWide(t *testing.T) {
	const size = 1<<18 + 6 // from the floor below, blocks longer than readBlock's piece
	specials := map[reduce.DType][]uint16{
		reduce.Float16:  {0x0001, 0x8001, 0x03ff, 0x7c00, 0x3c01, 0xbc01, 0x7bff},
		reduce.BFloat16: {0x0001, 0x8001, 0x007f, 0x7f80, 0x3f81, 0xbf81, 0x7f7f},
	}
	for _, dt := range []reduce.DType{reduce.Float16, reduce.BFloat16} {
		for _, op := range []reduce.Op{reduce.Sum, reduce.Avg, reduce.Prod} {
			for _, n := range []int{2, 3, 4, 9} {
				if n == 2 && op != reduce.Avg {
					continue
				}
				for _, read := range []bool{false, true} {
					t.Run(dt.String()+"/"+op.String()+"/"+strconv.Itoa(n)+"/read="+strconv.FormatBool(read), func(t *testing.T) {
						checkSingleCopyWide(t, dt, op, n, read, size, specials[dt])
					})
				}
			}
		}
	}
}

func checkSingleCopyWide(t *testing.T, dt reduce.DType, op reduce.Op, n int, read bool, size int, specials []uint16) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	input := func(r int) []byte {
		b := make([]byte, size)
		rng := rand.New(rand.NewSource(int64(r)))
		for i := 0; i < size/2; i++ {
			f := float32(rng.NormFloat64())
			if op == reduce.Prod {
				f = 1 + f/16
			}
			h := reduce.F32ToF16(f)
			if dt == reduce.BFloat16 {
				h = reduce.F32ToBF16(f)
			}
			if i%97 == r {
				h = specials[(i/97)%len(specials)]
			}
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		return b
	}
	run := func(single bool) ([][]byte, []collectives.Traffic) {
		return onSlices(t, n, input, func(g func(collectives.Options) *collectives.Group, bufs slices, r int) error {
			opts := collectives.Options{SmallAllReduce: 64 << 10, SingleCopyMin: 1 << 18}
			switch {
			case !single:
				opts.Algos = map[collectives.Kind]collectives.Algo{collectives.AllReduce: collectives.Ring}
				return g(opts).AllReduce(ctx, bufs[r], dt, op)
			case read:
				return g(opts).SingleCopyAllReduceRead(ctx, bufs[r], bufs, dt, op, 7)
			}
			return g(opts).SingleCopyAllReduce(ctx, bufs, dt, op, 7)
		})
	}
	got, tallies := run(true)
	ring, _ := run(false)
	for r := range got {
		for i := 0; i < size; i += 2 {
			if got[r][i] != ring[0][i] || got[r][i+1] != ring[0][i+1] {
				t.Fatalf("rank %d: element %d = %#04x, the wide ring's %#04x", r, i/2,
					binary.LittleEndian.Uint16(got[r][i:]), binary.LittleEndian.Uint16(ring[0][i:]))
			}
		}
	}
	sum := sumTraffic(tallies)
	S := int64(size)
	want := collectives.TrafficCounts{ReduceRead: int64(n) * S, ReduceWritten: S, Copied: int64(n-1) * S}
	if read {
		want.Copied *= 2
	}
	if sum != want {
		t.Errorf("counted %+v, want %+v", sum, want)
	}
}

// onSlices runs call on n goroutine ranks joined by pipes, each rank's
// buffer input(r), and returns the buffers and each rank's counts; g
// makes the rank's group with the options given, counting into its
// tally.
func onSlices(t *testing.T, n int, input func(r int) []byte, call func(g func(collectives.Options) *collectives.Group, bufs slices, r int) error) ([][]byte, []collectives.Traffic) {
	t.Helper()
	mesh, bufs, tallies := newPipes(n), make(slices, n), make([]collectives.Traffic, n)
	for r := range bufs {
		bufs[r] = input(r)
	}
	errs := onRanks(n, func(r int) error {
		g := func(opts collectives.Options) *collectives.Group {
			opts.Traffic = &tallies[r]
			return collectives.NewGroup(mesh[r], opts)
		}
		return call(g, bufs, r)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return bufs, tallies
}

// sumTraffic adds up the ranks' counts.
func sumTraffic(tallies []collectives.Traffic) collectives.TrafficCounts {
	var sum collectives.TrafficCounts
	for i := range tallies {
		c := tallies[i].Counts()
		sum.Sent += c.Sent
		sum.ReduceRead += c.ReduceRead
		sum.ReduceWritten += c.ReduceWritten
		sum.Copied += c.Copied
	}
	return sum
}
