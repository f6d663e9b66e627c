//go:build amd64 && !purego

package shm

import "unsafe"

// streamLines copies lines 64-byte lines from src to dst, which must be
// 16-byte aligned, with non-temporal stores, and fences them.
//
//go:noescape
func streamLines(dst, src unsafe.Pointer, lines uintptr)

// streamCopy copies src into dst, as long, with non-temporal stores for
// the 64-byte lines of dst that src fills, and ordinary ones for the
// bytes before the first such line and after the last.
func streamCopy(dst, src []byte) {
	head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 63)
	if head >= len(src) {
		copy(dst, src)
		return
	}
	copy(dst[:head], src)
	lines := (len(src) - head) / 64
	mid := head + lines*64
	if lines > 0 {
		streamLines(unsafe.Pointer(&dst[head]), unsafe.Pointer(&src[head]), uintptr(lines))
	}
	copy(dst[mid:len(src)], src[mid:])
}

// haveNonTemporal says whether streamCopy writes with non-temporal stores.
const haveNonTemporal = true
