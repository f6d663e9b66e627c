package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// smallSizes are the counts every (type, op) pair runs; the heavy ones also
// run counts spanning several messages.
func smallSizes(n, maxMsg, es int, heavy bool) []int {
	s := []int{0, 1, n + 1, 61}
	if heavy {
		s = append(s, maxMsg/es+maxMsg/es/2+17)
	}
	return s
}

func testReduce(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	j := newJob(ts, nil)
	for _, dt := range suiteTypes() {
		for _, op := range suiteOps(dt) {
			if reduce.Check(dt, op) != nil {
				continue
			}
			roots := []int{n - 1}
			if heavy(dt, op) && dt == reduce.Float32 {
				roots = uniq(0, n-1, n/2)
			}
			for _, root := range roots {
				for _, count := range smallSizes(n, ts[0].MaxMessage(), dt.Size(), heavy(dt, op)) {
					t.Run(fmt.Sprintf("%v/%v/root=%d/%d", dt, op, root, count), func(t *testing.T) {
						es := dt.Size()
						sends := make([][]byte, n)
						orig := make([][]byte, n)
						recv := alignedBytes(count * es)
						for r := range sends {
							sends[r] = fill(op, dt, r, count)
							orig[r] = bytes.Clone(sends[r])
						}
						want := alignedBytes(count * es)
						for i := 0; i < count; i++ {
							put(dt, want, i, reference(op, dt, n, i))
						}
						j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
							var out []byte
							if r == root {
								out = recv
							}
							return g.Reduce(ctx, sends[r], out, dt, op, root)
						})
						if i := firstDiff(recv, want, es); i >= 0 {
							t.Fatalf("root %d element %d: got %v, want %v", root, i, get(dt, recv, i), get(dt, want, i))
						}
						for r := range sends {
							if !bytes.Equal(sends[r], orig[r]) {
								t.Fatalf("rank %d: reduce wrote into its send buffer", r)
							}
						}
					})
				}
			}
		}
	}
	// In place at the root: send and recv the same buffer.
	t.Run("inplace", func(t *testing.T) {
		bufs := make([][]byte, n)
		for r := range bufs {
			bufs[r] = fill(reduce.Sum, reduce.Int32, r, 33)
		}
		j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
			return g.Reduce(ctx, bufs[r], bufs[r], reduce.Int32, reduce.Sum, 0)
		})
		for i := 0; i < 33; i++ {
			if got, want := get(reduce.Int32, bufs[0], i), reference(reduce.Sum, reduce.Int32, n, i); got != want {
				t.Fatalf("element %d: got %v, want %v", i, got, want)
			}
		}
	})
}

// copyTypes are the types the data-movement collectives run with every
// size; every other type runs the small sizes.
func copyHeavy(dt reduce.DType) bool {
	return dt == reduce.Uint8 || dt == reduce.Float16 || dt == reduce.Float64
}

func testGather(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	j := newJob(ts, nil)
	for _, dt := range suiteTypes() {
		for _, root := range uniq(0, n-1) {
			for _, count := range smallSizes(n, ts[0].MaxMessage(), dt.Size(), copyHeavy(dt)) {
				t.Run(fmt.Sprintf("%v/root=%d/%d", dt, root, count), func(t *testing.T) {
					es := dt.Size()
					sends := make([][]byte, n)
					want := alignedBytes(n * count * es)
					for r := range sends {
						sends[r] = fill(reduce.Sum, dt, r+5, count)
						copy(want[r*count*es:], sends[r])
					}
					recv := alignedBytes(n * count * es)
					j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
						if r == root {
							return g.Gather(ctx, sends[r], recv, dt, root)
						}
						return g.Gather(ctx, sends[r], nil, dt, root)
					})
					if i := firstDiff(recv, want, es); i >= 0 {
						t.Fatalf("element %d (from rank %d): got %v, want %v", i, i/max(count, 1), get(dt, recv, i), get(dt, want, i))
					}
				})
			}
		}
	}
}

func testScatter(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	j := newJob(ts, nil)
	for _, dt := range suiteTypes() {
		for _, root := range uniq(0, n-1) {
			for _, count := range smallSizes(n, ts[0].MaxMessage(), dt.Size(), copyHeavy(dt)) {
				t.Run(fmt.Sprintf("%v/root=%d/%d", dt, root, count), func(t *testing.T) {
					es := dt.Size()
					send := fill(reduce.Sum, dt, 11, n*count)
					recvs := make([][]byte, n)
					for r := range recvs {
						recvs[r] = alignedBytes(count * es)
					}
					j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
						if r == root {
							return g.Scatter(ctx, send, recvs[r], dt, root)
						}
						return g.Scatter(ctx, nil, recvs[r], dt, root)
					})
					for r := range recvs {
						block := send[r*count*es : (r+1)*count*es]
						if i := firstDiff(recvs[r], block, es); i >= 0 {
							t.Fatalf("rank %d element %d: got %v, want %v", r, i, get(dt, recvs[r], i), get(dt, block, i))
						}
					}
				})
			}
		}
	}
}

