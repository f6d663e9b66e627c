package main

import (
	"math"
	"unsafe"

	"github.com/gocoll/gocoll/comm"
)

// dtypeInfo names an element type; run instantiates the benchmark for it.
type dtypeInfo struct {
	name  string
	float bool
	size  int
	run   func(env) error
}

func dt[T comm.Element](name string, float bool) dtypeInfo {
	var zero T
	return dtypeInfo{name: name, float: float, size: int(unsafe.Sizeof(zero)), run: bench[T]}
}

// dtypes is every element type comm carries, in nccl-tests' order.
var dtypes = []dtypeInfo{
	dt[int8]("int8", false), dt[uint8]("uint8", false),
	dt[int16]("int16", false), dt[uint16]("uint16", false),
	dt[int32]("int32", false), dt[uint32]("uint32", false),
	dt[int64]("int64", false), dt[uint64]("uint64", false),
	dt[comm.Float16]("float16", true), dt[comm.BFloat16]("bfloat16", true),
	dt[float32]("float32", true), dt[float64]("float64", true),
}

// dtypeAliases are nccl-tests' and C's names for the same types.
var dtypeAliases = map[string]string{
	"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32", "fp32": "float32",
	"double": "float64", "fp64": "float64", "char": "int8", "int": "int32", "uint": "uint32",
}

func dtypeByName(name string) (dtypeInfo, bool) {
	if a, ok := dtypeAliases[name]; ok {
		name = a
	}
	for _, d := range dtypes {
		if d.name == name {
			return d, true
		}
	}
	return dtypeInfo{}, false
}

func dtypeNames() []string {
	out := make([]string, len(dtypes))
	for i, d := range dtypes {
		out[i] = d.name
	}
	return out
}

type redopInfo struct {
	op        comm.Op
	floatOnly bool
}

var redops = map[string]redopInfo{
	"sum": {comm.Sum, false}, "prod": {comm.Prod, false}, "min": {comm.Min, false},
	"max": {comm.Max, false}, "avg": {comm.Avg, true}, "exactsum": {comm.ExactSum, false},
}

func isFloat[T comm.Element]() bool {
	var zero T
	switch any(zero).(type) {
	case float32, float64, comm.Float16, comm.BFloat16:
		return true
	}
	return false
}

// fromF64 converts x, an integer-valued or exactly representable number,
// to T; integers wrap around as Go's conversions do.
func fromF64[T comm.Element](x float64) T {
	var zero T
	switch any(zero).(type) {
	case comm.Float16:
		return any(comm.Float16Of(float32(x))).(T)
	case comm.BFloat16:
		return any(comm.BFloat16Of(float32(x))).(T)
	case float32, float64:
		return T(x)
	}
	return fromI64[T](int64(x))
}

// fromI64 converts x to an integer T, wrapping around. Only for integer T.
func fromI64[T comm.Element](x int64) T { return T(x) }

func toF64[T comm.Element](v T) float64 {
	switch x := any(v).(type) {
	case comm.Float16:
		return float64(x.Float32())
	case comm.BFloat16:
		return float64(x.Float32())
	case float32:
		return float64(x)
	case float64:
		return x
	case int8:
		return float64(x)
	case int16:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case uint8:
		return float64(x)
	case uint16:
		return float64(x)
	case uint32:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return math.NaN()
}

// toI64 is v's bits as an integer, for integer T (wrapping arithmetic).
func toI64[T comm.Element](v T) int64 {
	switch x := any(v).(type) {
	case uint64:
		return int64(x)
	case int64:
		return x
	}
	return int64(toF64(v))
}

// epsilon is the spacing of T's numbers just above 1 (0 for integers).
func epsilon[T comm.Element]() float64 {
	var zero T
	switch any(zero).(type) {
	case comm.Float16:
		return 0x1p-10
	case comm.BFloat16:
		return 0x1p-7
	case float32:
		return 0x1p-23
	case float64:
		return 0x1p-52
	}
	return 0
}

// The known inputs. Every value is a small non-negative integer, exact in
// every type (int8 and bfloat16 included), so that results are exact too
// except where a float sum outgrows its mantissa on many ranks.

// movePeriod is the period in the element index of moveInput.
const movePeriod = 101

// moveInput is rank's element i for collectives that move data: it tells
// ranks and positions apart, so a block landing in the wrong place shows.
func moveInput(rank, i int) float64 { return float64((rank*13 + i) % movePeriod) }

// reducePeriod is the period in the element index of reduceInput.
func reducePeriod(n int) int { return 3 * n }

// reduceInput is rank's element i for reducing collectives. Every element
// mixes every rank's value and depends on i, so a missing contribution or
// a shifted block shows. For prod all ranks give 1 but one, so the product
// stays small and exact.
func reduceInput(op comm.Op, n, rank, i int) float64 {
	if op == comm.Prod {
		if rank == i%n {
			return float64(i%3 + 2)
		}
		return 1
	}
	return float64((rank+i)%n + 1 + i%3)
}

// fold reduces vals (one per rank, in rank order) with op as T's arithmetic
// would: integers wrap, floats are computed exactly and rounded once.
func fold[T comm.Element](op comm.Op, vals []T) T {
	if isFloat[T]() {
		acc := toF64(vals[0])
		for _, v := range vals[1:] {
			x := toF64(v)
			switch op {
			case comm.Sum, comm.Avg, comm.ExactSum:
				acc += x
			case comm.Prod:
				acc *= x
			case comm.Min:
				acc = math.Min(acc, x)
			case comm.Max:
				acc = math.Max(acc, x)
			}
		}
		if op == comm.Avg {
			acc /= float64(len(vals))
		}
		return fromF64[T](acc)
	}
	acc := vals[0]
	for _, v := range vals[1:] {
		switch op {
		case comm.Sum, comm.ExactSum:
			acc = fromI64[T](toI64(acc) + toI64(v))
		case comm.Prod:
			acc = fromI64[T](toI64(acc) * toI64(v))
		case comm.Min:
			if less(v, acc) {
				acc = v
			}
		case comm.Max:
			if less(acc, v) {
				acc = v
			}
		}
	}
	return acc
}

// less compares integer Ts (uint64 beyond int64's range included).
func less[T comm.Element](a, b T) bool {
	switch x := any(a).(type) {
	case uint64:
		return x < any(b).(uint64)
	}
	return toF64(a) < toF64(b)
}
