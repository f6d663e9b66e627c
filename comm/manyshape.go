package comm

import (
	"context"
	"fmt"
	"hash/fnv"
	"unsafe"

	"github.com/gocoll/gocoll/internal/reduce"
)

// manyShapes remembers the layouts (element type and buffer lengths)
// AllReduceMany has checked on a communicator. Every rank sees the same
// calls in the same order, so every rank's set is the same, and all check
// a layout the first time they see it, together. Only a call's goroutine
// in its turn touches it, so it needs no lock.
type manyShapes map[uint64]struct{}

// manyShapesMax bounds the layouts remembered; a program that makes a
// new one every call forgets them all at once, on every rank alike.
const manyShapesMax = 64

func shapeKey(dt reduce.DType, lens []int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	b[0] = byte(dt)
	h.Write(b[:1])
	for _, n := range lens {
		for i := range b {
			b[i] = byte(uint64(n) >> (8 * i))
		}
		h.Write(b[:])
	}
	return h.Sum64()
}

// checkShape makes sure, the first time this communicator's ranks call
// AllReduceMany with a layout, that they all pass as many buffers of the
// same lengths, and otherwise fails every rank alike with ErrMismatch
// naming the first buffer that differs and its lengths across the ranks:
// the packed totals alone would not say which, and equal totals of
// differently split buffers would reduce the wrong elements together. It
// costs two small allreduces on a layout's first call, none after.
func (c *Communicator) checkShape(ctx context.Context, dt reduce.DType, lens []int) error {
	if c.cfg.Size == 1 {
		return nil
	}
	key := shapeKey(dt, lens)
	if _, ok := c.ext.shapes[key]; ok {
		return nil
	}
	k := int64(len(lens))
	n := [2]int64{k, -k}
	if err := c.g.AllReduce(ctx, int64Bytes(n[:]), reduce.Int64, reduce.Max); err != nil {
		return err
	}
	if n[0] != -n[1] {
		return fmt.Errorf("allreduce: the ranks pass from %d to %d buffers to AllReduceMany, this rank %d: %w", -n[1], n[0], k, ErrMismatch)
	}
	total := 0
	w := make([]int64, 2*len(lens))
	for i, l := range lens {
		w[2*i], w[2*i+1] = int64(l), -int64(l)
		total += l
	}
	if err := c.g.AllReduce(ctx, int64Bytes(w), reduce.Int64, reduce.Max); err != nil {
		return err
	}
	for i, l := range lens {
		if lo, hi := -w[2*i+1], w[2*i]; lo != hi {
			return fmt.Errorf("allreduce: AllReduceMany's buffer %d of %d holds from %d to %d elements across the ranks, %d on this rank (packed total %d here): %w",
				i, len(lens), lo, hi, l, total, ErrMismatch)
		}
	}
	if c.ext.shapes == nil || len(c.ext.shapes) >= manyShapesMax {
		c.ext.shapes = manyShapes{}
	}
	c.ext.shapes[key] = struct{}{}
	return nil
}

func int64Bytes(s []int64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
}