// unequal are per-rank count patterns: zeros among non-zeros, all zero,
// one rank far larger than the rest (several messages), and distinct
// counts for every rank.
func unequal(n, maxMsg, es int) map[string][]int {
	big := maxMsg/es + 17
	pats := map[string][]int{}
	zeros, allZero, oneBig, distinct := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	for q := 0; q < n; q++ {
		zeros[q] = q % 3
		oneBig[q] = 1
		distinct[q] = 2*q + 3
	}
	oneBig[n-1] = big
	pats["zeros"], pats["allzero"], pats["onebig"], pats["distinct"] = zeros, allZero, oneBig, distinct
	return pats
}

func offsets(counts []int) []int {
	o := make([]int, len(counts)+1)
	for q, c := range counts {
		o[q+1] = o[q] + c
	}
	return o
}

func testAllGatherV(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	j := newJob(ts, nil)
	for _, dt := range suiteTypes() {
		for name, counts := range unequal(n, ts[0].MaxMessage(), dt.Size()) {
			if name == "onebig" && !copyHeavy(dt) {
				continue
			}
			t.Run(fmt.Sprintf("%v/%s", dt, name), func(t *testing.T) {
				es, o := dt.Size(), offsets(counts)
				want := alignedBytes(o[n] * es)
				sends := make([][]byte, n)
				recvs := make([][]byte, n)
				for r := range sends {
					sends[r] = fill(reduce.Sum, dt, r+2, counts[r])
					copy(want[o[r]*es:], sends[r])
					recvs[r] = alignedBytes(o[n] * es)
				}
				j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
					return g.AllGatherV(ctx, sends[r], recvs[r], counts, dt)
				})
				for r := range recvs {
					if i := firstDiff(recvs[r], want, es); i >= 0 {
						t.Fatalf("rank %d element %d: got %v, want %v", r, i, get(dt, recvs[r], i), get(dt, want, i))
					}
				}
			})
		}
	}
}

func testReduceScatterV(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	// As testReduceScatter: auto, and each algorithm forced on the heavy
	// pairs.
	jobs := algoJobs(ts, collectives.ReduceScatterV, "ring", "pairwise")
	for _, dt := range suiteTypes() {
		for _, op := range suiteOps(dt) {
			if reduce.Check(dt, op) != nil {
				continue
			}
			for name, counts := range unequal(n, ts[0].MaxMessage(), dt.Size()) {
				if name == "onebig" && !heavy(dt, op) || name == "allzero" && op != reduce.Sum {
					continue
				}
				es, o := dt.Size(), offsets(counts)
				ins, want := reduceCase(op, dt, n, o[n])
				for _, j := range jobs {
					if j.name != "auto" && !heavy(dt, op) {
						continue
					}
					t.Run(fmt.Sprintf("%s/%v/%v/%s", j.name, dt, op, name), func(t *testing.T) {
						sends := clone(ins) // the collective may use them as scratch
						recvs := make([][]byte, n)
						for r := range recvs {
							recvs[r] = alignedBytes(counts[r] * es)
						}
						j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
							return g.ReduceScatterV(ctx, sends[r], recvs[r], counts, dt, op)
						})
						for r := range recvs {
							block := want[o[r]*es : o[r+1]*es]
							if i := firstDiff(recvs[r], block, es); i >= 0 {
								t.Fatalf("rank %d element %d: got %v, want %v", r, i, get(dt, recvs[r], i), get(dt, block, i))
							}
						}
					})
				}
			}
		}
	}
}

func testAllToAll(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	j := newJob(ts, nil)
	for _, dt := range suiteTypes() {
		for _, count := range smallSizes(n, ts[0].MaxMessage(), dt.Size(), copyHeavy(dt)) {
			t.Run(fmt.Sprintf("%v/%d", dt, count), func(t *testing.T) {
				es, b := dt.Size(), count*dt.Size()
				sends := make([][]byte, n)
				recvs := make([][]byte, n)
				for r := range sends {
					sends[r] = fill(reduce.Sum, dt, r+7, n*count)
					recvs[r] = alignedBytes(n * b)
				}
				j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
					return g.AllToAll(ctx, sends[r], recvs[r], dt)
				})
				for r := range recvs {
					for q := 0; q < n; q++ {
						got, want := recvs[r][q*b:(q+1)*b], sends[q][r*b:(r+1)*b]
						if i := firstDiff(got, want, es); i >= 0 {
							t.Fatalf("rank %d block from rank %d element %d: got %v, want %v", r, q, i, get(dt, got, i), get(dt, want, i))
						}
					}
				}
			})
		}
	}
}

