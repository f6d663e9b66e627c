// Package reduce implements the element-wise reduction kernels used by the
// collective algorithms (allreduce, reduce, reduce-scatter, ...).
//
// # Design
//
// The collective algorithms move untyped bytes between ranks, so the kernels
// operate on []byte and are told the element type by a [DType]. The public
// API maps Go types onto DType; this package never sees them.
//
// [Reduce] dispatches once per call with a switch on (DType, Op) and then runs
// a tight loop over typed slices. The byte slices are reinterpreted in place
// with unsafe.Slice; no data is copied. The loops are written so that the
// compiler can drop bounds checks (operands are resliced to the length of the
// destination), and float32/float64 Sum, the common allreduce case, is
// unrolled by 8. Today every loop is portable scalar Go; the per-call
// dispatch is the place to plug in SIMD implementations (per architecture,
// selected by CPU feature detection) later without changing the API.
//
// Callers are expected to pass buffers naturally aligned for the element
// type (buffers allocated by Go, and sub-slices at offsets that are
// multiples of the element size, always are). Reduce and Scale check this
// once per call; misaligned buffers are still handled correctly, through a
// slower path that copies chunks through an aligned scratch buffer, so the
// typed views are always aligned. (Misaligned loads happen to work on amd64
// and arm64, but Go does not promise it on every architecture. checkptr,
// enabled by -race, only rejects misaligned conversions to pointer-carrying
// types, so it would not catch this.) Empty slices are never dereferenced.
//
// # Semantics
//
// Integers: Sum and Prod wrap around (two's complement, as Go arithmetic
// does); Min and Max are the ordinary ones. Avg is not defined on integers
// ([Check] reports it); the caller should Sum and divide itself.
//
// Floats: Sum and Prod are IEEE 754 operations in the element type. Min and
// Max follow Go's builtin min and max: the result is NaN if either operand is
// NaN, min(-0, +0) is -0 and max(-0, +0) is +0.
//
// Float16 and BFloat16 are stored as uint16. Each element is widened to
// float32, the operation is done in float32, and the result is rounded back
// to the 16-bit format (round to nearest, ties to even) on every call.
//
// Avg is reduced exactly as Sum; the caller divides once at the end with
// [Scale].
//
// The conversion helpers ([F16ToF32], [F32ToF16], [BF16ToF32], [F32ToBF16])
// round to nearest with ties to even, keep NaN as a quiet NaN and ±Inf as
// ±Inf, overflow to ±Inf, handle subnormals exactly and preserve -0.
package reduce
