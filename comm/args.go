package comm

import (
	"fmt"
	"unsafe"

	"github.com/gocoll/gocoll/internal/reduce"
)

func checkOp[T Element](what string, op Op) error { return checkDTypeOp(what, dtypeOf[T](), op) }

// checkDTypeOp is checkOp for a known type. The check that passes is
// a few comparisons; the errors are built out of line, for an 8-byte
// allreduce pays for the frame they would need on every call.
func checkDTypeOp(what string, dt reduce.DType, op Op) error {
	if dt.Valid() && reduce.Op(op).Valid() && (reduce.Op(op) != reduce.Avg || dt.IsFloat()) {
		return nil
	}
	return opError(what, dt, op)
}

//go:noinline
func opError(what string, dt reduce.DType, op Op) error {
	if !reduce.Op(op).Valid() {
		return fmt.Errorf("comm: %s: unknown op %d (want Sum, Prod, Min, Max, Avg or ExactSum): %w", what, op, ErrInvalid)
	}
	if err := reduce.Check(dt, reduce.Op(op)); err != nil {
		return fmt.Errorf("comm: %s: %w: %w", what, ErrUnsupported, err)
	}
	return nil
}

// overlap reports whether a and b share any memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// same reports whether a and b are exactly the same memory.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func errNilContext(what string) error {
	return fmt.Errorf("comm: %s: nil context (pass context.Background()): %w", what, ErrInvalid)
}

func errNil(what string) error {
	return fmt.Errorf("comm: %s: nil *Communicator (Init or New failed?): %w", what, ErrInvalid)
}

func checkRoot(c *Communicator, what string, root int) error {
	if root < 0 || root >= c.Size() {
		return fmt.Errorf("comm: %s: root %d out of range [0, %d): %w", what, root, c.Size(), ErrInvalid)
	}
	return nil
}

// countOffsets checks a count list (one non-negative count per rank) and
// returns the element offsets of the blocks, Size()+1 of them.
func countOffsets(c *Communicator, what, name string, counts []int) ([]int, error) {
	n := c.Size()
	if len(counts) != n {
		return nil, fmt.Errorf("comm: %s: len(%s) = %d, want one per rank, %d: %w", what, name, len(counts), n, ErrInvalid)
	}
	offs := make([]int, n+1)
	for q, k := range counts {
		if k < 0 {
			return nil, fmt.Errorf("comm: %s: %s[%d] = %d is negative: %w", what, name, q, k, ErrInvalid)
		}
		offs[q+1] = offs[q] + k
	}
	return offs, nil
}
