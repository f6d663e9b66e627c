package comm

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"unsafe"
)

// BroadcastValue copies *v from root to every rank: a step counter, an RNG
// state, a config struct, without packing bytes by hand. T must have a
// fixed size and hold no pointers: booleans, numbers, and arrays and
// structs of those. A T holding a pointer, slice, string, map, channel,
// function or interface is refused with ErrInvalid (its bytes would be
// addresses in root's memory); send such state with BroadcastBytes after
// encoding it. Every rank passes the same T and root.
//
// The value travels as its memory, padding included, so int, uint and
// struct layout are those of the platform: every rank of a job must be
// built for the same architecture (a 32-bit rank's int differs in size,
// and the call then fails with ErrMismatch).
//
//	var state struct {
//		Step int
//		Seed uint64
//		LR   float64
//	}
//	err := comm.BroadcastValue(ctx, c, &state, 0)
func BroadcastValue[T any](ctx context.Context, c *Communicator, v *T, root int) error {
	const what = "broadcast"
	if c == nil {
		return errNil(what)
	}
	if v == nil {
		return c.refuse(ctx, what, fmt.Errorf("comm: %s: nil value pointer: %w", what, ErrInvalid))
	}
	if bad := pointerIn(reflect.TypeFor[T]()); bad != "" {
		return c.refuse(ctx, what, fmt.Errorf("comm: %s: value of type %v holds %s, which cannot be copied as bytes between processes (encode it and use BroadcastBytes): %w",
			what, reflect.TypeFor[T](), bad, ErrInvalid))
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
	return Broadcast(ctx, c, b, root)
}

// pointerIn names the first part of t that is not plain data (a pointer,
// slice, string, map, channel, function or interface), or "" if there is
// none: t's bytes then mean the same in every process.
func pointerIn(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	case reflect.Array:
		return pointerIn(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if bad := pointerIn(f.Type); bad != "" {
				return fmt.Sprintf("%s (field %s)", bad, f.Name)
			}
		}
		return ""
	}
	return "a " + t.Kind().String()
}

// BroadcastBytes sends root's b to every rank, whose length the other
// ranks need not know: it returns b on the root and a new slice of root's
// bytes on the others (their b is ignored; nil will do). It is two
// collectives, the length and then the bytes: for a checkpoint, an
// encoded config, a vocabulary.
func BroadcastBytes(ctx context.Context, c *Communicator, b []byte, root int) ([]byte, error) {
	if c == nil {
		return nil, errNil("broadcast")
	}
	n := uint64(len(b))
	if err := BroadcastValue(ctx, c, &n, root); err != nil {
		return nil, err
	}
	if c.Rank() != root {
		if n > math.MaxInt/2 {
			// Every rank gets the same n: the root's, so they all
			// refuse together, and nothing is out of step.
			return nil, fmt.Errorf("comm: broadcast: root %d sends %d bytes, more than this process can hold: %w", root, n, ErrInvalid)
		}
		b = make([]byte, n)
	}
	if err := Broadcast(ctx, c, b, root); err != nil {
		return nil, err
	}
	return b, nil
}

// AllReduceMean makes buf, on every rank, the weighted mean of the ranks'
// bufs: Σ weightᵣ·bufᵣ / Σ weightᵣ, element-wise. A rank whose buf is the
// mean over its own n samples passes weight n, and every rank ends with
// the mean over all samples, however unevenly they were shared out. (Avg
// is right only when every rank holds the same number of samples; see
// Avg.) The products and sums are taken in float64 and the result is
// rounded to T once. Weights must be finite and not negative, and their
// sum positive: a negative or non-finite weight is refused (ErrInvalid,
// breaking the communicator as any refusal does); a zero sum, which every
// rank sees alike, fails every rank with ErrInvalid and leaves buf as it
// was. Every rank passes the same length.
func AllReduceMean[T float32 | float64](ctx context.Context, c *Communicator, buf []T, weight float64) error {
	const what = "allreduce"
	if c == nil {
		return errNil(what)
	}
	if weight < 0 || math.IsNaN(weight) || math.IsInf(weight, 0) {
		return c.refuse(ctx, what, fmt.Errorf("comm: %s: mean weight %v, want a finite number ≥ 0: %w", what, weight, ErrInvalid))
	}
	acc := make([]float64, len(buf)+1)
	for i, x := range buf {
		acc[i] = weight * float64(x)
	}
	acc[len(buf)] = weight
	if err := AllReduce(ctx, c, acc, Sum); err != nil {
		return err
	}
	total := acc[len(buf)]
	if total <= 0 {
		return fmt.Errorf("comm: %s: the mean weights of all %d ranks sum to %v; nothing to average: %w", what, c.Size(), total, ErrInvalid)
	}
	for i := range buf {
		buf[i] = T(acc[i] / total)
	}
	return nil
}
