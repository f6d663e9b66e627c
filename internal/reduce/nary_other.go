//go:build !amd64 || purego

package reduce

// naryVec: no vector kernel here; ReduceN's chain of Reduce calls does it all.
func naryVec(dt DType, op Op, dst []byte, ins [][]byte) int { return 0 }
