package reduce

import (
	"errors"
	"math/bits"
	"strconv"
)

// DType identifies the element type of a buffer being reduced.
type DType uint8

// Element types.
const (
	Float32 DType = iota + 1
	Float64
	Int8
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float16  // IEEE 754 binary16, stored as uint16
	BFloat16 // bfloat16 (top 16 bits of a float32), stored as uint16

	maxDType = BFloat16
)

var dtypeInfo = [maxDType + 1]struct {
	name  string
	size  int
	align uintptr // required alignment of the typed view
	float bool
}{
	Float32:  {"float32", 4, alignOf[float32](), true},
	Float64:  {"float64", 8, alignOf[float64](), true},
	Int8:     {"int8", 1, 1, false},
	Int16:    {"int16", 2, alignOf[int16](), false},
	Int32:    {"int32", 4, alignOf[int32](), false},
	Int64:    {"int64", 8, alignOf[int64](), false},
	Uint8:    {"uint8", 1, 1, false},
	Uint16:   {"uint16", 2, alignOf[uint16](), false},
	Uint32:   {"uint32", 4, alignOf[uint32](), false},
	Uint64:   {"uint64", 8, alignOf[uint64](), false},
	Float16:  {"float16", 2, alignOf[uint16](), true},
	BFloat16: {"bfloat16", 2, alignOf[uint16](), true},
}

// Valid reports whether d is one of the defined element types.
func (d DType) Valid() bool { return d >= Float32 && d <= maxDType }

// Count is the number of d elements in n bytes, and whether n bytes are a
// whole number of them (never for an invalid DType). It shifts where a
// plain n/Size() would divide: every size is a power of two, and an
// integer division costs a small collective more than its arithmetic.
func (d DType) Count(n int) (int, bool) {
	if !d.Valid() || n < 0 {
		return 0, false
	}
	shift := bits.TrailingZeros(uint(dtypeInfo[d].size))
	return n >> shift, n&(1<<shift-1) == 0
}

// Size returns the number of bytes per element, or 0 for an invalid DType.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeInfo[d].size
}

// IsFloat reports whether d is a floating-point type (Float32, Float64,
// Float16 or BFloat16).
func (d DType) IsFloat() bool {
	return d.Valid() && dtypeInfo[d].float
}

// String returns the lower-case type name, e.g. "float32" or "bfloat16", or
// "dtype(N)" for an invalid DType.
func (d DType) String() string {
	if !d.Valid() {
		return "dtype(" + strconv.Itoa(int(d)) + ")"
	}
	return dtypeInfo[d].name
}

// Op identifies a reduction operation.
type Op uint8

// Reduction operations.
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
	Avg // reduced as Sum; the caller divides once at the end with Scale
	// ExactSum is the correctly rounded sum (exact.go): on floats only
	// through ExactSum, never Reduce; on integers the same as Sum.
	ExactSum

	maxOp = ExactSum
)

var opNames = [maxOp + 1]string{
	Sum:      "sum",
	Prod:     "prod",
	Min:      "min",
	Max:      "max",
	Avg:      "avg",
	ExactSum: "exactsum",
}

// Valid reports whether o is one of the defined operations.
func (o Op) Valid() bool { return o >= Sum && o <= maxOp }

// String returns the lower-case operation name, e.g. "sum", or "op(N)" for an
// invalid Op.
func (o Op) String() string {
	if !o.Valid() {
		return "op(" + strconv.Itoa(int(o)) + ")"
	}
	return opNames[o]
}

// ErrUnsupported is wrapped by every error returned by Check.
var ErrUnsupported = errors.New("unsupported reduction")

// checkError is the error type returned by Check. Its message is
// self-contained; it unwraps to ErrUnsupported.
type checkError struct{ msg string }

func (e *checkError) Error() string { return e.msg }
func (e *checkError) Unwrap() error { return ErrUnsupported }

// Check reports whether op can be applied to dt. It returns nil if it can,
// and otherwise an error wrapping ErrUnsupported that names the offending
// values: an invalid dtype, an invalid op, or Avg on an integer type (which
// is not defined; use Sum and divide).
func Check(dt DType, op Op) error {
	if dt.Valid() && op.Valid() && (op != Avg || dtypeInfo[dt].float) {
		return nil
	}
	return checkFailed(dt, op)
}

// checkFailed is Check's error, out of line, so that Check, which every
// collective asks, costs a few comparisons when the arguments are good.
//
//go:noinline
func checkFailed(dt DType, op Op) error {
	switch {
	case !dt.Valid():
		return &checkError{"reduce: invalid dtype " + dt.String() + " (op " + op.String() + ")"}
	case !op.Valid():
		return &checkError{"reduce: invalid op " + op.String() + " (dtype " + dt.String() + ")"}
	}
	return &checkError{"reduce: " + op.String() + " is not defined for " + dt.String() + " (use sum and divide)"}
}
