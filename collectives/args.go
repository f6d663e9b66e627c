package collectives

import (
	"errors"
	"fmt"
	"hash/fnv"
)

// ErrInvalid reports a bad argument, found before anything was sent.
var ErrInvalid = errors.New("invalid argument")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalid)
}

// checkRoot refuses a root outside the group.
func (g *Group) checkRoot(what string, root int) error {
	if n := g.t.Size(); root < 0 || root >= n {
		return invalid("%s: root %d out of range [0, %d)", what, root, n)
	}
	return nil
}

// checkCounts refuses a count list that is not one non-negative count per
// rank, and returns the byte offsets of the blocks (n+1 of them).
func (g *Group) checkCounts(what, name string, counts []int, es int) ([]int, error) {
	n := g.t.Size()
	if len(counts) != n {
		return nil, invalid("%s: %d %s for %d ranks, want one per rank", what, len(counts), name, n)
	}
	offs := make([]int, n+1)
	for q, c := range counts {
		if c < 0 {
			return nil, invalid("%s: %s[%d] = %d is negative", what, name, q, c)
		}
		offs[q+1] = offs[q] + c*es
	}
	return offs, nil
}

// countsSum is the checksum of a count list that goes in the call header,
// so that ranks passing different lists get ErrMismatch, not garbage. It
// is never 0, which reads as "no counts".
func countsSum(counts []int) uint32 {
	h := fnv.New32a()
	var b [8]byte
	for _, c := range counts {
		for i := range b {
			b[i] = byte(uint64(c) >> (8 * i))
		}
		h.Write(b[:])
	}
	return h.Sum32() | 1
}

func total(counts []int) int {
	s := 0
	for _, c := range counts {
		s += c
	}
	return s
}