func testAllToAllV(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	j := newJob(ts, nil)
	big := ts[0].MaxMessage() + 13
	// cnt(p, q) is what rank p sends rank q: zeros, small and one pair
	// that spans several messages.
	cnt := func(p, q int, dt reduce.DType) int {
		if p == 0 && q == n-1 && copyHeavy(dt) {
			return big / dt.Size()
		}
		return (p*3 + q*5) % 7
	}
	for _, dt := range suiteTypes() {
		t.Run(dt.String(), func(t *testing.T) {
			es := dt.Size()
			sc, rc := make([][]int, n), make([][]int, n)
			sends, recvs := make([][]byte, n), make([][]byte, n)
			for p := 0; p < n; p++ {
				sc[p], rc[p] = make([]int, n), make([]int, n)
				for q := 0; q < n; q++ {
					sc[p][q], rc[p][q] = cnt(p, q, dt), cnt(q, p, dt)
				}
				sends[p] = fill(reduce.Sum, dt, p+1, offsets(sc[p])[n])
				recvs[p] = alignedBytes(offsets(rc[p])[n] * es)
			}
			j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
				return g.AllToAllV(ctx, sends[r], sc[r], recvs[r], rc[r], dt)
			})
			for r := 0; r < n; r++ {
				ro := offsets(rc[r])
				for q := 0; q < n; q++ {
					so := offsets(sc[q])
					got, want := recvs[r][ro[q]*es:ro[q+1]*es], sends[q][so[r]*es:so[r+1]*es]
					if i := firstDiff(got, want, es); i >= 0 {
						t.Fatalf("rank %d block from rank %d element %d: got %v, want %v", r, q, i, get(dt, got, i), get(dt, want, i))
					}
				}
			}
		})
	}
}

// testInvalid: every bad argument is refused on every rank before anything
// is sent, with ErrInvalid and a message naming the fault, so the job is
// still in step afterwards (a barrier and a sum still work).
func testInvalid(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	j := newJob(ts, nil)
	f32 := reduce.Float32
	cases := []struct {
		name, says string
		call       func(ctx context.Context, r int, g *collectives.Group) error
	}{
		{"reduce root", "root -1", func(ctx context.Context, r int, g *collectives.Group) error {
			return g.Reduce(ctx, make([]byte, 8), make([]byte, 8), f32, reduce.Sum, -1)
		}},
		{"reduce recv", "receive buffer of 4 bytes", func(ctx context.Context, r int, g *collectives.Group) error {
			return g.Reduce(ctx, make([]byte, 8), make([]byte, 4), f32, reduce.Sum, r)
		}},
		{"gather root", fmt.Sprintf("root %d", n), func(ctx context.Context, r int, g *collectives.Group) error {
			return g.Gather(ctx, make([]byte, 8), nil, f32, n)
		}},
		{"gather recv", "want", func(ctx context.Context, r int, g *collectives.Group) error {
			return g.Gather(ctx, make([]byte, 8), make([]byte, 8*n+4), f32, r)
		}},
		{"scatter send", "send buffer", func(ctx context.Context, r int, g *collectives.Group) error {
			return g.Scatter(ctx, make([]byte, 4), make([]byte, 8), f32, r)
		}},
		{"allgatherv counts length", "counts for", func(ctx context.Context, r int, g *collectives.Group) error {
			return g.AllGatherV(ctx, nil, nil, make([]int, n+1), f32)
		}},
		{"allgatherv negative", "is negative", func(ctx context.Context, r int, g *collectives.Group) error {
			c := make([]int, n)
			c[n-1] = -1
			return g.AllGatherV(ctx, nil, nil, c, f32)
		}},
		{"allgatherv send", "counts[", func(ctx context.Context, r int, g *collectives.Group) error {
			c := make([]int, n)
			return g.AllGatherV(ctx, make([]byte, 4), nil, c, f32)
		}},
		{"allgatherv sum", "sum of counts", func(ctx context.Context, r int, g *collectives.Group) error {
			c := make([]int, n)
			c[r] = 1
			return g.AllGatherV(ctx, make([]byte, 4), make([]byte, 4*n+4), c, f32)
		}},
		{"reducescatterv sum", "sum of counts", func(ctx context.Context, r int, g *collectives.Group) error {
			c := make([]int, n)
			return g.ReduceScatterV(ctx, make([]byte, 4), nil, c, f32, reduce.Sum)
		}},
		{"alltoall blocks", "equal blocks", func(ctx context.Context, r int, g *collectives.Group) error {
			return g.AllToAll(ctx, make([]byte, 4*n+4), make([]byte, 4*n+4), f32)
		}},
		{"alltoallv self", "to itself", func(ctx context.Context, r int, g *collectives.Group) error {
			sc, rc := make([]int, n), make([]int, n)
			sc[r] = 1
			return g.AllToAllV(ctx, make([]byte, 4), sc, nil, rc, f32)
		}},
		{"alltoallv recv", "sum of recvCounts", func(ctx context.Context, r int, g *collectives.Group) error {
			return g.AllToAllV(ctx, nil, make([]int, n), make([]byte, 4), make([]int, n), f32)
		}},
	}
	for _, tc := range cases {
		if n == 1 && tc.name == "alltoall blocks" {
			continue // any length splits into one block
		}
		t.Run(tc.name, func(t *testing.T) {
			for r, err := range j.run(t, tc.call) {
				if !errors.Is(err, collectives.ErrInvalid) || !bytes.Contains([]byte(err.Error()), []byte(tc.says)) {
					t.Fatalf("rank %d: err = %v, want ErrInvalid saying %q", r, err, tc.says)
				}
			}
		})
	}
	testBarrier(t, ts)
}
