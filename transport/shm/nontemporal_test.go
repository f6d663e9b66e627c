//go:build linux

package shm

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"
)

// TestStreamCopy copies with non-temporal stores at every alignment of
// the destination and the source, at lengths around the 64-byte lines:
// every byte must arrive, and nothing beside the destination change.
func TestStreamCopy(t *testing.T) {
	lengths := []int{0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200, 4095, 4096, 4097, 65536 + 13}
	const guard = 128
	for _, n := range lengths {
		for dOff := 0; dOff < 64; dOff += 7 {
			for sOff := 0; sOff < 16; sOff += 5 {
				src := make([]byte, sOff+n)
				for i := range src {
					src[i] = byte(i*13 + n + 1)
				}
				// A 64-byte-aligned arena, so that dOff is the
				// destination's offset from a line.
				arena := make([]byte, guard+dOff+n+guard+64)
				base := (64 - int(uintptr(sliceAddr(arena))&63)) & 63
				for i := range arena {
					arena[i] = 0xA5
				}
				dst := arena[base+guard+dOff : base+guard+dOff+n]
				streamCopy(dst, src[sOff:])
				if !bytes.Equal(dst, src[sOff:]) {
					t.Fatalf("n=%d dst+%d src+%d: the copy differs from the source", n, dOff, sOff)
				}
				for i, b := range arena {
					if (i < base+guard+dOff || i >= base+guard+dOff+n) && b != 0xA5 {
						t.Fatalf("n=%d dst+%d src+%d: byte %d outside the destination changed", n, dOff, sOff, i-(base+guard+dOff))
					}
				}
			}
		}
	}
}

// TestNonTemporalBodies sends messages on both sides of the
// non-temporal floor through real rings, after heads of every placement,
// with the floor at its default, at 1 byte (every body) and off, and
// checks every byte that arrives.
func TestNonTemporalBodies(t *testing.T) {
	for _, floor := range []int{0, 1, -1} {
		t.Run(fmt.Sprintf("floor=%d", floor), func(t *testing.T) {
			ts := pairWith(t, Options{LinkOptions: smallRings, NonTemporalMin: floor})
			if want := map[int]int{0: DefaultNonTemporalMin, 1: 1, -1: 0}[floor]; ts[0].ntMin != want {
				t.Fatalf("floor %d: the transport's floor is %d, want %d", floor, ts[0].ntMin, want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			max := ts[0].MaxMessage()
			for i, tt := range []struct{ head, body int }{
				{0, 1}, {32, 24}, {32, inlineMax - 32}, {32, inlineMax - 31},
				{16, 1000}, {48, 3000}, {63, 2048}, {0, max}, {32, max - 32}, {100, max - 100},
			} {
				want := make([]byte, tt.head+tt.body)
				for j := range want {
					want[j] = byte(i*29 + j*11 + 3)
				}
				if sent, err := ts[0].SendParts(ctx, 1, want[:tt.head], want[tt.head:], true); !sent || err != nil {
					t.Fatalf("head %d, body %d: SendParts: sent %v, %v", tt.head, tt.body, sent, err)
				}
				m, err := ts[1].Recv(ctx, 0)
				if err != nil {
					t.Fatalf("head %d, body %d: Recv: %v", tt.head, tt.body, err)
				}
				if !bytes.Equal(m.Data, want) {
					t.Fatalf("head %d, body %d: received %d bytes that differ from the %d sent", tt.head, tt.body, len(m.Data), len(want))
				}
				ts[1].Release(m)
			}
		})
	}
}

func sliceAddr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
