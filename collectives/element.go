package collectives

import "github.com/gocoll/gocoll/internal/reduce"

// DType is the element type of a Group call's buffers, which are bytes:
// the buffer holds len/Size() elements of it, in the machine's byte
// order. Float16 is IEEE 754 binary16 and BFloat16 the top 16 bits of a
// float32, each stored as a uint16. It is the kernels' own type
// (internal/reduce), named here so that a program calling Group can name
// it too.
type DType = reduce.DType

// The element types.
const (
	Float32, Float64              = reduce.Float32, reduce.Float64
	Float16, BFloat16             = reduce.Float16, reduce.BFloat16
	Int8, Int16, Int32, Int64     = reduce.Int8, reduce.Int16, reduce.Int32, reduce.Int64
	Uint8, Uint16, Uint32, Uint64 = reduce.Uint8, reduce.Uint16, reduce.Uint32, reduce.Uint64
)

// Op is a reduction's operation; comm.Op is the same set. Avg is Sum
// divided by the number of ranks; ExactSum is the correctly rounded sum
// (see the package doc), Sum on integers.
type Op = reduce.Op

// The reduction operations.
const Sum, Prod, Min, Max, Avg, ExactSum = reduce.Sum, reduce.Prod, reduce.Min, reduce.Max, reduce.Avg, reduce.ExactSum
