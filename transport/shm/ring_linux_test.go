package shm

import (
	"bytes"
	"testing"
)

// TestFillTailFirst checks that the out-of-order copy of an inline
// message lays out the same bytes as head followed by body, for every
// split of every inline length around the sequence word's line, and
// touches nothing past the message.
func TestFillTailFirst(t *testing.T) {
	for _, n := range []int{0, 1, firstLine - 1, firstLine, firstLine + 1, 64, 100, 2 * firstLine, 300, inlineMax} {
		for h := 0; h <= n; h++ {
			if h > 2 && h < n-2 && h%7 != 0 && h != firstLine-1 && h != firstLine && h != firstLine+1 {
				continue // every split near the line's end and the message's ends, a sample elsewhere
			}
			msg := make([]byte, n)
			for i := range msg {
				msg[i] = byte(i*31 + 7)
			}
			buf := bytes.Repeat([]byte{0xee}, n+16)
			fillTailFirst(buf[:n:n], msg[:h], msg[h:])
			if !bytes.Equal(buf[:n], msg) {
				t.Fatalf("n=%d head=%d: got %x, want %x", n, h, buf[:n], msg)
			}
			if !bytes.Equal(buf[n:], bytes.Repeat([]byte{0xee}, 16)) {
				t.Fatalf("n=%d head=%d: wrote past the message: %x", n, h, buf[n:])
			}
		}
	}
}
