//go:build !amd64 || purego

package shm

// streamCopy is an ordinary copy where the transport has no
// non-temporal stores of its own (see nontemporal.go).
func streamCopy(dst, src []byte) { copy(dst, src) }

// haveNonTemporal says whether streamCopy writes with non-temporal stores.
const haveNonTemporal = false
